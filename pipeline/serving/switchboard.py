"""Which index version a service's ingress replicas serve: the ``Switchboard``, a detached
actor a service (``{app}-switchboard``), set by ``deploy`` and followed by every ``Searcher``
replica.

A version switch that changes nothing in the ingress itself (the same configuration, token,
encoder and reservations: its ``fixed`` digest) is made in place: ``deploy`` starts the new
version's index app, sets the target here, and each running replica (``Follower``) builds the
new version's state beside the old one (its manifest, layout, catalog, partition handles),
swaps it in, lets the queries already running on the old one finish, and acknowledges. No
replica starts, so an ingress that holds the model (``encoder.placement: ingress``, the default)
does not load it again. Any other change rolls the ingress over (new replicas), as Serve does.

A replica that starts later (Serve replacing a dead one) reads the target before anything
else: its own arguments may name a version that is gone."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Optional

import ray

from mvr.pipeline.config import ServeConfig
from mvr.pipeline.retrieval.layout import ServingLayout, default_modes, plan_layout
from mvr.storage.manifest import Manifest

log = logging.getLogger("ray.serve")

NAMESPACE = "mvr"  # the detached actors of mvr's services (the reloader's too)
WAIT_S = 30.0  # a follower's long poll: the switchboard answers at a change, or after this


def served_layout(index_url: str, manifest: Manifest, config: ServeConfig) -> ServingLayout:
    """The layout a service of ``config`` serves of ``manifest``: its modes (``config.modes`` or
    the index's defaults), exact or not, the hybrid's dense mode."""
    modes = config.modes or default_modes(manifest)
    return plan_layout(index_url, manifest, modes, config.search.exact, config.search.hybrid.dense)


def switchboard_name(app_name: str) -> str:
    return f"{app_name}-switchboard"


@ray.remote(num_cpus=0)
class Switchboard:
    """The target ``{"fixed", "version", "index_app"}`` of one service (None before the first
    deploy), and which replicas run each version. Async: a replica's ``wait`` waits on the
    actor's event loop, any number at once."""

    def __init__(self) -> None:
        self.target: Optional[dict[str, Any]] = None
        self.acks: dict[int, set[str]] = {}
        self.changed = asyncio.Event()

    async def set(self, target: Optional[dict[str, Any]]) -> None:
        self.target = target
        self.changed.set()
        self.changed = asyncio.Event()

    async def get(self) -> Optional[dict[str, Any]]:
        return self.target

    async def wait(self, version: int, timeout_s: float = WAIT_S) -> Optional[dict[str, Any]]:
        """The target once its version is not ``version`` (or after ``timeout_s``)."""
        if self.target is None or self.target["version"] == version:
            try:
                await asyncio.wait_for(self.changed.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
        return self.target

    async def ack(self, replica: str, version: int) -> None:
        self.acks.setdefault(version, set()).add(replica)

    async def acked(self, version: int) -> int:
        """The replicas that have said they serve ``version``."""
        return len(self.acks.get(version, ()))


def switchboard(app_name: str, create: bool = False) -> Any:
    """The service's ``Switchboard`` handle (created, detached, when ``create`` and there is
    none), or None."""
    name = switchboard_name(app_name)
    if create:
        # @ray.remote made the class an ActorClass (mypy keeps a decorated class's own type)
        return Switchboard.options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote()  # type: ignore[attr-defined]
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


class Follower:
    """A replica's side: ``current()`` is the version this replica should serve at start (the
    target, when it is for a replica like this one: the same ``fixed``), and a daemon thread
    that waits for the next target and calls ``switch(target)`` (which builds, swaps and
    drains), then acknowledges."""

    def __init__(self, app_name: str, fixed: str, replica: str) -> None:
        self.board = switchboard(app_name)
        self.fixed, self.replica = fixed, replica

    def current(self) -> Optional[dict[str, Any]]:
        if self.board is None:
            return None
        target = ray.get(self.board.get.remote())
        return target if target is not None and target["fixed"] == self.fixed else None

    def ack(self, version: int) -> None:
        if self.board is not None:
            self.board.ack.remote(self.replica, version)

    def follow(self, version: int, switch: Callable[[dict[str, Any]], None]) -> None:
        """Start following from ``version`` (served now)."""
        if self.board is None:
            return
        self.ack(version)
        threading.Thread(target=self._loop, args=(version, switch), daemon=True, name="mvr-switch").start()

    def _loop(self, version: int, switch: Callable[[dict[str, Any]], None]) -> None:
        seen = version  # the last target version looked at: the next wait is for a newer one
        while True:
            try:
                target = ray.get(self.board.wait.remote(seen))
            except Exception as exc:  # the switchboard is gone (the service deleted): stop following
                log.warning("stopped following the service's versions: %s", exc)
                return
            if target is None or target["version"] == seen:
                continue  # the long poll ended without a change
            seen = target["version"]
            if target["fixed"] != self.fixed or target["index_app"] is None:
                continue  # for replicas of another configuration, or holding the partitions: a rollover replaces this one
            try:
                switch(target)
            except Exception:
                log.exception("switching to index version %s failed; still serving version %s", seen, version)
                continue
            version = seen
            self.ack(version)
