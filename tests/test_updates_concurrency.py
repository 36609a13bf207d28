"""Two writers at once and a writer killed mid-commit (issue 17), with real `mvr add`
processes on a small real index (tests/conftest.py's msmarco_100: FAISS tokens and pooled,
BM25), each a job of its own on the session's Ray cluster (``RAY_ADDRESS``, as `mvr add` joins
a running cluster). Each runs through tests/commit_faults.py: ``--barrier`` holds each writer
after it has written every file of its change and before it creates the version file until
both are there, and ``--pause`` holds one there to be killed, so the race and the kill happen
where they hurt most. The two adds share the session cluster's two CPUs: their encode actors can hold both
at once, which hung both jobs while their read and write tasks reserved CPUs (they reserve none
now: ``pipeline.ray_runtime.EncodePlan``); a hang fails here within the 300 s timeout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commit_faults import PAUSED
from helpers import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[1]


def _corpus(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def _add(index: str, corpus: str, address: str, pause: float | None = None, barrier: str | None = None) -> subprocess.Popen:
    """``mvr add`` as a process of its own (a job on the cluster at ``address``), with the
    faults asked for before its first commit (tests/commit_faults.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": address}
    faults = (["--pause", str(pause)] if pause is not None else []) + (["--barrier", barrier] if barrier is not None else [])
    cmd = [sys.executable, str(ROOT / "tests" / "commit_faults.py"), *faults, "add", index, corpus]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.fixture
def small(msmarco_100, tmp_path, datasets, ray_address):
    url = tmp_path / "index"
    shutil.copytree(msmarco_100, url)
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    return str(url), docs, ray_address


def _doc_ids_present(index: str, ids: list[str]) -> set[str]:
    from mvr.storage.catalog import Catalog

    cat = Catalog(index)
    try:
        return set(cat.doc_ids_present(ids))
    finally:
        cat.close()


def test_two_concurrent_adds_both_land(small, tmp_path):
    from mvr.storage.manifest import load_manifest
    from mvr.storage.verify import verify_index

    index, docs, address = small
    before = load_manifest(index).version
    first, second = docs[100:140], docs[140:180]
    # both wait, after reading version `before` and writing their files, until the other is
    # there too: both race for before + 1
    barrier = f"{tmp_path / 'barrier'}:2"
    procs = [_add(index, _corpus(tmp_path / f"add{i}.jsonl", d), address, barrier=barrier) for i, d in enumerate((first, second))]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("applying the change again" in o for o in outs) == 1, outs  # exactly one lost the race and re-applied
    m = load_manifest(index)
    assert m.version == before + 2 and [h["operation"] for h in m.history[-2:]] == ["add", "add"]
    want = [d["_id"] for d in first + second]
    assert _doc_ids_present(index, want) == set(want)
    assert m.counts["indexed_documents"] == 180 and m.counts["passages"] == m.ann["tokens"]["passages"] == m.ann["pooled"]["passages"]
    assert verify_index(index).ok
    # the documents of both writers are found by search through the ANN partitions
    from mvr.pipeline.retrieval.searcher import Searcher

    s = Searcher(index, ["maxsim"])
    for d in (first[0], second[-1]):
        assert d["_id"] in [h[0] for h in s.search([d["text"][:300]], 5, "maxsim")[0].hits()]


def test_a_writer_killed_before_its_commit_leaves_the_previous_version(small, tmp_path):
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.manifest import load_manifest
    from mvr.storage.retention import collect
    from mvr.storage.verify import verify_index

    index, docs, address = small
    before = load_manifest(index)
    s0 = Searcher(index, ["maxsim"]).search([docs[0]["text"][:200]], 10, "maxsim")[0].hits()
    corpus = _corpus(tmp_path / "add.jsonl", docs[100:130])
    proc = _add(index, corpus, address, pause=600)
    deadline = time.monotonic() + 600
    seen = ""
    while time.monotonic() < deadline and PAUSED not in seen:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
    assert PAUSED in seen, seen[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the job's driver: Ray ends the job's workers with it
    proc.wait(timeout=60)
    m = load_manifest(index)
    assert m.version == before.version and m.shard_list == before.shard_list and m.ann == before.ann
    assert verify_index(index).ok
    assert Searcher(index, ["maxsim"]).search([docs[0]["text"][:200]], 10, "maxsim")[0].hits() == s0
    # the dead writer's files (workspace, partitions, tombstones, catalog) are collectable
    collected = collect(index, grace_s=0)
    assert any(f.startswith("adds/") for f in collected.files) and any(f.startswith("ann/") for f in collected.files)
    assert verify_index(index).ok and load_manifest(index).version == before.version
    # and the add, run again (here, on the same cluster), lands
    import mvr

    assert mvr.add(index, corpus, log=lambda _: None).manifest.version == before.version + 1
    assert _doc_ids_present(index, [d["_id"] for d in docs[100:130]]) == {d["_id"] for d in docs[100:130]}
