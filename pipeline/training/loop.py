"""The training loop each Ray Train worker runs (``train_loop``): the encoder with a Dense
projection (added as the identity when the base has none), the batches of its rank, the
objective's differentiable scores in a contrastive loss, AdamW with warm-up and linear
decay, a checkpoint (a loadable model directory plus the trainer state) every
``checkpoint_every`` steps and at the last, resumed from the latest one after a failure.

Batches are a function of (seed, step, rank) (``operators/training/order.py``: a seeded
order a pass, grouped by length unless ``train.group_by_length`` is off), so a resumed run
sees exactly the batches the lost one would have.

Rank 0 writes each step's metrics (loss and its parts, in-batch accuracy, examples/s) to the
run directory: ``progress.json`` the last step's, ``metrics.jsonl`` a line a step (a resumed
run drops the lines past its checkpoint and writes them again)."""

from __future__ import annotations

import copy
import functools
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from mvr.operators.encode.checkpoint import dense_dir, pylate_config, write_checkpoint
from mvr.operators.encode.compress import pad
from mvr.operators.encode.tokenizer import PassageTokenizer
from mvr.operators.retrieval import differentiable
from mvr.operators.retrieval.scoring import MODES
from mvr.operators.training.loss import contrastive_loss, preservation_loss
from mvr.operators.training.order import BatchOrder, pair_lengths
from mvr.pipeline.config import TrainConfig
from mvr.storage.training_files import TRAINER_STATE, read_pairs

PROGRESS = "progress.json"  # in the run directory: the last step's metrics (step, loss, rate) for users
METRICS = "metrics.jsonl"  # in the run directory: every step's metrics, a line a step (the loss curve)


def total_steps(n_pairs: int, config: TrainConfig) -> int:
    """``train.steps``, or one pass over the pairs by every worker together."""
    return config.train.steps or max(1, n_pairs // (config.train.batch_size * config.runtime.workers))


class Batches:
    """Texts → padded model inputs with the run's conventions: queries as ``QueryEncoder``
    makes them, passages as indexing does (truncated to ``passage_tokens``)."""

    def __init__(self, hf_tokenizer, config: TrainConfig, device: torch.device) -> None:
        settings = config.tokenizer.model_dump(exclude={"checkpoint_conventions", "conventions_source", "conventions_from_checkpoint"})
        settings["split_long_documents"] = False
        self.tokenizer = PassageTokenizer(hf_tokenizer, **settings)
        self.device = device

    def _pad(self, ids: list[np.ndarray], attention: list[np.ndarray], keep: Optional[list[np.ndarray]] = None) -> dict[str, torch.Tensor]:
        """(n_i,) ids, attention and kept-token masks → (B, T) tensors, ``mask``: real positions."""
        input_ids, mask = pad(ids, fill=self.tokenizer.pad_id, dtype=torch.long)
        out = {
            "input_ids": input_ids,
            "attention_mask": pad(attention, dtype=torch.long)[0],
            "mask": mask,
            "keep": pad(keep, fill=False, dtype=torch.bool)[0] if keep is not None else mask,
        }
        return {k: v.to(self.device) for k, v in out.items()}

    def queries(self, texts: list[str]) -> dict[str, torch.Tensor]:
        ids, attention = self.tokenizer.query_inputs(texts)
        return self._pad(ids, attention)

    def passages(self, texts: list[str]) -> dict[str, torch.Tensor]:
        passages = self.tokenizer.split([str(i) for i in range(len(texts))], [""] * len(texts), texts)
        ids = [p.input_ids for p in passages]
        return self._pad(ids, [np.ones(len(x), np.int32) for x in ids], [self.tokenizer.keep_mask(x) for x in ids])


def token_counts(hf_tokenizer, max_tokens: int, texts: list[str]) -> list[int]:
    """Tokens of each text as a passage (special tokens included, truncated to ``max_tokens``)."""
    return hf_tokenizer(texts, truncation=True, max_length=max_tokens, return_length=True, return_attention_mask=False)["length"]


def count_pair_tokens(table, hf_tokenizer, config: TrainConfig) -> np.ndarray:
    """(n_pairs,) each pair's longest passage in tokens, counted with ``hf_tokenizer``."""
    return pair_lengths(table, functools.partial(token_counts, hf_tokenizer, config.tokenizer.passage_tokens))


def pair_token_lengths(table, hf_tokenizer, config: TrainConfig) -> np.ndarray:
    """(n_pairs,) each pair's longest passage in tokens: the pairs file's ``tokens`` column
    (counted once, when the run's pairs were written), else counted now."""
    stored = table.column("tokens")
    if stored.null_count == 0:
        return stored.to_numpy()
    return count_pair_tokens(table, hf_tokenizer, config)


def represent(model: torch.nn.Module, inputs: dict[str, torch.Tensor], config: TrainConfig, centroids: bool) -> differentiable.Representations:
    raw = model(inputs["input_ids"], inputs["attention_mask"]).float()
    c = config.compress
    return differentiable.represent(
        raw, inputs["mask"], inputs["keep"], c.first_m, c.centroids if centroids else 0, c.kmeans_iterations, c.centroid_space, c.pooling
    )


def load_model(config: TrainConfig, device: torch.device):
    """(the trainable ``TokenModel`` with a Dense projection, its Hugging Face tokenizer)."""
    from mvr.operators.encode.encoder import DenseLayer, TokenEncoder

    encoder = TokenEncoder(config.base, device=str(device), dtype="float32")
    model = encoder.model
    if model.projection is None:
        model.projection = torch.nn.Sequential(DenseLayer.identity(model.dim)).to(device)
    elif not isinstance(model.projection, torch.nn.Sequential):
        raise ValueError(f"{config.base}: a ColBERT-format checkpoint; mvr train starts from a sentence-transformers / PyLate one")
    return model, encoder.tokenizer


def save_checkpoint(directory: str, model, hf_tokenizer, optimizer, scheduler, step: int, config: TrainConfig, n_pairs: int) -> None:
    """A loadable model directory plus ``TRAINER_STATE`` (what a resumed run needs)."""
    trained = {"objective": config.objective, "base": config.base, "step": step, "pairs": n_pairs, "config": config.model_dump(mode="json")}
    write_checkpoint(directory, model.backbone, hf_tokenizer, list(model.projection), pylate_config(config.tokenizer.model_dump()), trained)
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, str(Path(directory) / TRAINER_STATE))


