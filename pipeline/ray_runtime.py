"""Connecting to Ray and sizing work to the cluster's resources."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

import ray

from pipeline.config import RuntimeConfig


def init_ray(address: Optional[str] = None) -> None:
    """Join the cluster named by ``address`` / ``RAY_ADDRESS`` (set under ``ray job submit``),
    or start an embedded local one. Idempotent."""
    if ray.is_initialized():
        return
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, logging_level=logging.WARNING, log_to_driver=True)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = True
    ctx.print_on_execution_start = False


@dataclass(frozen=True)
class EncodePlan:
    """How the encode stage is placed: ``actors`` actors, each reserving ``cpus`` CPUs and
    ``gpus`` GPUs and running torch with ``threads`` intra-op threads."""

    actors: int
    cpus: float
    gpus: float
    threads: Optional[int]
    io_cpus: float  # CPUs reserved by each read/tokenize and write task


def plan_encode(runtime: RuntimeConfig) -> EncodePlan:
    """GPU cluster: one actor per GPU (1 GPU, 1 CPU each). CPU-only: one actor per node's
    worth of CPUs, reserving all but one CPU so the read and write stages keep a slot, and
    running torch on all the node's cores (reading and writing are light)."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    cpus = float(resources.get("CPU", 1))
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = max((n["Resources"].get("CPU", 1) for n in nodes), default=cpus)
    if gpus:
        return EncodePlan(runtime.encode_actors or gpus, runtime.encode_cpus or 1, 1, runtime.torch_threads, 0.5)
    per_actor = runtime.encode_cpus or max(1.0, node_cpus - 1)
    actors = runtime.encode_actors or max(1, int(cpus // max(per_actor + 1, 2)))
    threads = runtime.torch_threads or int(node_cpus)
    return EncodePlan(actors, per_actor, 0, threads, 0.25)


def task_result(ref: "ray.ObjectRef"):
    """``ray.get(ref)``, with an application ``ValueError`` raised by the task (bad input, a
    corrupted file) re-raised as itself, so the job reports its message, not a traceback."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, ValueError):
            raise e.cause from None
        raise
