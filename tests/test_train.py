"""``mvr train`` on Ray Train, end to end on real text with the packaged MiniLM weights:

- a few steps of first-m training on the unsupervised pairs of a small dbpedia-sample corpus
  lift first-m's nDCG@10 on dbpedia-sample's queries (never trained on: the
  pairs come from passages, and a pair whose query equals a test query is dropped), measured
  by exact search over indexes ``mvr index`` built with the base and the trained checkpoint;
- a killed training worker is restarted by Ray Train from the last checkpoint, and a killed
  job resumes from it when the same command runs again; either way the run ends at its step
  count, and the checkpoint loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import read_jsonl, read_qrels
from mvr.pipeline.config import IndexConfig, TrainConfig

pytestmark = pytest.mark.ray


def _small_dbpedia(datasets: Path, path: Path, extra: int = 300) -> Path:
    """dbpedia-sample's judged passages and ``extra`` others, as a corpus."""
    judged = {q.doc_id for q in read_qrels(datasets / "dbpedia-sample" / "qrels" / "test.tsv")}
    rows = read_jsonl(datasets / "dbpedia-sample" / "corpus.jsonl")
    keep = [r for r in rows if r["_id"] in judged] + [r for r in rows if r["_id"] not in judged][:extra]
    path.write_text("".join(json.dumps(r) + "\n" for r in keep))
    return path


@pytest.mark.timeout(1800)
def test_training_lifts_its_mode_on_queries_it_never_saw(datasets, tmp_path, ray_address):
    import mvr
    from mvr.pipeline.retrieval.evaluation import exact_quality, paired_se

    corpus = _small_dbpedia(datasets, tmp_path / "corpus.jsonl")
    dataset = str(datasets / "dbpedia-sample")
    config = TrainConfig.model_validate(
        {
            "objective": OBJECTIVE,
            "data": {"eval_datasets": [dataset], "on_overlap": "drop", "max_pairs": 2000},
            "train": {"steps": STEPS, "batch_size": 16, "checkpoint_every": STEPS},
        }
    )
    result = mvr.train(str(corpus), str(tmp_path / "model"), config)
    assert result.steps == STEPS
    scores = {}
    for name, model in (("base", "minilm"), ("trained", str(tmp_path / "model"))):
        index = tmp_path / f"index-{name}"
        mvr.index(str(corpus), str(index), IndexConfig.from_yaml(None, **{"model.name": model}))
        scores[name] = exact_quality(dataset, str(index), (OBJECTIVE, "pooled"))
    base, trained = scores["base"]["ndcg10"][OBJECTIVE], scores["trained"]["ndcg10"][OBJECTIVE]
    se = paired_se(scores["trained"]["per_query"][OBJECTIVE], scores["base"]["per_query"][OBJECTIVE])
    print(f"{OBJECTIVE} nDCG@10 on dbpedia-sample's queries: base {base:.4f}, trained {trained:.4f} (± {se:.4f}); pooled {scores['base']['ndcg10']['pooled']:.4f} → {scores['trained']['ndcg10']['pooled']:.4f}")
    assert trained - base >= LIFT and trained - base >= 2 * se, (base, trained, se)


OBJECTIVE = "first-m"
STEPS = 40
LIFT = 0.03  # the target for a trained objective's own mode
# measured 2026-11-27 (defaults: no markers, preserve 3, ungrouped batches): first-m base 0.4161,
# trained 0.4476 (+0.0315 ± 0.0130 s.e. over 40 queries: 2.4 s.e.); pooled 0.5125 → 0.5187.
# With train.group_by_length (not the default): 40 steps 0.4425 (+0.0264 ± 0.0160, 1.6 s.e.),
# 60 steps 0.4474 (+0.0313 ± 0.0182, 1.7 s.e.): within noise of the ungrouped run, but short of
# 2 s.e. on this small test, which is why grouping stays opt-in (docs/training.md).


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


def _wait_for(out: Path, step: int, proc: subprocess.Popen, timeout: float = 600) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        p = _progress(out)
        if p.get("step", 0) >= step:
            return p
        if proc.poll() is not None:
            pytest.fail(f"mvr train ended (status {proc.returncode}) before step {step}: see {out.parent / 'first-run.log'}")
        time.sleep(0.5)
    pytest.fail(f"no step {step} within {timeout} s: {_progress(out)}")


@pytest.mark.timeout(1800)
def test_a_killed_worker_and_a_killed_job_resume_from_the_last_checkpoint(datasets, tmp_path, ray_address):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:200]))
    (tmp_path / "train.yaml").write_text("train:\n  checkpoint_every: 2\n  steps: 8\n  batch_size: 4\n  group_by_length: true\n")  # grouped order, resumed
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mvr.jobs.cli", "train", str(corpus), str(out), "--config", str(tmp_path / "train.yaml")]
    env = os.environ | {"RAY_ADDRESS": ray_address}

    first_log = tmp_path / "first-run.log"  # a file, not a pipe nobody reads while the job runs
    proc = subprocess.Popen(cmd, env=env, stdout=first_log.open("w"), stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        killed = _wait_for(out, 3, proc)  # past the checkpoint at step 2
        os.kill(killed["pid"], signal.SIGKILL)  # the Ray Train worker
        resumed = _wait_for(out, 5, proc)  # Ray Train restarted it from step 2's checkpoint
        assert resumed["pid"] != killed["pid"] and resumed["resumed_from"] == 2, resumed
        t0 = time.monotonic()
        while max(_registered(out), default=0) < 4 and time.monotonic() - t0 < 300:
            time.sleep(0.5)  # step 4's checkpoint recorded by Ray Train (its snapshot is written after the report)
        os.killpg(proc.pid, signal.SIGKILL)  # the whole job: the driver, and the run with it
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = max(_registered(out), default=0)
    assert last >= 4, _registered(out)
    assert not (out / "modules.json").exists()  # no checkpoint was exported: the run did not finish

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resuming the run" in again.stdout + again.stderr  # the job's log is on stderr
    final = _progress(out)
    assert final["step"] == final["steps"] == 8 and final["resumed_from"] == last, (final, last)  # the last checkpoint recorded
    trained = json.loads((out / "config_sentence_transformers.json").read_text())["mvr_training"]
    assert trained["step"] == 8 and trained["objective"] == "maxsim"
    from mvr.operators.encode.encoder import TokenEncoder

    assert TokenEncoder(str(out), "cpu", "float32").dim == 384
