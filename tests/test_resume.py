"""Kill the worker of a small job's encode task, and find every passage exactly once. (A
whole indexing job killed part-way and run again: ``tests/test_cluster_jobs.py``, whose
resubmitted job resumes from the committed shards and the codecs the first run trained.)"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import read_jsonl
from mvr.storage.catalog import Catalog
from mvr.storage.manifest import load_manifest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 200


def _assert_exactly_once(index: Path, docs: list[dict]) -> None:
    """The committed index holds every document of ``docs`` as exactly one passage, and no
    file its manifest does not list."""
    m = load_manifest(str(index))
    assert m.counts["passages"] == N_DOCS and m.counts["indexed_documents"] == N_DOCS
    listed_files = {Path(p).name for s in m.shards for p in (s.path, s.codes)}
    assert sorted(p.name for p in (index / "shards").iterdir()) == sorted(listed_files)  # no orphans left
    doc_ids = []
    for s in m.shards:
        doc_ids += pq.read_table(index / s.path, columns=["doc_id"])["doc_id"].to_pylist()
    assert sorted(doc_ids) == sorted(d["_id"] for d in docs)  # every passage exactly once
    cat = Catalog(str(index))
    try:
        assert cat.totals()["passages"] == N_DOCS
    finally:
        cat.close()


def test_killed_encode_task_worker_is_retried_and_nothing_is_lost(tmp_path, datasets, ray_address, capfd):
    """A small job encodes in Ray tasks (``runtime.small_job_rows``): the worker process of
    the first encode task Ray's state API reports running is killed (a batch of 128 passages
    takes ~2 s here, longer than the state API lags: the task is still running); Ray retries
    the task in another worker and every passage is indexed exactly once."""
    import threading

    from ray.util.state import list_tasks

    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:N_DOCS]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    index = tmp_path / "index"
    config = IndexConfig.from_yaml(None, **{"runtime.block_bytes": 16384, "runtime.encode_actor_batch": 128, "runtime.write_rows_per_shard": 16})
    name = "MapBatches(encode_task)"

    def tasks(state: str) -> list:
        return list_tasks(address=ray_address, filters=[("name", "=", name), ("state", "=", state)], limit=10_000, detail=True)

    logged: list[str] = []
    outcome: dict = {}
    job = threading.Thread(target=lambda: outcome.update(result=index_corpus(str(corpus), str(index), config, log=logged.append)))
    job.start()
    killed = None
    deadline = time.time() + 300
    while killed is None:
        assert job.is_alive(), f"the job ended before an encode task could be killed: {logged}"
        assert time.time() < deadline, "no encode task ran within 300 s"
        running = sorted((t for t in tasks("RUNNING") if t.worker_pid), key=lambda t: -(t.start_time_ms or 0))
        if running:  # the youngest, should earlier tests' tasks linger in the state API
            killed = running[0]
            os.kill(int(killed.worker_pid), signal.SIGKILL)
        time.sleep(0.1)
    job.join(timeout=600)
    assert "result" in outcome, logged
    assert any("encoding in Ray tasks" in line for line in logged), logged
    with pytest.raises(ProcessLookupError):
        os.kill(int(killed.worker_pid), 0)  # the worker is gone
    # the killed task ran again: its later attempt in Ray's state API, or the raylet's report
    # (forwarded to this driver) when the state API has not got the attempt's events yet
    output, retried = "", False
    for _ in range(30):
        output += "".join(capfd.readouterr())
        attempts = list_tasks(address=ray_address, filters=[("task_id", "=", killed.task_id)], detail=True)
        retried = any(t.attempt_number >= 1 for t in attempts) or "will be retried" in output
        if retried:
            break
        time.sleep(0.5)
    assert retried, (attempts, output[-2000:])
    _assert_exactly_once(index, docs)
