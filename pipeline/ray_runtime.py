"""Connecting to Ray and sizing work to the cluster's resources."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

import ray

from mvr.pipeline.config import RuntimeConfig

# Ray's own error when the raylet of a local cluster it starts has not registered with the GCS
# within a fixed 30 s (ray/_private/node.py, ``Node.__init__``: no setting changes it)
RAY_START_TIMEOUT = "The current node timed out during startup"
RAY_START_ATTEMPTS = 3  # local starts tried when each times out so, before its error is raised

log = logging.getLogger(__name__)


def init_ray(address: Optional[str] = None, quiet: bool = False) -> None:
    """Join the cluster named by ``address`` / ``RAY_ADDRESS`` (set under ``ray job submit``),
    or start an embedded local one. Idempotent (the first call's settings stay). A local
    start that times out in Ray's own start-up (``RAY_START_TIMEOUT``, under load) is
    stopped and made again, ``RAY_START_ATTEMPTS`` times in all (``_start_ray``).

    ``quiet``: Ray's own output stays in its session's log files (``ray_logs_dir()``): no
    output of workers and actors forwarded here, no Ray Data progress, only errors of Ray's,
    Ray Data's and Serve's loggers in this process (the demo's)."""
    if ray.is_initialized():
        return
    level = logging.ERROR if quiet else logging.WARNING
    _start_ray(address or os.environ.get("RAY_ADDRESS") or None, level, quiet)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = not quiet
    ctx.print_on_execution_start = False
    if not os.environ.get("MVR_DEBUG"):
        # reports, with "the stack trace below", the error the job raises and reports itself
        # (its full trace stays in Ray Data's log file); MVR_DEBUG=1 keeps it
        logging.getLogger("ray.data.exceptions").setLevel(logging.CRITICAL)
        # "An exception was raised from a task …, set DataContext.max_errored_blocks": the same
        # error again, and advice that would commit an index without the failed blocks
        logging.getLogger("ray.data._internal.execution.streaming_executor_state").addFilter(
            lambda record: not record.getMessage().startswith("An exception was raised from a task")
        )
    if quiet:
        importlib.import_module("ray.serve")  # configures its logger on import: the level is set after

        for name in ("ray", "ray.data", "ray.serve"):
            logging.getLogger(name).setLevel(level)


def _start_ray(address: Optional[str], level: int, quiet: bool) -> None:
    """``ray.init``; a local start (``address`` None or "local") that fails with
    ``RAY_START_TIMEOUT`` (seen under load) is tried again, ``RAY_START_ATTEMPTS`` times in
    all, each failed attempt's processes stopped first. Other errors, and any error while
    joining an address, are raised at once."""
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            ray.init(address=address, logging_level=level, log_to_driver=not quiet)
            return
        except Exception as exc:
            if address not in (None, "local") or RAY_START_TIMEOUT not in str(exc):
                raise
            node = _failed_node(exc)
            if node is None:  # nothing to stop it with: a second start would run beside it
                raise
            _stop_node(node)
            if attempt == RAY_START_ATTEMPTS:
                raise
            log.warning(
                "Ray's local start timed out (%s); its processes stopped, starting again (attempt %d of %d)", RAY_START_TIMEOUT, attempt + 1, RAY_START_ATTEMPTS
            )


def _failed_node(exc: BaseException) -> "Optional[ray._private.node.Node]":
    """The ``ray._private.node.Node`` whose start raised ``exc``: the ``self`` of the
    ``Node.__init__`` frame in its traceback (the node's processes are in its
    ``all_processes``), or None when there is none."""
    init = ray._private.node.Node.__init__.__code__
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code is init:
            return frame.f_locals.get("self")
    return None


def _stop_node(node: "ray._private.node.Node", timeout_s: float = 10.0) -> None:
    """Stop the processes a failed local start spawned (its GCS, raylet, dashboard, log
    monitor, …) and theirs (the raylet's agents and workers, the dashboard's module
    processes, which outlive it by a second or more), as ``ray.shutdown()`` stops a started
    node's: they run until this process exits otherwise, and ``ray.shutdown()`` cannot reach
    them (``ray.init`` never kept the node). Returns when all are gone (killed after
    ``timeout_s``)."""
    import psutil

    procs: list[psutil.Process] = []
    for infos in node.all_processes.values():
        for info in infos:
            try:
                p = psutil.Process(info.process.pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
    node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)

    def running() -> list[psutil.Process]:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive

    deadline = time.monotonic() + timeout_s
    while (left := running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def ray_logs_dir() -> Optional[str]:
    """Where this process's Ray session writes its logs (workers, actors, Serve); None before
    ``init_ray`` or when unknown."""
    try:
        node: Any = ray._private.worker._global_node  # Ray declares it `= None` (so typed None): a Node once Ray is started
        return node.get_logs_dir_path()
    except AttributeError:  # no Ray started here (or a Ray without this private API)
        return None


@dataclass(frozen=True)
class EncodePlan:
    """How the encode stage is placed: ``actors`` actors, each reserving ``cpus`` CPUs and
    ``gpus`` GPUs and running torch with ``threads`` intra-op threads.

    The read/tokenize, validation and write tasks that feed and drain them reserve no CPU
    and run at most ``io_tasks`` at once, on nodes that have CPUs (``io_excluded``: the ids
    of nodes without, such as a head started with ``--num-cpus 0``). Were they to reserve CPUs,
    the encode actors of jobs running side by side (two ``mvr add`` on one cluster) could hold
    every CPU while each job's actors wait for input its tasks cannot be scheduled to read:
    both jobs would hang (measured: two concurrent adds on this 2-CPU machine did)."""

    actors: int
    cpus: float
    gpus: float
    threads: Optional[int]
    io_tasks: int
    io_excluded: tuple[str, ...] = ()
    driver_threads: int = 0  # torch threads of a job run in the driver (its node's CPUs); 0: the driver's node has no CPU for work
    in_driver: bool = False  # every stage of the job in the driver process, no Ray task or actor (``for_job``)

    def for_job(self, rows: int, small_job_rows: int) -> "EncodePlan":
        """This plan for a job of ``rows`` valid input rows: on a cluster without GPUs, a job of
        at most ``small_job_rows`` runs its stages in the driver process (``in_driver``:
        ``pipeline/indexing/in_driver.py``), on ``driver_threads`` torch threads, so that it
        starts no worker process (each imports torch and loads the model) and the driver's next
        small job finds the model loaded. Not when the driver's node has no CPU for work (a
        head started with ``--num-cpus 0`` is kept free of it), and a GPU stays with actors."""
        if self.gpus or rows > small_job_rows or not self.driver_threads:
            return self
        return dataclasses.replace(self, in_driver=True, actors=1, threads=self.driver_threads)

    def device(self, requested: str = "auto") -> str:
        """The device the encode stage runs the model on: ``requested`` (``model.device``)
        unless it is "auto", then "cuda" when this plan gives each actor a GPU, else "cpu"
        (Ray leaves the GPUs visible to a worker that reserved none: "auto" resolved there
        would use one unreserved)."""
        if requested != "auto":
            return requested
        return "cuda" if self.gpus else "cpu"

    def io_args(self) -> dict:
        """Ray remote options of an I/O task (``num_cpus`` and, when some node has no CPU, a
        label selector that keeps the task off it)."""
        args: dict = {"num_cpus": 0}
        if self.io_excluded:
            args["label_selector"] = {"ray.io/node-id": f"!in({', '.join(self.io_excluded)})"}
        return args

    def io_compute(self, inputs: int) -> "Optional[ray.data.TaskPoolStrategy]":
        """Ray Data compute strategy of an I/O stage fed about ``inputs`` blocks: at most
        ``io_tasks`` tasks at once, and no more than it has blocks (a cap above its inputs has
        Ray Data warn that the stage cannot reach it); None for a job in the driver."""
        if self.in_driver:
            return None
        return ray.data.TaskPoolStrategy(size=max(1, min(self.io_tasks, inputs)))

    def __str__(self) -> str:
        return (
            f"{self.actors} actor(s) × {self.cpus:g} CPU, {self.gpus:g} GPU, {self.threads or 'all'} torch threads; "
            f"I/O tasks ≤ {self.io_tasks} at once, no CPU reserved"
        )


def plan_encode(runtime: RuntimeConfig) -> EncodePlan:
    """GPU cluster: one actor per GPU (1 GPU, 1 CPU each). CPU-only: one actor per node's
    worth of CPUs, reserving all but one CPU, and running torch on all the node's cores
    (reading and writing are light). When part of the cluster's CPUs is held by something else
    (a service on the same machine), the actors reserve only what is free. I/O tasks: as many
    at once as the cluster has CPUs."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    cpus = float(resources.get("CPU", 1))
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = max((n["Resources"].get("CPU", 1) for n in nodes), default=cpus)
    io_tasks = max(1, int(cpus))
    cpu_less = tuple(sorted(n["NodeID"] for n in nodes if not n["Resources"].get("CPU")))
    io_excluded = cpu_less if len(cpu_less) < len(nodes) else ()
    driver_cpus = driver_node_cpus()
    driver_threads = (runtime.torch_threads or driver_cpus) if driver_cpus else 0
    if gpus:
        return EncodePlan(runtime.encode_actors or gpus, runtime.encode_cpus or 1, 1, runtime.torch_threads, io_tasks, io_excluded, driver_threads)
    per_actor = runtime.encode_cpus or max(1.0, node_cpus - 1)
    actors = runtime.encode_actors or max(1, int(cpus // max(per_actor + 1, 2)))
    free = float(ray.available_resources().get("CPU", cpus))
    if not runtime.encode_cpus and free < per_actor * actors + 0.5:
        # part of the cluster is held (a service beside an mvr add): reserve what is free, or
        # the actors would wait for CPUs that are never released; torch still uses the cores
        per_actor = max(0.25, min(per_actor, free - 0.5))
        actors = runtime.encode_actors or max(1, int(free // (per_actor + 0.5)))
    threads = runtime.torch_threads or int(node_cpus)
    return EncodePlan(actors, per_actor, 0, threads, io_tasks, io_excluded, driver_threads)


def driver_node_cpus() -> int:
    """The CPUs of the node this process (a job's driver) runs on; 0 when it has none for work
    (a head started with ``--num-cpus 0``)."""
    here = ray.get_runtime_context().get_node_id()
    return int(next((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive") and n["NodeID"] == here), 0))


def small_build_threads(passages: int, index_config: dict[str, Any]) -> int:
    """Threads for a build over ``passages`` passages (ANN or BM25 partitions, built or
    extended) run in the driver process, or 0 for Ray tasks. The rule of small indexing jobs
    (``EncodePlan.for_job``): in the driver when it is small (at most the index's
    ``runtime.small_job_rows``, from ``index_config``, its manifest's configuration) on a
    cluster without GPUs, and the driver's node has CPUs for it. A Ray task would start a
    worker that imports FAISS and mvr for a build of milliseconds (``mvr add`` of a few
    documents, ``mvr demo``)."""
    small_rows = int(index_config.get("runtime", {}).get("small_job_rows", RuntimeConfig.model_fields["small_job_rows"].default))
    if passages > small_rows or ray.cluster_resources().get("GPU", 0):
        return 0
    return driver_node_cpus()


T = TypeVar("T")


def run_calls(
    calls: Sequence[tuple[Callable[..., T], tuple]], in_driver: bool, options: dict[str, Any], desc: Optional[str] = None, unit: str = "partition"
) -> list[T]:
    """``fn(*args)`` for each ``(fn, args)`` of ``calls``, results in order: one after another in
    this process (``in_driver``: ``options`` unused), or as Ray tasks with ``options``
    (``ray.remote``'s) side by side. With ``desc``, a progress bar (tqdm) counts them in ``unit`` as they end. A task's
    application ``ValueError`` is raised as itself (``task_result``)."""
    from tqdm import tqdm

    with tqdm(total=len(calls), desc=desc, unit=unit, disable=desc is None) as bar:
        if in_driver:
            out = []
            for fn, args in calls:
                out.append(fn(*args))
                bar.update(1)
            return out
        remotes = {fn: ray.remote(**options)(fn) for fn in {fn for fn, _ in calls}}
        refs = [remotes[fn].remote(*args) for fn, args in calls]
        done: dict[Any, T] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done[ready[0]] = task_result(ready[0])
            bar.update(1)
        return [done[r] for r in refs]


def task_cpus(want: float = 1.0) -> float:
    """CPUs a job's tasks reserve each: ``want``, or less when less is free (a service holding
    part of a small cluster), so that they can start at all. Call it once, before submitting."""
    free = float(ray.available_resources().get("CPU", want))
    return want if free >= want else max(0.25, round(free, 2))


def task_result(ref: "ray.ObjectRef"):
    """``ray.get(ref)``, with an application ``ValueError`` raised by the task (bad input, a
    corrupted file) re-raised as itself, so the job reports its message, not a traceback."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, ValueError):
            raise e.cause from None
        raise
