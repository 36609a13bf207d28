"""Shared fixtures: dataset locations and a session-wide local Ray cluster."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("MVR_DATASETS", ROOT.parent / "shared" / "datasets"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def datasets() -> Path:
    if not (DATASETS / "msmarco-sample" / "corpus.jsonl").exists():
        pytest.fail(f"test collections not found at {DATASETS} (set MVR_DATASETS)")
    return DATASETS


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


def _built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(path)`` run once per test run, and the path it built. Under pytest-xdist
    (``-n 2``) the workers share it: the first to ask builds it in the run's common temporary
    directory while the others wait on a file lock, then all read it (session fixtures are
    per worker, and an encoded collection is minutes of both cores). The fixtures built so are
    read-only: tests copy them to change them."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    shared.mkdir(exist_ok=True)
    path, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            if path.exists():  # a worker that failed mid-build
                shutil.rmtree(path)
            build(path)
            done.touch()
    return path


def _index(tmp_path_factory, datasets: Path, name: str) -> str:
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    def build(path: Path) -> None:
        result = index_corpus(str(datasets / name), str(path), IndexConfig())
        assert not result.up_to_date

    return str(_built_once(tmp_path_factory, name, build))


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
def msmarco_index(tmp_path_factory, msmarco_corpus_with_metadata) -> str:
    """The whole msmarco-sample corpus indexed once with the default (reference) settings. It
    is read from the metadata copy (same ids, titles and texts; the three bad-metadata rows are
    rejects), so that one encoding of the collection serves the search tests and the filter
    tests alike."""
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    def build(path: Path) -> None:
        result = index_corpus(msmarco_corpus_with_metadata["corpus"], str(path), IndexConfig())
        assert not result.up_to_date

    return str(_built_once(tmp_path_factory, "msmarco-sample", build))


@pytest.fixture(scope="session")
def dbpedia_index(tmp_path_factory, datasets) -> str:
    """The whole dbpedia-sample corpus indexed once with the default (reference) settings."""
    return _index(tmp_path_factory, datasets, "dbpedia-sample")


@pytest.fixture(scope="session")
def cranfield_index(tmp_path_factory, datasets) -> str:
    """The whole cranfield collection (aeronautics abstracts: text far from the model's
    training data) indexed once with the default settings."""
    return _index(tmp_path_factory, datasets, "cranfield")


@pytest.fixture(scope="session")
def msmarco_100(tmp_path_factory, datasets) -> str:
    """The first 100 msmarco-sample passages in 3 shards (~8,000 token vectors: IVFPQ at 7
    bits), FAISS partitions (P = 1) of tokens and pooled, BM25. Tests copy it to change it."""
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.config import AnnBuildConfig, IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    def build(path: Path) -> None:
        config = IndexConfig.from_yaml(None, **{"limit": 100, "runtime.write_rows_per_shard": 40})
        index_corpus(str(datasets / "msmarco-sample"), str(path), config, log=lambda _: None)
        build_ann(str(path), AnnBuildConfig(partitions=1, vectors=["tokens", "pooled"]), log=lambda _: None)

    return str(_built_once(tmp_path_factory, "msmarco-100", build))


@pytest.fixture(scope="session")
def msmarco_meta_index(tmp_path_factory, msmarco_index, msmarco_corpus_with_metadata) -> dict:
    """A copy of ``msmarco_index`` (msmarco-sample with derived metadata and three rejected
    rows) with FAISS IVFPQ partitions (P = 2) of tokens and pooled and BM25, for the filter
    tests. {"index", "corpus", "docs"}."""
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.config import AnnBuildConfig

    def build(path: Path) -> None:
        shutil.copytree(msmarco_index, path)
        ann = AnnBuildConfig(backend="faiss-ivfpq", partitions=2, vectors=["tokens", "pooled"], params={"training_sample_size": 8192}, cpus_per_task=1)
        build_ann(str(path), ann, log=lambda _: None)

    return {"index": str(_built_once(tmp_path_factory, "msmarco-meta", build)), **msmarco_corpus_with_metadata}


SLOW_FIXTURES = {"msmarco_index", "dbpedia_index", "cranfield_index", "msmarco_100", "msmarco_meta_index"}


# The modules that take longest, longest first (wall seconds on 2026-11-26, alone: the cluster
# 194, filters 191 with msmarco-sample's encoding, hybrid 151 with dbpedia-sample's, …). With
# ``-n 2 --dist loadfile`` (pyproject's addopts) pytest-xdist hands whole modules to its two
# workers in collection order, so the long ones start first and the short ones fill the gaps
# (longest-processing-time first); the rest keep their file order.
LONGEST_FIRST = (
    "test_cluster_jobs", "test_train", "test_filters", "test_hybrid", "test_serve", "test_serve_live", "test_updates", "test_resume",
    "test_search_ann", "test_api", "test_demo", "test_updates_concurrency", "test_openapi_contract", "test_full_disk", "test_deploy_damaged",
    "test_slow_clients", "test_partition_memory", "test_capacity_plan", "test_cli_errors",
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


class _Cores:
    """The machine's cores between pytest-xdist's workers: every test holds them shared, and a
    test marked ``exclusive`` (a latency bound against a baseline it measured itself) holds
    them alone, from its module's set-up to its teardown, so the other worker's load cannot
    change between its two windows. Fair: an exclusive test holds the turnstile while it
    waits, so the other worker's next test waits behind it (a file lock each, ``flock``,
    released by the kernel if a worker dies). Without xdist, nothing is locked."""

    def __init__(self) -> None:
        import tempfile

        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        self.paths = None if run is None else [Path(tempfile.gettempdir()) / f"mvr-tests-{run}.{n}.lock" for n in ("turnstile", "cores")]

    def hold(self, exclusive: bool):
        import contextlib
        import fcntl

        @contextlib.contextmanager
        def held():
            if self.paths is None:
                yield
                return
            with open(self.paths[0], "a") as turnstile, open(self.paths[1], "a") as cores:
                fcntl.flock(turnstile, fcntl.LOCK_EX)
                try:
                    fcntl.flock(cores, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                finally:
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
                try:
                    yield
                finally:
                    fcntl.flock(cores, fcntl.LOCK_UN)

        return held()


_CORES = _Cores()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _CORES.hold(item.get_closest_marker("exclusive") is not None):
        yield


def pytest_addoption(parser) -> None:
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
