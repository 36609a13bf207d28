"""Shared fixtures: dataset locations and a session-wide local Ray cluster."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import s3_endpoint

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("MVR_DATASETS", ROOT.parent / "shared" / "datasets"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
s3_endpoint.configure_environment()  # before any Ray starts: its workers inherit the endpoint (tests/s3_endpoint.py)
# Ray's own background work, which no test reads, turned down for every node the run starts (the
# workers' embedded clusters, tests/cluster.py's nodes, the `mvr` processes'): the metrics each
# worker exports every 10 s, the dashboard agent's per-process sweep every 5 s (every 60 s here;
# the state API the tests use does not read it) and the log monitor's search for new log files
# every 0.1 s (every 0.5 s; it still reads new lines every 0.1 s). What they cost a run:
# docs/development.md (benchmarks/cpu_by_process.py)
os.environ.setdefault("RAY_enable_metrics_collection", "0")
os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
# the node-local cache of remote indexes' files (storage/local_cache.py): the run's own, not the
# user's ~/.cache/mvr; made by the process that imports this first (xdist's controller, whose
# environment its workers and their Ray inherit) and removed when it exits
if "MVR_TESTS_NODE_CACHE" not in os.environ:
    os.environ["MVR_TESTS_NODE_CACHE"] = os.environ["MVR_CACHE_DIR"] = tempfile.mkdtemp(prefix="mvr-tests-node-cache-")
    atexit.register(shutil.rmtree, os.environ["MVR_TESTS_NODE_CACHE"], True)


@pytest.fixture(scope="session")
def datasets() -> Path:
    if not (DATASETS / "msmarco-sample" / "corpus.jsonl").exists():
        pytest.fail(f"test collections not found at {DATASETS} (set MVR_DATASETS)")
    return DATASETS


@pytest.fixture(scope="session")
def s3():
    """This worker's S3 endpoint on loopback (moto's server, tests/s3_endpoint.py)."""
    endpoint = s3_endpoint.MotoEndpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="session")
def minilm_tokenizer():
    from mvr.operators.encode.checkpoint import load_tokenizer

    return load_tokenizer("minilm")


@pytest.fixture(scope="session")
def ray_address() -> str:
    """The address of this session's embedded Ray cluster (started if need be), for the
    ``mvr`` processes a test starts: they join it as jobs of their own, as ``mvr add`` joins a
    running cluster (``RAY_ADDRESS``), instead of starting a cluster each (~6 s here)."""
    import ray

    from mvr.pipeline.ray_runtime import init_ray

    init_ray()
    return ray.get_runtime_context().gcs_address


@pytest.fixture(scope="session")
def fixture_cache(request, tmp_path_factory):
    """The cache of built indexes across runs (tests/fixture_cache.py: ``$MVR_TEST_CACHE`` or
    ``~/.cache/mvr-tests``; ``--fresh-fixtures`` rebuilds each entry once in this run)."""
    from fixture_cache import FixtureCache

    base = tmp_path_factory.getbasetemp()
    run_dir = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # shared by the run's workers
    return FixtureCache(fresh=request.config.getoption("--fresh-fixtures"), fresh_marks=run_dir / "fresh-fixtures")


def _recipe(corpus: Path, config=None) -> dict:
    """The cache recipe of ``corpus`` (a file) indexed with ``config`` (an IndexConfig; None:
    the defaults): the corpus's sha256 and every index setting."""
    from fixture_cache import file_sha256
    from mvr.pipeline.config import IndexConfig

    return {"corpus": file_sha256(Path(corpus)), "index": (config or IndexConfig()).model_dump(mode="json")}


def _index(fixture_cache, datasets: Path, name: str) -> str:
    """The whole collection ``name`` indexed with the default settings (cached across runs)."""
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    def build(path: Path) -> None:
        result = index_corpus(str(datasets / name), str(path), IndexConfig())
        assert not result.up_to_date

    return str(fixture_cache.get(name, _recipe(datasets / name / "corpus.jsonl"), build))


def _variant(fixture_cache, base: str, name: str, ann=None, bm25=None) -> str:
    """A copy of the cached index ``base`` with the ANN build ``ann`` (an AnnBuildConfig; its
    ``bm25`` setting builds BM25 beside it) and / or the BM25 build ``bm25`` (a
    BM25BuildConfig), cached across runs as an entry of its own: no test builds into a shared
    index in place."""
    import json

    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.bm25_build import build_bm25

    recipe = {
        "base": json.loads((Path(base).parent / "entry.json").read_text())["key"],
        "ann": ann.model_dump(mode="json") if ann is not None else None,
        "bm25": bm25.model_dump(mode="json") if bm25 is not None else None,
    }

    def build(path: Path) -> None:
        shutil.copytree(base, path)
        if ann is not None:
            build_ann(str(path), ann, log=lambda _: None)
        if bm25 is not None:
            build_bm25(str(path), bm25, log=lambda _: None)

    return str(fixture_cache.get(name, recipe, build))


