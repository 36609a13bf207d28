"""Kill the indexing job part-way, rerun it, and find every passage exactly once."""

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

from helpers import read_jsonl
from storage.catalog import Catalog
from storage.manifest import load_manifest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 200


def _job(corpus: Path, index: Path, config: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jobs.index_corpus", str(corpus), str(index), "--config", str(config)]
    env = {**os.environ, "RAY_ADDRESS": "local"}  # a cluster of its own, killed with the job
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env, text=True)


def _committed(index: Path) -> list[Path]:
    return sorted((index / "_staging" / "committed").rglob("*.json"))


def test_killed_job_resumes_without_duplicates(tmp_path, datasets):
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:N_DOCS]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    config = tmp_path / "config.yaml"
    config.write_text("runtime:\n  block_bytes: 16384\n  encode_actor_batch: 16\n  write_rows_per_shard: 16\n")
    index = tmp_path / "index"

    first = _job(corpus, index, config)
    deadline = time.time() + 300
    while len(_committed(index)) < 4:
        assert first.poll() is None, f"job ended before it could be killed:\n{first.stdout.read()}"
        assert time.time() < deadline, "no shards were committed within 300 s"
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    before = {p.name for p in _committed(index)}
    assert not (index / "manifest.json").exists()
    assert 4 <= len(before)

    second = _job(corpus, index, config)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert "resuming the unfinished job" in out
    assert "reusing the codecs the interrupted run trained" in out  # its shards' codes stay decodable
    assert f"indexed {N_DOCS}, rejected 0" in out

    m = load_manifest(str(index))
    listed = {Path(s.path).name for s in m.shards}
    assert {name.removesuffix(".json") for name in before} <= listed  # kept, not redone
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
