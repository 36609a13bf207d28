"""The functions of the Python API (``import mvr``: ``mvr/__init__.py`` loads this module on
first use of any of them, so that ``import mvr`` imports nothing heavy). Their signatures name
real classes (``typing.get_type_hints`` resolves each); their bodies import the pipeline
(Ray, torch) only when called."""

from __future__ import annotations

import os as _os
from typing import Any, Callable, Optional, Sequence

from mvr.operators.planning.capacity import CapacityPlan
from mvr.operators.retrieval.scoring import MODES
from mvr.pipeline.config import (
    AnnBuildConfig,
    BM25BuildConfig,
    EvalConfig,
    IndexConfig,
    ScaleStudyConfig,
    SearchConfig,
    ServeConfig,
    TrainConfig,
    TuneHybridConfig,
)
from mvr.pipeline.results import AnnBuildResult, DemoResult, IndexResult, TrainResult, UpdateResult
from mvr.pipeline.retrieval.evaluation import Evaluation
from mvr.pipeline.retrieval.hybrid_tuning import TuneResult
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.pipeline.serving.client import SearchClient
from mvr.pipeline.serving.deployment import Deployment
from mvr.pipeline.studies.scale_study import ScaleStudyResult
from mvr.storage.integrity import FileCheck
from mvr.storage.manifest import Manifest
from mvr.storage.verify import VerifyReport

Log = Optional[Callable[[str], None]]


def _log(log: Log) -> Callable[[str], None]:
    return log if log is not None else (lambda _: None)


def write_demo_corpus(path: str, limit: int = 600) -> str:
    """Write the demo corpus (real text that ships with Python: its language reference and
    standard-library docstrings, ``mvr demo``'s corpus) as BEIR-style JSONL.

    Parameters
    ----------
    path : str
        The ``.jsonl`` file to write (path or fsspec URL).
    limit : int
        Documents at most; the selection is deterministic for a Python version.

    Returns
    -------
    str
        ``path``.
    """
    from mvr.pipeline.studies.demo_corpus import build_demo_corpus
    from mvr.storage.jsonl import write_jsonl

    write_jsonl(path, build_demo_corpus(limit))
    return path


def index(corpus: str, index: str, config: Optional[IndexConfig] = None, overwrite: bool = False, log: Log = None) -> IndexResult:
    """Build an index of a corpus with Ray Data (``mvr index``): tokenize, encode, compress,
    write Parquet shards, the catalog and the manifest.

    Parameters
    ----------
    corpus : str
        A BEIR directory, ``.jsonl``, ``.parquet`` or ``.tsv`` (path or fsspec URL).
    index : str
        The index directory to create.
    config : IndexConfig, optional
        Model, encoding, compression and runtime settings (default: ``IndexConfig()``;
        ``IndexConfig.from_yaml(path)`` loads a file).
    overwrite : bool
        Replace an index already at ``index``.
    log : callable, optional
        Receives progress lines (default: quiet).

    Returns
    -------
    IndexResult
        ``manifest`` (the committed version: ``counts``, ``version``, ...), ``seconds`` and a
        one-line ``summary``.
    """
    from mvr.pipeline.indexing.corpus_job import index_corpus

    return index_corpus(corpus, index, config or IndexConfig(), overwrite=overwrite, log=_log(log))


def build_ann(index: str, config: Optional[AnnBuildConfig] = None, force: bool = False, log: Log = None) -> AnnBuildResult:
    """Partitioned ANN indexes (FAISS IVFPQ or ScaNN) over an index's vectors (``mvr
    build-ann``); without them every dense mode is answered by exact search.

    Parameters
    ----------
    index : str
        The index directory.
    config : AnnBuildConfig, optional
        Backend, partitions, vector kinds (default: ``AnnBuildConfig()``).
    force : bool
        Rebuild partitions that are up to date.
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    AnnBuildResult
        ``manifest`` (the committed version), ``built`` (each kind's entry), ``seconds``.
    """
    from mvr.pipeline.indexing.ann_build import build_ann as run

    return run(index, config or AnnBuildConfig(), log=_log(log), force=force)


def build_bm25(index: str, config: Optional[BM25BuildConfig] = None, log: Log = None) -> Manifest:
    """BM25 partitions over an index's passages (``mvr build-bm25``): the ``bm25`` and
    ``hybrid`` modes.

    Parameters
    ----------
    index : str
        The index directory.
    config : BM25BuildConfig, optional
        Partitions and analyzer (default: ``BM25BuildConfig()``).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    Manifest
        The committed version with its ``bm25`` entry.
    """
    from mvr.pipeline.indexing.bm25_build import build_bm25 as run

    return run(index, config or BM25BuildConfig(), log=_log(log))