@pytest.fixture(scope="session")
def msmarco_corpus_with_metadata(tmp_path_factory, datasets) -> dict:
    """msmarco-sample's corpus.jsonl with every document's metadata computed from itself and
    three rows whose metadata cannot be stored (tests/metadata_corpus.py). {"corpus": the
    file, "docs": the valid documents as written}."""
    from metadata_corpus import write_corpus

    corpus = tmp_path_factory.mktemp("meta-corpus") / "corpus.jsonl"
    docs = write_corpus(datasets / "msmarco-sample" / "corpus.jsonl", corpus)
    return {"corpus": str(corpus), "docs": docs}


@pytest.fixture(scope="session")
def msmarco_index(fixture_cache, msmarco_corpus_with_metadata) -> str:
    """The whole msmarco-sample corpus indexed with the default (reference) settings (cached
    across runs). It is read from the metadata copy (same ids, titles and texts; the three
    bad-metadata rows are rejects), so that one encoding of the collection serves the search
    tests and the filter tests alike."""
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    def build(path: Path) -> None:
        result = index_corpus(msmarco_corpus_with_metadata["corpus"], str(path), IndexConfig())
        assert not result.up_to_date

    return str(fixture_cache.get("msmarco-sample", _recipe(msmarco_corpus_with_metadata["corpus"]), build))


@pytest.fixture(scope="session")
def dbpedia_index(fixture_cache, datasets) -> str:
    """The whole dbpedia-sample corpus indexed with the default (reference) settings."""
    return _index(fixture_cache, datasets, "dbpedia-sample")


@pytest.fixture(scope="session")
def cranfield_index(fixture_cache, datasets) -> str:
    """The whole cranfield collection (aeronautics abstracts: text far from the model's
    training data) indexed with the default settings."""
    return _index(fixture_cache, datasets, "cranfield")


# The ANN builds of the session indexes: every build parameter and search knob at its default
# but a smaller training sample (65,536 by default) and, for ScaNN, plain instead of
# anisotropic codes (half the build time); benchmarks.md has the builds at the full defaults.
SMALL_SAMPLE = {"training_sample_size": 8192}


def ann_build(backend: str, partitions: int, **settings):
    from mvr.pipeline.config import AnnBuildConfig

    params = dict(SMALL_SAMPLE, **({"anisotropic_quantization_threshold": None} if backend == "scann" else {}))
    return AnnBuildConfig(backend=backend, partitions=partitions, params=params, cpus_per_task=1, **settings)


@pytest.fixture(scope="session")
def msmarco_faiss2(fixture_cache, msmarco_index) -> str:
    """``msmarco_index`` with FAISS IVFPQ partitions (P = 2) of every vector kind and BM25 in
    the same two partitions: what test_search_ann measures, test_serve serves (a copy),
    test_hybrid's msmarco side and the filter tests search."""
    return _variant(fixture_cache, msmarco_index, "msmarco-faiss2", ann=ann_build("faiss-ivfpq", 2))


@pytest.fixture(scope="session")
def msmarco_scann1(fixture_cache, msmarco_index) -> str:
    """``msmarco_index`` with ScaNN partitions (P = 1) of every vector kind, no BM25."""
    return _variant(fixture_cache, msmarco_index, "msmarco-scann1", ann=ann_build("scann", 1, bm25=None))


@pytest.fixture(scope="session")
def dbpedia_faiss4(fixture_cache, dbpedia_index) -> str:
    """``dbpedia_index`` with FAISS IVFPQ partitions (P = 4) of every vector kind, no BM25."""
    return _variant(fixture_cache, dbpedia_index, "dbpedia-faiss4", ann=ann_build("faiss-ivfpq", 4, bm25=None))


@pytest.fixture(scope="session")
def dbpedia_codec_ivf1(fixture_cache, dbpedia_index) -> str:
    """``dbpedia_index`` with codec-ivf partitions (P = 1) of every vector kind, no BM25:
    tokens in lists over the token codec's centroids, the other kinds over k-means cells."""
    return _variant(fixture_cache, dbpedia_index, "dbpedia-codec-ivf1", ann=ann_build("codec-ivf", 1, bm25=None))


@pytest.fixture(scope="session")
def dbpedia_bm25(fixture_cache, dbpedia_index) -> str:
    """``dbpedia_index`` with BM25 in one partition (no ANN: dense search is exact)."""
    from mvr.pipeline.config import BM25BuildConfig

    return _variant(fixture_cache, dbpedia_index, "dbpedia-bm25", bm25=BM25BuildConfig(partitions=1))