def _restore(model, optimizer, scheduler, directory: str) -> int:
    """Weights and trainer state from a checkpoint directory; returns its step."""
    from transformers import AutoModel

    from mvr.operators.encode.encoder import DenseLayer

    d = Path(directory)
    model.backbone.load_state_dict(AutoModel.from_pretrained(str(d)).state_dict())
    for i, layer in enumerate(model.projection, 1):
        layer.load_state_dict(DenseLayer.load(d / dense_dir(i)).state_dict())
    state = torch.load(str(d / TRAINER_STATE), map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"])


def keep_metrics_to(path: Path, step: int) -> None:
    """Keep the lines of the metrics file ``path`` up to ``step``, the checkpoint a run
    resumes from (the steps after it run again and write their lines again); a torn line, from
    a worker killed mid-write, is dropped."""
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                if int(json.loads(line)["step"]) <= step:
                    kept.append(line + "\n")
            except (ValueError, KeyError, TypeError):
                continue
    path.write_text("".join(kept))


def _schedule(steps: int, warmup: float):
    ramp = max(1, int(steps * warmup))
    return lambda s: min((s + 1) / ramp, max(0.0, (steps - s) / max(1, steps - ramp)))


class Stepper:
    """One optimiser step of a worker (``step``): the objective's contrastive loss over a
    batch's queries and passages (in-batch negatives and the mined ones), distilled from the
    frozen ``teacher``'s pooled scores and holding the other modes at its scores when the
    config asks, then the backward pass, clipping, the optimiser and the schedule."""

    def __init__(
        self, config: TrainConfig, model: Any, trained: Any, teacher: Optional[Any], batches: Batches, optimizer: Any, scheduler: Any, device: Any
    ) -> None:
        self.config, self.model, self.trained, self.teacher, self.batches = config, model, trained, teacher, batches
        self.optimizer, self.scheduler = optimizer, scheduler
        self.held = [m for m in MODES if m != config.objective] if config.train.preserve > 0 else []  # modes held at the base's scores
        self.centroids, self.teacher_centroids = "softmax-centroid" in [config.objective, *self.held], "softmax-centroid" in self.held
        self.temperature = config.temperature()
        self.amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)

    def step(self, queries: list[str], passages: list[str]) -> dict[str, float]:
        """Train on one batch (``passages``: the queries' positives, then their negatives): the
        loss and its parts."""
        config = self.config
        q_in, p_in = self.batches.queries(queries), self.batches.passages(passages)
        with self.amp:
            q_rep, p_rep = represent(self.trained, q_in, config, False), represent(self.trained, p_in, config, self.centroids)
            scores = differentiable.score(config.objective, q_rep, p_rep)
            teacher_scores, extra = None, {}
            if self.teacher is not None:
                with torch.no_grad():
                    tq, tp = represent(self.teacher, q_in, config, False), represent(self.teacher, p_in, config, self.teacher_centroids)
                    teacher_scores = differentiable.pooled(tq, tp)
            loss, parts = contrastive_loss(scores, self.temperature, teacher_scores, distill=config.train.distill)
            if self.held:  # preserve > 0: there is a teacher
                kept = preservation_loss([(differentiable.score(m, q_rep, p_rep), differentiable.score(m, tq, tp), config.temperature(m)) for m in self.held])
                loss = loss + config.train.preserve * kept
                extra = {"preserve": float(kept.detach())}
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.train.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return {"loss": float(loss.detach()), **parts, **extra}