def open(index: str, modes: Sequence[str] = MODES, config: Optional[SearchConfig] = None) -> Searcher:
    """Open an index for search in this process: the same query plan the service runs.

    Parameters
    ----------
    index : str
        The index directory (its latest committed version).
    modes : sequence of str
        Modes to load (``MODES`` by default; ``SEARCH_MODES`` for all, ``bm25`` and
        ``hybrid`` needing ``build_bm25``).
    config : SearchConfig, optional
        First-stage and fusion settings, or ``exact=True``.

    Returns
    -------
    Searcher
        ``search(queries, k, mode, filter=None, doc_ids=None, **knobs)`` → one
        ``SearchResult`` a query (``hits()``: (doc id, score) best first); a context manager
        that closes the index's catalog.
    """
    from mvr.pipeline.retrieval.searcher import Searcher

    return Searcher(index, modes, config)


def add(index: str, corpus: str, force: bool = False, log: Log = None) -> UpdateResult:
    """Add documents to an index as a new version (``mvr add``); a document id already
    present replaces that document.

    Parameters
    ----------
    index : str
        The index directory.
    corpus : str
        Documents in any format ``index`` reads.
    force : bool
        Add again an input whose bytes an earlier add committed.
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    UpdateResult
        ``manifest`` (the new version), ``summary`` and ``seconds``.
    """
    from mvr.pipeline.indexing.updates import add_documents

    return add_documents(corpus, index, log=_log(log), force=force)


def delete(index: str, doc_ids: Optional[Sequence[str]] = None, where: Optional[str] = None, log: Log = None) -> UpdateResult:
    """Delete documents (their ids, and / or those a filter expression selects,
    ``docs/filters.md``) as a new version (``mvr delete``).

    Returns
    -------
    UpdateResult
        ``manifest`` (the new version; ``counts["deleted_passages"]``) and ``summary``.
    """
    from mvr.pipeline.indexing.updates import delete_documents

    return delete_documents(index, doc_ids, where, log=_log(log))


def compact(index: str, retrain: Optional[bool] = None, log: Log = None) -> UpdateResult:
    """Rewrite an index without its deleted passages (``mvr compact``); ``retrain`` forces
    (True) or forbids (False) retraining the codecs that the drift rule would decide."""
    from mvr.pipeline.indexing.compaction import compact as run

    return run(index, log=_log(log), retrain=retrain)


def train(data: str, out: str, config: Optional[TrainConfig] = None, log: Log = None, restart: bool = False) -> TrainResult:
    """Train an encoder for a search mode on Ray Train, the mode's aggregator in the loss
    (``mvr train``, docs/training.md). ``data``: a corpus (unsupervised pairs), a BEIR
    directory with ``qrels/train.tsv`` or a JSONL of pairs; ``out`` becomes a PyLate /
    sentence-transformers checkpoint that ``mvr.index(..., config)`` loads as ``model.name``.
    Called again with the same arguments, a stopped run resumes from its last checkpoint.

    Returns
    -------
    TrainResult
        ``out``, ``steps``, ``pairs``, the last ``metrics`` and ``seconds``.
    """
    from mvr.pipeline.training.trainer import train as run

    return run(data, out, config or TrainConfig(), log=_log(log), restart=restart)


def stats(index: str) -> dict[str, Any]:
    """Counts, rejects, codecs and bytes a vector of an index (``mvr stats``)."""
    from mvr.pipeline.indexing.index_info import index_stats

    return index_stats(index)


def verify(index: str, workers: int = 4, progress: Optional[Callable[[FileCheck], None]] = None, manifest: Optional[Manifest] = None) -> VerifyReport:
    """Check every file the index's manifest lists, its size and sha256 (``mvr verify``);
    ``progress`` is called with each file's check, ``manifest`` saves reading it again.

    Returns
    -------
    VerifyReport
        ``ok`` and the ``problems`` found.
    """
    from mvr.storage.verify import verify_index

    return verify_index(index, workers=workers, progress=progress, manifest=manifest)