@pytest.fixture(scope="session")
def cranfield_bm25(fixture_cache, cranfield_index) -> str:
    """``cranfield_index`` with BM25 in one partition (no ANN: dense search is exact)."""
    from mvr.pipeline.config import BM25BuildConfig

    return _variant(fixture_cache, cranfield_index, "cranfield-bm25", bm25=BM25BuildConfig(partitions=1))


@pytest.fixture(scope="session")
def msmarco_100(fixture_cache, datasets) -> str:
    """The first 100 msmarco-sample passages in 3 shards (~8,000 token vectors: IVFPQ at 7
    bits), FAISS partitions (P = 1) of tokens and pooled, BM25. Tests copy it to change it."""
    from mvr.pipeline.config import AnnBuildConfig, IndexConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus

    config = IndexConfig.from_yaml(None, **{"limit": 100, "runtime.write_rows_per_shard": 40})
    ann = AnnBuildConfig(backend="faiss-ivfpq", partitions=1, vectors=["tokens", "pooled"])  # the partitions test_capacity_plan sizes

    def build(path: Path) -> None:
        index_corpus(str(datasets / "msmarco-sample"), str(path), config, log=lambda _: None)
        build_ann(str(path), ann, log=lambda _: None)

    recipe = {**_recipe(datasets / "msmarco-sample" / "corpus.jsonl", config), "ann": ann.model_dump(mode="json")}
    return str(fixture_cache.get("msmarco-100", recipe, build))


@pytest.fixture(scope="session")
def msmarco_meta_index(msmarco_faiss2, msmarco_corpus_with_metadata) -> dict:
    """``msmarco_faiss2`` (msmarco-sample with derived metadata and three rejected rows,
    FAISS IVFPQ P = 2 of every kind, BM25) for the filter tests. {"index", "corpus", "docs"}."""
    return {"index": msmarco_faiss2, **msmarco_corpus_with_metadata}


@pytest.fixture(scope="session")
def serve_port(ray_address) -> int:
    """The port of this worker's one Ray Serve HTTP proxy, started once: each module deploys
    its application under its own name on it and deletes it at teardown; none shuts Serve
    down (a restart costs seconds, and a proxy starting under load can be killed by Serve's
    health check)."""
    from cluster import free_ports
    from mvr.pipeline.config import ServeConfig
    from mvr.pipeline.serving.app import start_serve

    port = free_ports(1)[0]
    start_serve(ServeConfig(port=port))
    return port


def serve_config(port: int, app_name: str, **settings):
    """A ServeConfig for a module's own application on the worker's Serve (``serve_port``)."""
    from mvr.pipeline.config import ServeConfig

    return ServeConfig.model_validate({"port": port, "app_name": app_name, **settings})


SLOW_FIXTURES = {
    "msmarco_index",
    "dbpedia_index",
    "cranfield_index",
    "msmarco_100",
    "msmarco_meta_index",
    "msmarco_faiss2",
    "msmarco_scann1",
    "dbpedia_faiss4",
    "dbpedia_bm25",
    "cranfield_bm25",
    "serve_port",
}


# The modules that take longest, longest first. With ``-n 2 --dist loadfile`` (pyproject's
# addopts) pytest-xdist hands whole modules to its two workers in collection order, so the long
# ones start first and the short ones fill the gaps (longest-processing-time first); the rest
# keep their file order. On a cold run (an empty fixture cache) test_search_ann, first on its
# worker, builds the whole-collection fixtures, which the later ones read; the modules the other
# worker takes after the cluster tests read only msmarco-sample's (built first), and
# test_hybrid, which builds dbpedia's and cranfield's BM25 from their indexes, comes after
# them (before it came third, and in a cold run each worker waited for the other's locks on
# dbpedia and cranfield: ~75 idle core-seconds).
LONGEST_FIRST = (
    "test_cluster_jobs",
    "test_search_ann",
    "test_filters",
    "test_serve",
    "test_updates",
    "test_train",
    "test_hybrid",
    "test_serve_live",
    "test_startup_retry",
    "test_api",
    "test_demo",
    "test_updates_concurrency",
    "test_index_msmarco",
    "test_openapi_contract",
    "test_full_disk",
    "test_deploy_damaged",
    "test_tiny_corpora",
    "test_resume",
    "test_slow_clients",
    "test_partition_memory",
    "test_capacity_plan",
    "test_cli_errors",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    """Every test that starts Ray or needs an indexed collection is ``slow`` (the fast lane,
    ``-m "not slow"``, is the rest). The modules run longest first (``LONGEST_FIRST``): the
    multi-node cluster tests first of all, before a session's embedded Ray cluster is
    started (idle daemons share the cores: measured, the module took ~15 % longer after the
    other tests than alone)."""
    for item in items:
        if item.get_closest_marker("ray") or item.get_closest_marker("peers") or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(getattr(item.module, "__name__", ""), len(rank)))


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--fresh-fixtures",
        action="store_true",
        default=False,
        help="rebuild every cached index fixture this run uses (tests/fixture_cache.py), once in the run",
    )
    parser.addoption(
        "--cpu-profile",
        metavar="FILE",
        default=None,
        help="write each test's wall seconds and the machine's busy and stolen core-seconds over it "
        "(setup, call and teardown, from /proc/stat: Ray's workers and subprocesses included; under "
        "xdist, the other worker's too) to FILE as TSV, and print them per module and for the whole run",
    )


