"""mvr: multi-vector (ColBERT-style) text retrieval on Ray, from Python.

Index a corpus, search it in this process or through the service, keep it up to date, and
plan its cost. Every function here is what the ``mvr`` command runs (``mvr --help``); the
configuration objects are the ones its YAML files load (``mvr.IndexConfig`` and friends).
Nothing heavy is imported until a function is called: ``import mvr`` starts no Ray.

Examples
--------
A corpus (BEIR-style JSONL, here real text: the Python documentation), indexed and searched
in this process with every mode:

>>> import os, tempfile
>>> import mvr
>>> work = tempfile.mkdtemp()
>>> corpus = mvr.write_demo_corpus(os.path.join(work, "corpus.jsonl"), limit=40)
>>> index = os.path.join(work, "index")
>>> built = mvr.index(corpus, index)
>>> built.manifest.counts["indexed_documents"]
40
>>> mvr.build_bm25(index).version    # BM25 partitions (bm25 and hybrid modes): version 2
2
>>> with mvr.open(index, modes=mvr.SEARCH_MODES) as searcher:
...     for mode in mvr.SEARCH_MODES:
...         (result,) = searcher.search(["how do I read a JSON file"], k=3, mode=mode)
...         assert len(result.ranked.doc_ids) == 3, mode
...     allowed = ["doc:csv", "doc:json", "doc:re"]
...     (hit,) = searcher.search(["split a string by a pattern"], k=1, mode="maxsim", doc_ids=allowed)
>>> hit.hits()[0][0] in allowed
True

Documents added, deleted and compacted away, each a new version of the index:

>>> from pathlib import Path
>>> extra = Path(work, "more.jsonl")
>>> _ = extra.write_text('{"_id": "note-1", "title": "Tea", "text": "Green tea is steeped at 80 degrees.", "metadata": {"topic": "tea"}}\\n')
>>> mvr.add(index, str(extra)).manifest.version
3
>>> with mvr.open(index) as searcher:
...     (result,) = searcher.search(["how hot should the water be"], k=5, filter="topic = 'tea'")
>>> result.hits()[0][0]
'note-1'
>>> mvr.stats(index)["documents"]
41
>>> mvr.delete(index, ["note-1"]).manifest.counts["deleted_passages"]
1
>>> mvr.compact(index).manifest.version
5
>>> s = mvr.stats(index)
>>> s["documents"], s["deleted_passages"]
(40, 0)
>>> mvr.verify(index).ok
True
"""

from __future__ import annotations

import os as _os
from typing import Any


def _source_checkout() -> None:
    """In a source checkout that is not installed (``python -m pytest`` from the root, a Ray
    job whose working dir is the repository), the folders beside this one are mvr's
    sub-packages: ``mvr.pipeline`` is ``<root>/pipeline``."""
    root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if _os.path.isfile(_os.path.join(root, "pyproject.toml")) and _os.path.isfile(_os.path.join(root, "pipeline", "__init__.py")):
        if root not in __path__:
            __path__.append(root)


_source_checkout()

MODES = ("maxsim", "softmax-centroid", "first-m", "pooled")
"""The dense modes (``Searcher`` loads them by default; ``operators.retrieval.scoring.MODES``,
written out here so that ``import mvr`` loads nothing)."""
SEARCH_MODES = (*MODES, "bm25", "hybrid")
"""Every mode a query can ask for (``bm25`` and ``hybrid`` need ``build_bm25`` first)."""
FUSIONS = ("weighted", "rrf")
"""How ``hybrid`` fuses its dense and BM25 rankings (``SearchConfig.hybrid.fusion``)."""
# the API's functions (mvr/api.py) and types, each imported on first use
_FUNCTIONS = (
    *("add", "build_ann", "build_bm25", "client", "compact", "delete", "index", "open", "plan", "serve", "stats", "stop_serving", "train", "verify"),
    *("check_query", "check_filter", "evaluate", "compare", "tune_hybrid", "scale_study", "demo"),
)
_LAZY = {
    **{name: "mvr.api" for name in (*_FUNCTIONS, "write_demo_corpus")},
    **{
        name: "mvr.pipeline.config"
        for name in (
            "IndexConfig",
            "SearchConfig",
            "ServeConfig",
            "AnnBuildConfig",
            "BM25BuildConfig",
            "TrainConfig",
            "EvalConfig",
            "TuneHybridConfig",
            "ScaleStudyConfig",
        )
    },
    **{name: "mvr.pipeline.results" for name in ("IndexResult", "AnnBuildResult", "UpdateResult", "TrainResult", "DemoResult")},
    "Searcher": "mvr.pipeline.retrieval.searcher",
    "SearchResult": "mvr.pipeline.retrieval.plan",
    "SearchClient": "mvr.pipeline.serving.client",
    "Deployment": "mvr.pipeline.serving.deployment",
    "VerifyReport": "mvr.storage.verify",
    "CapacityPlan": "mvr.operators.planning.capacity",
    "FilterError": "mvr.operators.retrieval.filters",
}


def __getattr__(name: str) -> Any:
    """The API's functions, the configuration classes and the result types, imported on
    first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mvr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["MODES", "SEARCH_MODES", "FUSIONS", *_FUNCTIONS, "write_demo_corpus", *(n for n in _LAZY if n[0].isupper())]
