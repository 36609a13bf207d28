"""``mvr train`` on Ray Train, end to end on real text with the packaged MiniLM weights, in
one run that is interrupted twice:

- a killed training worker is restarted by Ray Train from the last checkpoint, and a killed
  job resumes from it when the same command runs again; the run ends at its step count, its
  loss curve (a line a step) whole, and the checkpoint loads, in mvr and (``peers``) in
  PyLate, which encodes as mvr does;
- its few steps of first-m training on a handful of labelled pairs (cranfield's queries and a
  judged document each) overfit them: the loss the run records falls; the share of the pairs'
  queries whose own passage scores first among the pairs' passages (in-batch accuracy) rises,
  and the passages' mean reciprocal rank with it, computed here by encoding the pairs with the
  base and with the checkpoint through mvr's encoder and scoring them with first-m's
  aggregator; the checkpoint indexes (``mvr index --model OUT``) and searches, and that search
  ranks the pairs' passages above where the base ranks them (MRR). Whether training lifts a
  mode on queries it never saw is a measurement, not a test: ``benchmarks/train_quality.py``
  (docs/training.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import pytest

import test_checkpoint_conventions as conventions
from helpers import read_jsonl, read_qrels
from mvr.pipeline.config import IndexConfig
from test_checkpoint_conventions import check_pylate_loads

T = TypeVar("T")

pytestmark = pytest.mark.ray
peer_python = conventions.peer_python  # the peer venv fixture, for the PyLate check

OBJECTIVE = "first-m"  # the base's weakest mode on these pairs: in-batch accuracy 0.5625, the other dense modes 0.625
PAIRS = 16
BATCH = 8  # two batches an epoch, in length-grouped order (resumed as it was)
STEPS = 8
CHECKPOINT_EVERY = 2
LEARNING_RATE = 1e-4  # 3e-5 (the default) needs more steps to overfit
LOSS_FALL = 0.25  # the last step's loss below a quarter of the first's
# the objective's cross-entropy alone: no pull towards the base (distillation, preservation),
# which would hold back what the overfit test watches, and no teacher to run
TRAIN_YAML = (
    f"objective: {OBJECTIVE}\ntrain:\n  steps: {STEPS}\n  checkpoint_every: {CHECKPOINT_EVERY}\n  batch_size: {BATCH}\n  group_by_length: true\n"
    f"  learning_rate: {LEARNING_RATE}\n  distill: 0\n  preserve: 0\n  seed: 0\n"
)


def _pairs(datasets: Path, n: int = PAIRS, max_tokens: int = 128) -> list[dict]:
    """cranfield's first ``n`` judgments as (query, judged document) pairs, one pair a query
    and a document, of documents of at most ``max_tokens`` tokens: one passage, the same in
    training and in the index, and short, so a step is cheap."""
    from mvr.operators.encode.checkpoint import load_tokenizer

    tokenizer = load_tokenizer("minilm")
    queries = {r["_id"]: r["text"] for r in read_jsonl(datasets / "cranfield" / "queries.jsonl")}
    documents = {r["_id"]: r["text"] for r in read_jsonl(datasets / "cranfield" / "corpus.jsonl")}
    rows: list[dict] = []
    for j in read_qrels(datasets / "cranfield" / "qrels" / "test.tsv"):
        if j.relevance <= 0 or any(j.query_id == r["query_id"] or j.doc_id == r["positive_id"] for r in rows):
            continue
        if len(tokenizer(documents[j.doc_id])["input_ids"]) <= max_tokens:
            rows.append({"query": queries[j.query_id], "positive": documents[j.doc_id], "positive_id": j.doc_id, "query_id": j.query_id})
        if len(rows) == n:
            return rows
    raise AssertionError(f"cranfield has {len(rows)} such pairs, not {n}")


def _ranks(model: str, rows: list[dict]) -> np.ndarray:
    """(len(rows),) the place of each pair's passage (1: first) among the pairs' passages for
    its query, in OBJECTIVE's scores: queries encoded as search encodes them, passages as
    indexing does (mvr's encoder, the model's conventions, float vectors: no codec), scored by
    the mode's aggregator (``operators/retrieval/scoring.py``). A tie counts against."""
    from mvr.operators.encode.compress import Compressor
    from mvr.operators.encode.encoder import TokenEncoder
    from mvr.operators.encode.query import QueryEncoder
    from mvr.operators.encode.tokenizer import PassageTokenizer
    from mvr.operators.packed import Packed
    from mvr.operators.retrieval.scoring import MODE_VECTORS, score

    config = IndexConfig.from_yaml(None, **{"model.name": model})
    encoder = TokenEncoder(config.model.name, "cpu", "float32")
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    queries = QueryEncoder(encoder, tokenizer)([r["query"] for r in rows])
    passages = tokenizer.split([r["positive_id"] for r in rows], [""] * len(rows), [r["positive"] for r in rows])
    assert [p.doc_id for p in passages] == [r["positive_id"] for r in rows]  # one passage a document
    ids = [p.input_ids for p in passages]
    c = config.compress
    stored = Compressor(None, c.pooling, c.first_m, c.centroids, c.kmeans_iterations, c.centroid_space)(
        encoder.encode(ids, len(ids), tokenizer.pad_id), [tokenizer.keep_mask(i) for i in ids]
    )
    docs = {
        "tokens": lambda: Packed.from_list(stored["tokens"], encoder.dim),
        "centroids": lambda: Packed.from_list(stored["centroids"], encoder.dim),
        "first-m": lambda: Packed.from_list(stored["first_m"], encoder.dim),
        "pooled": lambda: np.stack(stored["pooled"]),
    }[MODE_VECTORS[OBJECTIVE]]()
    scores = np.stack([score(OBJECTIVE, q, docs) for q in queries])
    return (scores >= np.diag(scores)[:, None]).sum(axis=1)  # itself included: 1 when no other passage scores as high