def plan(passages: int, **workload: Any) -> CapacityPlan:
    """The capacity plan of an index of ``passages`` passages (``mvr plan``): storage, RAM,
    partitions and encode hours, with no index built and nothing heavy imported.

    Parameters
    ----------
    passages : int
        Passages after splitting.
    **workload
        Other ``Workload`` fields (``tokens_per_passage``, ``dim``, ``codec``, ...) and
        ``ann`` / ``serve`` / ``throughput`` settings objects.

    Examples
    --------
    The storage of a billion passages with the default model and codecs, in TB:

    >>> import mvr
    >>> round(mvr.plan(10**9).storage_bytes / 1e12, 2)
    4.99
    """
    from mvr.operators.planning.capacity import AnnSettings, ServeSettings, Throughput, Workload, make_plan

    ann = workload.pop("ann", None) or AnnSettings()
    serve = workload.pop("serve", None) or ServeSettings()
    throughput = workload.pop("throughput", None) or Throughput()
    return make_plan(Workload(passages=passages, **workload), ann, serve, throughput)


def serve(index: str, config: Optional[ServeConfig] = None, token: Optional[str] = None, log: Log = None, address: Optional[str] = None) -> Deployment:
    """Serve an index with Ray Serve (``mvr serve``): the ingress, the query encoder and one
    deployment a partition, at ``config.host:config.port``, and the reloader that moves the
    service to a newer committed version (``POST /admin/reload`` with a token, or polling every
    ``config.reload_poll_s``); ``stop_serving(config)`` ends both.

    Parameters
    ----------
    index : str
        The index directory (its latest committed version).
    config : ServeConfig, optional
        Host, port, replicas, timeouts and search defaults.
    token : str, optional
        Require it as a bearer token (default: ``$MVR_TOKEN`` when set, as the client).
    log : callable, optional
        Receives progress lines.
    address : str, optional
        The Ray cluster to join (default: ``$RAY_ADDRESS``, the cluster this process is
        connected to, or a new local one).

    Returns
    -------
    Deployment
        ``url`` and the layout served.

    Examples
    --------
    >>> import os, tempfile
    >>> import mvr
    >>> work = tempfile.mkdtemp()
    >>> corpus = mvr.write_demo_corpus(os.path.join(work, "corpus.jsonl"), limit=20)
    >>> index = os.path.join(work, "index")
    >>> _ = mvr.index(corpus, index)
    >>> config = mvr.ServeConfig(port=8765)
    >>> service = mvr.serve(index, config)
    >>> with mvr.client(service.url) as c:
    ...     answer = c.search("format a date as text", k=2, mode="maxsim")
    >>> len(answer["results"])
    2
    >>> mvr.stop_serving(config)
    """
    from mvr.pipeline.serving.app import deploy, start_reloader
    from mvr.pipeline.serving.client import TOKEN_ENV

    config = config or ServeConfig()
    token = token if token is not None else _os.environ.get(TOKEN_ENV)
    deployment = deploy(index, config, token, log=_log(log), address=address)
    start_reloader(index, config, token, deployment.version)
    return deployment


def stop_serving(config: Optional[ServeConfig] = None) -> None:
    """Delete the service ``serve`` started with ``config`` (None: all of Serve)."""
    from mvr.pipeline.serving.app import shutdown

    shutdown(config)


def client(url: str, token: Optional[str] = None, timeout: float = 60.0) -> SearchClient:
    """A client of a running service: ``search(query, k, mode, **filters_and_knobs)``,
    ``search_batch``, ``stats``; a context manager.

    Parameters
    ----------
    url : str
        The service's base URL (``http://host:8000``).
    token : str, optional
        Bearer token (default: ``$MVR_TOKEN`` when set).
    timeout : float
        Seconds a request.
    """
    from mvr.pipeline.serving.client import SearchClient

    return SearchClient(url, token, timeout)


def check_query(query: str, k: int = 10, mode: str = "maxsim", config: Optional[SearchConfig] = None, **knobs: Any) -> None:
    """Check a query before any index or model is read: its text, ``k``, mode and knobs
    (``Searcher.search``'s) against ``config``; a ValueError names what is wrong."""
    from mvr.pipeline.retrieval.request import request_settings, validate_request

    validate_request(query, k, mode)
    request_settings(config or SearchConfig(), mode, knobs)


def check_filter(filter: str, index: Optional[str] = None) -> None:
    """Check a metadata filter (docs/filters.md): its syntax, and with ``index`` its columns,
    reading only the index's catalog (no model); ``FilterError``, a ValueError, names what is
    wrong."""
    from mvr.operators.retrieval.filters import parse

    parse(filter)
    if index is None:
        return
    from mvr.storage.catalog import Catalog

    catalog = Catalog(index)
    try:
        catalog.compile_filter(filter)
    finally:
        catalog.close()