def _core_seconds() -> tuple[float, float]:
    """(busy, stolen): seconds all CPUs of this machine have spent busy (user, system,
    interrupts; not idle, waiting on I/O or stolen by the hypervisor) and seconds stolen
    from them, since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    steal = ticks[7] if len(ticks) > 7 else 0
    return (sum(ticks[:8]) - ticks[3] - ticks[4] - steal) / hz, steal / hz


_PROFILE: list[tuple[str, float, float, float, str]] = []  # test, wall s, busy and stolen core-s, worker
_RUN_START: list[tuple[float, float, float]] = []  # (monotonic s, busy, stolen) at the session's start
_START_KEY = pytest.StashKey[tuple[float, float, float]]()  # the same at a test's setup


def pytest_sessionstart(session) -> None:
    _RUN_START.append((time.monotonic(), *_core_seconds()))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    if item.config.getoption("--cpu-profile"):
        item.stash[_START_KEY] = (time.monotonic(), *_core_seconds())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ``--cpu-profile``, the teardown report carries the test's wall seconds and the
    machine's busy and stolen core-seconds since its setup began (as a user property, which
    pytest-xdist sends from its workers to the controller that prints the summary)."""
    outcome = yield
    if call.when == "teardown" and _START_KEY in item.stash:
        t0, busy0, steal0 = item.stash[_START_KEY]
        busy1, steal1 = _core_seconds()
        outcome.get_result().user_properties.append(("cpu_profile", (time.monotonic() - t0, busy1 - busy0, steal1 - steal0)))


def pytest_runtest_logreport(report) -> None:
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == "cpu_profile":
            node = getattr(report, "node", None)  # xdist: the worker that ran it
            _PROFILE.append((report.nodeid, *value, getattr(getattr(node, "gateway", None), "id", "-")))


def pytest_sessionfinish(session) -> None:
    out = session.config.getoption("--cpu-profile")
    if out and _PROFILE and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(out, "w") as f:
            f.write("test\twall_s\tbusy_core_s\tstolen_core_s\tworker\n")
            f.writelines(f"{name}\t{wall:.2f}\t{busy:.2f}\t{stolen:.2f}\t{worker}\n" for name, wall, busy, stolen, worker in _PROFILE)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """With ``--cpu-profile``: per module, wall seconds, busy core-seconds, the idle
    core-seconds of the machine's cores over its tests (where a suite on few cores waits
    rather than works) and those the hypervisor stole (a slow VM, not a slow suite), the
    slowest first; then the whole run's. Under xdist two modules run at once, so a module's
    busy and idle core-seconds are the machine's while it ran (the other worker's included)
    and the modules' wall seconds add up to more than the run's."""
    if not config.getoption("--cpu-profile") or not _PROFILE:
        return
    cores = os.cpu_count() or 1
    modules: dict[str, list[float]] = {}
    for name, wall, busy, stolen, _ in _PROFILE:
        m = modules.setdefault(name.split("::")[0], [0.0, 0.0, 0.0])
        m[0] += wall
        m[1] += busy
        m[2] += stolen
    total = [sum(m[i] for m in modules.values()) for i in range(3)]
    t0, busy0, steal0 = _RUN_START[0]
    busy1, steal1 = _core_seconds()
    run = [time.monotonic() - t0, busy1 - busy0, steal1 - steal0]
    terminalreporter.section(f"cpu profile ({cores} cores)")
    terminalreporter.write_line(f"{'module':<44} {'wall s':>8} {'busy core-s':>12} {'idle core-s':>12} {'stolen':>7}")
    for name, (wall, busy, stolen) in [*sorted(modules.items(), key=lambda kv: -kv[1][0]), ("all modules", total), ("whole run", run)]:
        if wall >= 1.0:
            terminalreporter.write_line(f"{name:<44} {wall:>8.1f} {busy:>12.1f} {cores * wall - busy - stolen:>12.1f} {stolen:>7.1f}")
