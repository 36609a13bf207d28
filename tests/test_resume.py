"""Kill a small job, which runs in its driver, part-way; run it again and find every passage
exactly once. (A job on Ray Data killed part-way and submitted again: ``tests/test_cluster_jobs.py``,
whose resubmitted job also resumes from the committed shards and the codecs the first run
trained, and whose killed encode actor is restarted.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import ROOT, read_jsonl
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


def test_a_small_job_killed_in_the_driver_resumes_and_nothing_is_lost(tmp_path, datasets, ray_address):
    """A small job runs every stage in the driver (``runtime.small_job_rows``): the ``mvr
    index`` process (joined to the worker's cluster, as a user's script on a cluster is) is
    killed once it has committed 3 shards; the same command run again resumes, keeps those
    shards and their codecs, and every passage is indexed exactly once. Its passages are
    encoded again after the sample pass (``encode_once: false``) in batches of 16, each
    written as a shard before the next is encoded, so the kill lands while shards remain."""
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:N_DOCS]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    index = tmp_path / "index"
    config = tmp_path / "small.yaml"
    config.write_text("runtime:\n  encode_once: false\n  encode_actor_batch: 16\n  write_rows_per_shard: 16\n")
    argv = [sys.executable, "-m", "mvr.jobs.cli", "index", str(corpus), str(index), "--config", str(config)]
    env = {**{k: v for k, v in os.environ.items() if k != "MVR_DEBUG"}, "RAY_ADDRESS": ray_address, "COLUMNS": "200"}
    first = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    committed = index / "_staging" / "committed"
    deadline = time.monotonic() + 300
    while len(list(committed.glob("*/*.json"))) < 3:  # a record a shard, in a folder a block
        assert first.poll() is None, f"the job ended before 3 shards were committed:\n{first.communicate()[0].decode()[-3000:]}"
        assert time.monotonic() < deadline, "no 3 committed shards within 300 s"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    out = first.communicate(timeout=60)[0].decode()
    before = {p.stem for p in committed.glob("*/*.json")}
    assert "every stage in this process" in out, out[-3000:]
    assert not (index / "manifest.json").exists() and len(before) < -(-N_DOCS // 16), sorted(before)  # killed part-way: shards left
    second = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=300)
    out = second.stdout.decode() + second.stderr.decode()
    assert second.returncode == 0, out[-3000:]
    assert "resuming the unfinished job" in out and "reusing the codecs the interrupted run trained" in out, out[-3000:]
    assert before <= {Path(s.path).name for s in load_manifest(str(index)).shards}  # kept, not redone
    _assert_exactly_once(index, docs)