def evaluate(index: str, config: Optional[EvalConfig] = None, filter: Optional[str] = None, log: Log = None) -> Evaluation:
    """Search a BEIR collection's judged queries with every mode of ``config`` and measure
    them with ir-measures (``mvr eval``): nDCG@10, RR@10, R@100, latencies, the overlap with
    exact search, and a sweep of one knob.

    Parameters
    ----------
    index : str
        The index of the collection's corpus.
    config : EvalConfig, optional
        The dataset (required), split, modes, k, search settings and sweep.
    filter : str, optional
        A metadata filter every search applies (docs/filters.md).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    Evaluation
        Per mode its figures (``modes``), the sweep, and ``to_json``.
    """
    from mvr.pipeline.retrieval.evaluation import evaluate as run

    return run(index, config or EvalConfig(), log=_log(log), filter=filter)


def compare(index: str, baseline: str, config: Optional[EvalConfig] = None) -> dict[str, dict[str, float]]:
    """Exact nDCG@10 of every dense mode of ``config`` on two indexes of one collection
    (``mvr eval --baseline``), paired by query.

    Returns
    -------
    dict
        Per mode: ``base``, ``index``, ``delta`` (index − baseline) and ``se`` (its standard
        error over the queries).
    """
    from mvr.pipeline.retrieval.evaluation import compare_exact, exact_quality

    config = config or EvalConfig()
    modes = [m for m in config.modes if m != "hybrid"]
    return compare_exact(exact_quality(config.dataset, baseline, modes, config.split), exact_quality(config.dataset, index, modes, config.split), modes)


def tune_hybrid(index: str, config: Optional[TuneHybridConfig] = None, batch: Optional[int] = None, log: Log = None) -> TuneResult:
    """Tune the hybrid's fusion weight λ on a BEIR collection by cross-validation over its
    judged queries (``mvr tune-hybrid``): each fold reported with the λ the other folds chose.

    Parameters
    ----------
    index : str
        An index of the collection with BM25 partitions (``build_bm25``).
    config : TuneHybridConfig, optional
        The dataset (required), split, folds, grid of λ and metric.
    batch : int, optional
        Queries whose unions are taken in one trip (default: all of them).
    log : callable, optional
        Receives progress lines.
    """
    from mvr.pipeline.retrieval.hybrid_tuning import tune_hybrid as run

    return run(index, config or TuneHybridConfig(), log=_log(log), batch=batch)


def scale_study(config: ScaleStudyConfig, log: Log = None) -> ScaleStudyResult:
    """How each method's quality holds as the collection grows (``mvr scale-study``):
    distractor passages, random strings and dimension cuts (docs/scale_study.md).

    Parameters
    ----------
    config : ScaleStudyConfig
        The dataset (required), sizes, methods, and indexes already built per corpus.
    log : callable, optional
        Receives progress lines.
    """
    from mvr.pipeline.studies.scale_study import scale_study as run

    return run(config, log=_log(log))


def demo(
    workdir: str,
    limit: Optional[int] = None,
    k: int = 3,
    config: Optional[IndexConfig] = None,
    serve_config: Optional[ServeConfig] = None,
    quiet: bool = False,
    log: Log = None,
) -> DemoResult:
    """The demo (``mvr demo``): real text (``write_demo_corpus``) indexed in ``workdir``, ANN
    and BM25 partitions built, served, asked a few queries over HTTP, shut down.

    Parameters
    ----------
    workdir : str
        Where the corpus and the index go (a rerun reuses what is up to date).
    limit : int, optional
        Documents in the corpus (default: the demo's).
    k : int
        Results a query.
    config, serve_config : optional
        The index's and the service's configurations.
    quiet : bool
        Start a local Ray whose own output stays in its log directory (and stop it after).
    log : callable, optional
        Receives progress lines.
    """
    from contextlib import nullcontext

    from mvr.pipeline.studies.demo import quiet_ray, run_demo
    from mvr.pipeline.studies.demo_corpus import DEFAULT_LIMIT

    with quiet_ray(log=_log(log)) if quiet else nullcontext():
        return run_demo(workdir, limit or DEFAULT_LIMIT, k, log=_log(log), config=config, serve_config=serve_config)