def _progress(out: Path) -> dict:
    f = out / ".mvr-train" / "progress.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return {}


def _registered(out: Path) -> list[int]:
    """The steps of the checkpoints Ray Train has recorded for the run (its snapshot file)."""
    f = out / ".mvr-train" / "ray" / "run" / "checkpoint_manager_snapshot.json"
    try:
        return [int(c["metrics"]["step"]) for c in json.loads(f.read_text())["checkpoint_results"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _wait_until(read: Callable[[], T], reached: Callable[[T], bool], what: str, proc: subprocess.Popen, out: Path, timeout: float) -> T:
    """Poll ``read()`` every 0.5 s until ``reached`` holds for its value, which is returned;
    fails when the run ends first or after ``timeout`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = read()
        if reached(value):
            return value
        if proc.poll() is not None:
            pytest.fail(f"mvr train ended (status {proc.returncode}) before {what}: see {out.parent / 'first-run.log'}")
        time.sleep(0.5)
    pytest.fail(f"no {what} within {timeout} s: {read()}")


def _wait_for(out: Path, step: int, proc: subprocess.Popen, timeout: float = 600) -> dict:
    """The run's progress once it has reached ``step``."""
    return _wait_until(lambda: _progress(out), lambda p: p.get("step", 0) >= step, f"step {step}", proc, out, timeout)


def _wait_registered(out: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> list[int]:
    """Until Ray Train has recorded the checkpoint of ``step`` (its snapshot is written after
    the worker's report, so a step's progress line can come before it): the recorded steps."""
    return _wait_until(lambda: _registered(out), lambda r: max(r, default=0) >= step, f"step {step}'s checkpoint recorded", proc, out, timeout)


def _train_worker_pid(address: str) -> int:
    """The pid of the one Ray Train worker alive on the test worker's cluster (Ray's state
    API: the module's runs are the only training there, one at a time)."""
    from ray.util.state import list_actors

    alive = list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")], detail=True)
    assert len(alive) == 1, alive
    return int(alive[0].pid)


@pytest.fixture(scope="module")
def resumed(datasets, tmp_path_factory, ray_address) -> dict:
    """``mvr train`` on the pairs (``TRAIN_YAML``: 8 steps, a checkpoint every 2) whose Ray
    Train worker is killed past step 3, then the whole job killed once step 4's checkpoint is
    recorded, then the same command run again: the pairs, the run directory, the progress
    seen at each point and the rerun's output."""
    tmp_path = tmp_path_factory.mktemp("resumed")
    rows = _pairs(datasets)
    data = tmp_path / "pairs.jsonl"  # DATA as a JSONL of pairs (docs/training.md)
    data.write_text("".join(json.dumps({k: r[k] for k in ("query", "positive", "positive_id")}) + "\n" for r in rows))
    (tmp_path / "train.yaml").write_text(TRAIN_YAML)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mvr.jobs.cli", "train", str(data), str(out), "--config", str(tmp_path / "train.yaml")]
    env = os.environ | {"RAY_ADDRESS": ray_address}

    first_log = tmp_path / "first-run.log"  # a file, not a pipe nobody reads while the job runs
    proc = subprocess.Popen(cmd, env=env, stdout=first_log.open("w"), stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        progress = _wait_for(out, 3, proc)
        _wait_registered(out, 2, proc)  # past the checkpoint at step 2, and Ray Train has recorded it
        killed = {**progress, "pid": _train_worker_pid(ray_address), "recorded": max(_registered(out))}
        os.kill(killed["pid"], signal.SIGKILL)  # the Ray Train worker
        resumed = {**_wait_for(out, 5, proc), "pid": _train_worker_pid(ray_address)}  # Ray Train restarted it from the last checkpoint
        _wait_registered(out, 4, proc)  # step 4's checkpoint recorded by Ray Train
        os.killpg(proc.pid, signal.SIGKILL)  # the whole job: the driver, and the run with it
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = max(_registered(out), default=0)
    exported = (out / "modules.json").exists()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    return {"rows": rows, "out": out, "killed": killed, "resumed": resumed, "last": last, "exported_before": exported, "again": again}


@pytest.mark.timeout(1800)
def test_a_killed_worker_and_a_killed_job_resume_from_the_last_checkpoint(resumed):
    killed, restarted, last, again = resumed["killed"], resumed["resumed"], resumed["last"], resumed["again"]
    # restarted from the last checkpoint Ray Train had recorded when its worker was killed (step 2, or 4 if the kill came later)
    assert restarted["pid"] != killed["pid"] and restarted["resumed_from"] == killed["recorded"] >= 2, (restarted, killed)
    assert last >= 4, last
    assert not resumed["exported_before"]  # no checkpoint was exported: the run did not finish
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resuming the run" in again.stdout + again.stderr  # the job's log is on stderr
    out = resumed["out"]
    final = _progress(out)
    assert final["step"] == final["steps"] == STEPS and final["resumed_from"] == last, (final, last)  # the last checkpoint recorded
    trained = json.loads((out / "config_sentence_transformers.json").read_text())["mvr_training"]
    assert trained["step"] == STEPS and trained["objective"] == OBJECTIVE
    from mvr.operators.encode.encoder import TokenEncoder

    assert TokenEncoder(str(out), "cpu", "float32").dim == 384


@pytest.mark.timeout(1800)
def test_the_resumed_run_overfits_its_pairs(resumed, tmp_path):
    import mvr

    rows, out = resumed["rows"], resumed["out"]
    assert resumed["again"].returncode == 0, resumed["again"].stderr[-3000:]

    # the loss the run recorded, a line a step (OUT/.mvr-train/metrics.jsonl): whole after the two resumptions
    curve = [json.loads(line) for line in (out / ".mvr-train" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in curve] == list(range(1, STEPS + 1)), curve
    losses = [m["loss"] for m in curve]

    # in-batch accuracy and the passages' ranks, base and checkpoint, computed here
    base, trained = _ranks("minilm", rows), _ranks(str(out), rows)

    # the checkpoint indexes and searches: its search ranks every pair's passage among them
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": r["positive_id"], "text": r["positive"]}) + "\n" for r in rows))
    index = tmp_path / "index"
    mvr.index(str(corpus), str(index), IndexConfig.from_yaml(None, **{"model.name": str(out)}))
    with mvr.open(str(index), modes=(OBJECTIVE,)) as searcher:
        results = searcher.search([r["query"] for r in rows], k=PAIRS, mode=OBJECTIVE)
    found = [[d for d, _ in res.hits()] for res in results]
    assert all(res.path == "exact" and sorted(ids) == sorted(r["positive_id"] for r in rows) for res, ids in zip(results, found)), found
    searched = np.array([ids.index(r["positive_id"]) + 1 for ids, r in zip(found, rows)])

    def mrr(ranks: np.ndarray) -> float:
        return float((1 / ranks).mean())

    print(
        f"{OBJECTIVE}, {PAIRS} pairs, {STEPS} steps of {BATCH}: loss {' '.join(f'{x:.4f}' for x in losses)}; "
        f"in-batch accuracy base {np.mean(base == 1):.4f} → trained {np.mean(trained == 1):.4f}; MRR base {mrr(base):.4f} → trained {mrr(trained):.4f} "
        f"(its index's search {mrr(searched):.4f}); mean rank base {base.mean():.3f} → trained {trained.mean():.3f} (search {searched.mean():.3f})"
    )
    assert losses[-1] < LOSS_FALL * losses[0], losses
    assert np.mean(trained == 1) > np.mean(base == 1), (base, trained)
    assert mrr(trained) > mrr(base) and mrr(searched) > mrr(base), (base, trained, searched)


@pytest.mark.slow
@pytest.mark.peers
@pytest.mark.timeout(1800)
def test_pylate_loads_the_resumed_runs_checkpoint(peer_python, resumed, tmp_path):
    """The checkpoint the killed and resumed run exported (the default conventions: no marker
    tokens) loads in PyLate, which encodes queries and documents as mvr does
    (test_checkpoint_conventions.py's ``check_pylate_loads``; ColBERT's markers there)."""
    assert resumed["again"].returncode == 0, resumed["again"].stderr[-3000:]
    check_pylate_loads(peer_python, resumed["out"], (None, None), tmp_path / "pylate")