def train_loop(loop_config: dict[str, Any]) -> None:
    """One Ray Train worker: ``loop_config`` has ``config`` (a TrainConfig dump), ``pairs``
    (the pairs file) and ``run_dir`` (where progress is written)."""
    import ray.train
    import ray.train.torch

    config = TrainConfig.model_validate(loop_config["config"])
    ctx = ray.train.get_context()
    rank, workers = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    torch.manual_seed(config.train.seed)
    if device.type == "cpu" and loop_config.get("torch_threads"):
        torch.set_num_threads(int(loop_config["torch_threads"]))
    table = read_pairs(loop_config["pairs"])
    pairs, n_pairs = table.to_pydict(), table.num_rows
    steps = total_steps(n_pairs, config)

    model, hf_tokenizer = load_model(config, device)
    needs_teacher = config.train.distill > 0 or config.train.preserve > 0
    teacher = copy.deepcopy(model).eval().requires_grad_(False) if needs_teacher else None
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.learning_rate, weight_decay=config.train.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(steps, config.train.warmup))
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = _restore(model, optimizer, scheduler, d)
    trained = ray.train.torch.prepare_model(model) if workers > 1 else model
    stepper = Stepper(config, model, trained, teacher, Batches(hf_tokenizer, config, device), optimizer, scheduler, device)
    lengths = pair_token_lengths(table, hf_tokenizer, config) if config.train.group_by_length else None
    order = BatchOrder(n_pairs, config.train.batch_size, workers, config.train.seed, lengths)
    run_dir = Path(loop_config["run_dir"])
    if rank == 0:
        keep_metrics_to(run_dir / METRICS, start)
    t0, seen = time.perf_counter(), 0
    for step in range(start, steps):
        idx = order.indices(step, rank)
        queries = [pairs["query"][i] for i in idx]
        passages = [pairs["positive"][i] for i in idx] + [n for i in idx for n in pairs["negatives"][i]]
        losses = stepper.step(queries, passages)
        seen += len(idx)
        metrics = {"step": step + 1, "steps": steps, **losses, "examples_per_s": seen / (time.perf_counter() - t0), "resumed_from": start}
        if device.type == "cuda":
            metrics["gpu_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        if rank == 0:
            (run_dir / PROGRESS).write_text(json.dumps(metrics))
            with (run_dir / METRICS).open("a") as f:
                f.write(json.dumps(metrics) + "\n")
        if (step + 1) % config.train.checkpoint_every == 0 or step + 1 == steps:
            with tempfile.TemporaryDirectory() as tmp:
                if rank == 0:
                    save_checkpoint(tmp, model, hf_tokenizer, optimizer, scheduler, step + 1, config, n_pairs)
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp) if rank == 0 else None)
        elif (step + 1) % 10 == 0:
            ray.train.report(metrics)
