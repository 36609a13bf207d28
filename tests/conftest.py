"""Shared fixtures: dataset locations and a session-wide local Ray cluster."""

from __future__ import annotations

import os
import time
from pathlib import Path

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
    from operators.checkpoint import load_tokenizer

    return load_tokenizer("minilm")


@pytest.fixture(scope="session")
def ray_address() -> str:
    """The address of this session's embedded Ray cluster (started if need be), for the
    ``mvr`` processes a test starts: they join it as jobs of their own, as ``mvr add`` joins a
    running cluster (``RAY_ADDRESS``), instead of starting a cluster each (~6 s here)."""
    import ray

    from pipeline.ray_runtime import init_ray

    init_ray()
    return ray.get_runtime_context().gcs_address


def _index(tmp_path_factory, datasets: Path, name: str) -> str:
    from pipeline.config import IndexConfig
    from pipeline.indexing import index_corpus

    url = str(tmp_path_factory.mktemp("idx") / name)
    result = index_corpus(str(datasets / name), url, IndexConfig())
    assert not result.up_to_date
    return url


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
    from pipeline.config import IndexConfig
    from pipeline.indexing import index_corpus

    url = str(tmp_path_factory.mktemp("idx") / "msmarco-sample")
    result = index_corpus(msmarco_corpus_with_metadata["corpus"], url, IndexConfig())
    assert not result.up_to_date
    return url


@pytest.fixture(scope="session")
def dbpedia_index(tmp_path_factory, datasets) -> str:
    """The whole dbpedia-sample corpus indexed once with the default (reference) settings."""
    return _index(tmp_path_factory, datasets, "dbpedia-sample")


@pytest.fixture(scope="session")
def msmarco_100(tmp_path_factory, datasets) -> str:
    """The first 100 msmarco-sample passages in 3 shards (~8,000 token vectors: IVFPQ at 7
    bits), FAISS partitions (P = 1) of tokens and pooled, BM25. Tests copy it to change it."""
    from pipeline.ann_build import build_ann
    from pipeline.config import AnnBuildConfig, IndexConfig
    from pipeline.indexing import index_corpus

    url = str(tmp_path_factory.mktemp("small") / "msmarco-100")
    config = IndexConfig.from_yaml(None, **{"limit": 100, "runtime.write_rows_per_shard": 40})
    index_corpus(str(datasets / "msmarco-sample"), url, config, log=lambda _: None)
    build_ann(url, AnnBuildConfig(partitions=1, vectors=["tokens", "pooled"]), log=lambda _: None)
    return url


@pytest.fixture(scope="session")
def msmarco_meta_index(tmp_path_factory, msmarco_index, msmarco_corpus_with_metadata) -> dict:
    """A copy of ``msmarco_index`` (msmarco-sample with derived metadata and three rejected
    rows) with FAISS IVFPQ partitions (P = 2) of tokens and pooled and BM25, for the filter
    tests. {"index", "corpus", "docs"}."""
    import shutil

    from pipeline.ann_build import build_ann
    from pipeline.config import AnnBuildConfig

    url = str(tmp_path_factory.mktemp("meta") / "msmarco-meta")
    shutil.copytree(msmarco_index, url)
    build = AnnBuildConfig(backend="faiss-ivfpq", partitions=2, vectors=["tokens", "pooled"], params={"training_sample_size": 8192}, cpus_per_task=1)
    build_ann(url, build, log=lambda _: None)
    return {"index": url, **msmarco_corpus_with_metadata}


SLOW_FIXTURES = {"msmarco_index", "dbpedia_index", "msmarco_100", "msmarco_meta_index"}


def pytest_collection_modifyitems(session, config, items) -> None:
    """Every test that starts Ray or needs an indexed collection is ``slow`` (the fast lane,
    ``-m "not slow"``, is the rest). The multi-node cluster tests run first, before the
    session's embedded Ray cluster is started: its idle daemons would otherwise share the two
    cores with the test cluster's (measured: the module took ~15 % longer after the other
    tests than alone)."""
    for item in items:
        if item.get_closest_marker("ray") or item.get_closest_marker("peers") or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: getattr(item.module, "__name__", "") != "test_cluster_jobs")


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--cpu-profile",
        metavar="FILE",
        default=None,
        help="write each test's wall seconds and the machine's busy and stolen core-seconds over it "
        "(setup, call and teardown, from /proc/stat: Ray's workers and subprocesses included) to FILE as TSV",
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


_PROFILE: list[tuple[str, float, float, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not item.config.getoption("--cpu-profile"):
        yield
        return
    (busy, steal), t0 = _core_seconds(), time.monotonic()
    yield
    busy1, steal1 = _core_seconds()
    _PROFILE.append((item.nodeid, time.monotonic() - t0, busy1 - busy, steal1 - steal))


def pytest_sessionfinish(session) -> None:
    out = session.config.getoption("--cpu-profile")
    if out and _PROFILE:
        with open(out, "w") as f:
            f.write("test\twall_s\tbusy_core_s\tstolen_core_s\n")
            f.writelines(f"{name}\t{wall:.2f}\t{busy:.2f}\t{stolen:.2f}\n" for name, wall, busy, stolen in _PROFILE)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """With ``--cpu-profile``: per module, wall seconds, busy core-seconds, the idle
    core-seconds of the machine's cores over its tests (where a suite on few cores waits
    rather than works) and those the hypervisor stole (a slow VM, not a slow suite), the
    slowest first."""
    if not config.getoption("--cpu-profile") or not _PROFILE:
        return
    cores = os.cpu_count() or 1
    modules: dict[str, list[float]] = {}
    for name, wall, busy, stolen in _PROFILE:
        m = modules.setdefault(name.split("::")[0], [0.0, 0.0, 0.0])
        m[0] += wall
        m[1] += busy
        m[2] += stolen
    total = [sum(m[i] for m in modules.values()) for i in range(3)]
    terminalreporter.section(f"cpu profile ({cores} cores)")
    terminalreporter.write_line(f"{'module':<44} {'wall s':>8} {'busy core-s':>12} {'idle core-s':>12} {'stolen':>7}")
    for name, (wall, busy, stolen) in [*sorted(modules.items(), key=lambda kv: -kv[1][0]), ("all", total)]:
        if wall >= 1.0:
            terminalreporter.write_line(f"{name:<44} {wall:>8.1f} {busy:>12.1f} {cores * wall - busy - stolen:>12.1f} {stolen:>7.1f}")
