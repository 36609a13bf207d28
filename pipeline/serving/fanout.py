"""The ingress's way to a partition, ``call(method, *args)`` → a future.

``CoalescedHandle``: trips to a partition deployment, coalesced: the calls a ``Searcher``
replica makes to one partition deployment in the same turn of its event loop (the queries of a
``/search/batch``, or concurrent ``/search`` requests whose encoding was batched together)
go as one ``many`` call, so a batch of Q queries over P partitions takes P actor calls a trip
instead of Q × P. A lone call goes as itself.

Each caller gets its own future: a call that fails inside ``many`` fails alone; a trip that
fails (a dead replica) fails every call it carried, as the calls would have failed one by one;
a trip whose callers have all given up (``asyncio.wait_for`` timed out) is cancelled.

``LocalPartition``: a partition the ingress holds itself (``partition.placement: ingress``),
called in place, with the same ``call`` interface."""

from __future__ import annotations

import asyncio
from typing import Any


# What ``PartitionServer.many`` runs: the trips of a query.
TRIP_METHODS = frozenset({"first_trip", "hits", "rank", "bm25_rank", "hybrid"})


class CoalescedHandle:
    """Wraps a partition's ``DeploymentHandle``: ``call(method, *args)`` returns a future of
    ``handle.method.remote(*args)``'s result, sent with the other calls of the same loop turn."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.pending: list[tuple[str, tuple, asyncio.Future]] = []
        self.trips = 0  # actor calls sent
        self.calls = 0  # calls carried by them
        self._delivering: set[asyncio.Task] = set()  # the loop holds tasks weakly: keep them until done

    def info(self) -> Any:
        """The partition's ``info()`` (an awaitable), sent on its own."""
        return self.handle.info.remote()

    def call(self, method: str, *args: Any) -> asyncio.Future:
        if method not in TRIP_METHODS:
            raise ValueError(f"{method} is not a partition trip")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((method, args, future))
        return future

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        futures = [f for _, _, f in batch]
        if all(f.done() for f in futures):
            return
        self.trips += 1
        self.calls += len(batch)
        if len(batch) == 1:
            method, args, _ = batch[0]
            response = getattr(self.handle, method).remote(*args)
        else:
            response = self.handle.many.remote([(m, a) for m, a, _ in batch])
        waiting = [len(futures)]

        def given_up(f: asyncio.Future) -> None:  # every caller timed out or was cancelled: so is the trip
            if f.cancelled():
                waiting[0] -= 1
                if waiting[0] == 0:
                    response.cancel()

        for f in futures:
            f.add_done_callback(given_up)
        task = asyncio.ensure_future(self._deliver(response, futures, len(batch) == 1))
        self._delivering.add(task)
        task.add_done_callback(self._delivering.discard)

    @staticmethod
    async def _deliver(response: Any, futures: list[asyncio.Future], single: bool) -> None:
        try:
            got = await response
        except BaseException as e:  # the trip failed (or was cancelled): each call fails with it
            for f in futures:
                if not f.done():
                    f.set_exception(e if isinstance(e, Exception) else RuntimeError(f"partition trip ended: {type(e).__name__}"))
            return
        results = [(True, got)] if single else got
        for f, (ok, value) in zip(futures, results):
            if not f.done():
                f.set_result(value) if ok else f.set_exception(value)


class LocalPartition:
    """A partition held by the ingress itself (``partition.placement: ingress``): ``call(method,
    *args)`` runs the trip at once, in the caller's thread, and returns its done future (the
    result, or the exception the trip raised), so a query's trips cost no actor call and the
    ingress's merge is the same code as over ``CoalescedHandle``. ``host`` is a
    ``PartitionHost``."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.trips = 0
        self.calls = 0

    def info(self) -> asyncio.Future:
        """The partition's ``info()``, marked as held by the ingress, as a done future."""
        future = asyncio.get_running_loop().create_future()
        future.set_result({**self.host.info(), "placement": "ingress"})
        return future

    def call(self, method: str, *args: Any) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        ((ok, value),) = run_many(self.host, [(method, args)])
        self.trips += 1
        self.calls += 1
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
        return future


def run_many(target: Any, calls: list[tuple[str, tuple]]) -> list[tuple[bool, Any]]:
    """``PartitionServer.many``'s body: each (method, args) of ``calls`` run on ``target`` in
    order, as (True, result) or (False, the exception it raised)."""
    out: list[tuple[bool, Any]] = []
    for method, args in calls:
        if method not in TRIP_METHODS:
            out.append((False, ValueError(f"{method} is not a partition trip")))
            continue
        try:
            out.append((True, getattr(target, method)(*args)))
        except Exception as e:  # noqa: BLE001 - this call fails alone, the others of the trip answer
            out.append((False, e))
    return out
