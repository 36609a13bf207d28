"""``mvr train DATA OUT``: pairs (``data.py``) written once to OUT's run directory, the loop
(``loop.py``) on a Ray Train ``TorchTrainer`` worker group, the last checkpoint's model copied
into OUT.

OUT's run directory (``.mvr-train/``) holds the pairs (with each pair's length in tokens
when batches are length-grouped), the run's configuration, Ray Train's
checkpoints (the two latest), ``progress.json`` (the last step's metrics) and
``metrics.jsonl`` (every step's: the loss curve). A worker that dies is restarted by Ray
Train from the last checkpoint (``runtime.max_failures`` times); a job that dies is resumed
by running the same command again (same DATA, OUT and configuration): the pairs are reused
and Ray Train restores the run's latest checkpoint. Another configuration for an OUT that
holds a run is refused (``--restart`` starts over)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

from mvr.operators.encode.checkpoint import load_tokenizer
from mvr.pipeline.config import TrainConfig
from mvr.pipeline.results import TrainResult
from mvr.pipeline.training.data import TrainingDataError, build_pairs
from mvr.pipeline.training.loop import PROGRESS, count_pair_tokens, total_steps, train_loop
from mvr.storage.training_files import copy_model_dir, pairs_table, read_pairs, with_tokens, write_pairs

RUN_DIR = ".mvr-train"
RUN_NAME = "run"


def _progress(run_dir: Path) -> dict:
    """The last ``progress.json`` a worker wrote ({} before the first step)."""
    f = run_dir / PROGRESS
    return json.loads(f.read_text()) if f.exists() else {}


def run_record(data_url: str, config: TrainConfig) -> dict:
    """What ``OUT/.mvr-train/run.json`` holds of a run: a later run resumes it only if equal."""
    return {"data": data_url, "config": config.model_dump(mode="json", exclude={"runtime"})}


def prepare_run(data_url: str, out: str, config: TrainConfig, restart: bool, log: Callable[[str], None]) -> Path:
    """OUT's run directory with the run's pairs and record: made, reused (same DATA and
    configuration) or refused (another run)."""
    out_dir = Path(out).expanduser().resolve()
    run_dir = out_dir / RUN_DIR
    if out_dir.exists() and not out_dir.is_dir():
        raise TrainingDataError(f"{out}: not a directory")
    if restart and run_dir.exists():
        shutil.rmtree(run_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not run_dir.exists():
        raise TrainingDataError(f"{out}: exists and holds no mvr train run; give a new or empty directory")
    record = run_record(data_url, config)
    record_file = run_dir / "run.json"
    if record_file.exists():
        if json.loads(record_file.read_text()) != record:
            raise TrainingDataError(f"{out} holds a run of another DATA or configuration: use another OUT, or --restart to discard it")
        log(f"resuming the run in {run_dir}")
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    table = pairs_table(build_pairs(data_url, config, log))
    if config.train.group_by_length:  # counted once here, not by every worker at every start
        table = with_tokens(table, count_pair_tokens(table, load_tokenizer(config.base), config))
    write_pairs(str(run_dir / "pairs.parquet"), table)
    record_file.write_text(json.dumps(record, indent=1))
    return run_dir


def train(data_url: str, out: str, config: TrainConfig, log: Callable[[str], None] = print, restart: bool = False) -> TrainResult:
    """Train ``config.base`` on DATA's pairs with ``config.objective`` in the loss; OUT becomes
    a PyLate / sentence-transformers checkpoint (module docstring)."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from mvr.pipeline.ray_runtime import init_ray

    init_ray()
    run_dir = prepare_run(data_url, out, config, restart, log)
    n_pairs = read_pairs(str(run_dir / "pairs.parquet")).num_rows
    steps = total_steps(n_pairs, config)
    progress = _progress(run_dir)
    if progress.get("step") == steps and (Path(out) / "modules.json").exists():  # the same run, finished
        log(f"{out}: already trained ({steps:,} steps); --restart trains again")
        return TrainResult(str(out), steps, n_pairs, progress, 0.0, int(progress.get("resumed_from", 0)))
    resources = ray.cluster_resources()
    use_gpu = config.runtime.use_gpu if config.runtime.use_gpu is not None else resources.get("GPU", 0) > 0
    cpus = config.runtime.cpus_per_worker or 1.0
    log(
        f"training {config.base} for {config.objective}: {steps:,} steps of {config.train.batch_size} pairs on {config.runtime.workers} worker(s), {'a GPU' if use_gpu else f'{cpus:g} CPU reserved'} each"
    )
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "config": config.model_dump(mode="json"),
            "pairs": str(run_dir / "pairs.parquet"),
            "run_dir": str(run_dir),
            "torch_threads": int(config.runtime.cpus_per_worker or 0),
        },
        scaling_config=ScalingConfig(num_workers=config.runtime.workers, use_gpu=use_gpu, resources_per_worker={"CPU": cpus}),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=str(run_dir / "ray"),
            failure_config=FailureConfig(max_failures=config.runtime.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    t0 = time.perf_counter()
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError("training ended without a checkpoint")
    with result.checkpoint.as_directory() as d:
        copy_model_dir(d, out)
    progress = _progress(run_dir)
    metrics = dict(result.metrics or progress)
    log(f"wrote {out}: step {metrics.get('step')}, loss {metrics.get('loss', float('nan')):.4f}")
    return TrainResult(str(out), int(metrics.get("step", steps)), n_pairs, metrics, time.perf_counter() - t0, int(progress.get("resumed_from", 0)))
