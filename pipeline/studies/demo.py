"""``mvr demo``: the whole path offline on a small real corpus. Builds the stdlib-docs corpus
(``pipeline.studies.demo_corpus``), writes it as ``WORKDIR/corpus.jsonl``, indexes it into
``WORKDIR/index`` with the default configuration (packaged MiniLM), builds FAISS IVFPQ
partitions (P = 2) of every vector kind, starts the Serve search service, sends a few fixed
queries over HTTP, and shuts the service down. Rerunning with the same workdir reuses the
committed index and its ANN partitions; when the corpus file had to be (re)written, the
workdir's index is rebuilt from scratch."""

from __future__ import annotations

import io
import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from mvr.pipeline.config import AnnBuildConfig, IndexConfig, ServeConfig
from mvr.pipeline.indexing.ann_build import build_ann
from mvr.pipeline.indexing.corpus_job import index_corpus
from mvr.pipeline.ray_runtime import init_ray, ray_logs_dir
from mvr.pipeline.results import DemoResult
from mvr.pipeline.serving.app import deploy, shutdown
from mvr.pipeline.serving.client import SearchClient
from mvr.pipeline.studies.demo_corpus import DEFAULT_LIMIT, build_demo_corpus
from mvr.storage import fs
from mvr.storage.jsonl import write_jsonl
from mvr.storage.manifest import load_manifest

DEMO_QUERIES: tuple[str, ...] = (
    "how do I parse JSON from a string",
    "run a shell command and capture its output",
    "with statement context manager protocol",
    "sort a list in place with a key function",
    "read and write zip archives",
)
DEMO_MODE = "maxsim"
DEMO_ANN = AnnBuildConfig(backend="faiss-ivfpq", partitions=2)


def run_demo(
    workdir: str,
    limit: int = DEFAULT_LIMIT,
    k: int = 3,
    log: Callable[[str], None] = print,
    config: IndexConfig | None = None,
    serve_config: ServeConfig | None = None,
) -> DemoResult:
    """Corpus → index → ANN and BM25 partitions → service → ``k`` MaxSim results over HTTP for
    each of ``DEMO_QUERIES`` (and the first once more as a MaxSim + BM25 hybrid) → service
    shut down."""
    t0 = time.time()
    corpus_url = fs.join(workdir, "corpus.jsonl")
    index_url = fs.join(workdir, "index")
    rows = build_demo_corpus(limit)
    written = write_jsonl(corpus_url, rows)
    log(f"{'wrote' if written else 'reusing'} {corpus_url}: {len(rows)} documents from the Python docs")
    result = index_corpus(corpus_url, index_url, config or IndexConfig(), overwrite=written, log=log)
    log(result.summary)
    manifest = load_manifest(index_url)
    ann, bm25 = manifest.ann, manifest.bm25
    ann_built = not bm25 or not all(len(ann.get(kind, {}).get("partitions", [])) == DEMO_ANN.partitions for kind in DEMO_ANN.vectors)
    if ann_built:
        build_ann(index_url, DEMO_ANN, log=log)
    serve_config = serve_config or ServeConfig()
    log(f"starting the search service at {serve_config.host}:{serve_config.port}")
    deployment = deploy(index_url, serve_config, log=log)
    client = SearchClient(deployment.url)
    try:
        log(f"sending {len(DEMO_QUERIES) + 1} queries to {deployment.url}/search")
        answers = [{"query": q, **client.search(q, k, DEMO_MODE)} for q in DEMO_QUERIES]
        answers.append({"query": DEMO_QUERIES[0], **client.search(DEMO_QUERIES[0], k, "hybrid")})  # MaxSim fused with BM25
    finally:
        client.close()
        shutdown(serve_config)
    return DemoResult(workdir, corpus_url, index_url, len(rows), written, result, ann_built, deployment.url, answers, time.time() - t0)


DRIVER_LOG = "mvr-demo-driver.err"


@contextmanager
def quiet_ray(log: Callable[[str], None] = print) -> Iterator[str]:
    """Start a local Ray whose own output stays in its session's log directory (yielded, and
    named once through ``log``): ``init_ray(quiet=True)``, and this process's native stderr
    (fd 2: Ray's C++ core worker writes its errors there as well as to its log file) sent to
    ``DRIVER_LOG`` in that directory while ``sys.stderr`` (the demo's progress) still reaches
    the terminal. Ray (and with it Serve) is shut down on the way out, still quietly: not
    through ``serve.shutdown()``, whose killed controller makes the raylet report a failed
    task here."""
    init_ray(quiet=True)
    logs = ray_logs_dir() or "/tmp/ray/session_latest/logs"
    log(f"Ray and Serve logs: {logs}")
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    try:
        with open(os.path.join(logs, DRIVER_LOG), "ab") as f:
            os.dup2(f.fileno(), 2)
    except OSError:  # no writable log directory: leave stderr as it is
        os.close(terminal_fd)
        yield logs
        return
    previous = sys.stderr
    sys.stderr = io.TextIOWrapper(
        os.fdopen(os.dup(terminal_fd), "wb"), encoding=getattr(previous, "encoding", None) or "utf-8", errors="backslashreplace", line_buffering=True
    )
    try:
        yield logs
    finally:
        try:
            import ray

            ray.shutdown()
        finally:
            sys.stderr.flush()
            replaced, sys.stderr = sys.stderr, previous
            os.dup2(terminal_fd, 2)
            os.close(terminal_fd)
            replaced.close()
