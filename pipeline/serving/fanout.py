"""The ingress's way to a partition, ``call(method, *args)`` → a future.

``CoalescedHandle``: trips to a partition deployment, coalesced: the calls a ``Searcher``
replica makes to one partition deployment in the same turn of its event loop (the queries of a
``/search/batch``, or concurrent ``/search`` requests whose encoding was batched together)
go as one ``many`` call, so a batch of Q queries over P partitions takes P actor calls a trip
instead of Q × P. A lone call goes as itself.

Each caller gets its own future: a call that fails inside ``many`` fails alone; a trip that
fails (a dead replica) fails every call it carried, as the calls would have failed one by one;
a trip whose callers have all given up is cancelled. A trip not answered within ``timeout_s``
for each call it carries (the partition answers them one after another) fails its calls with
``TimeoutError``, so a large batch is not cut off by the time one call may take.

A partition the ingress holds itself (``partition.placement: ingress``) is called in place
through ``pipeline.retrieval.host.LocalPartition``, with the same ``call`` interface."""

from __future__ import annotations

import asyncio
from typing import Any

from mvr.pipeline.retrieval.trips import TRIP_METHODS


class CoalescedHandle:
    """Wraps a partition's ``DeploymentHandle``: ``call(method, *args)`` returns a future of
    ``handle.method.remote(*args)``'s result, sent with the other calls of the same loop turn."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s
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

        def expire() -> None:  # not answered in time: each call fails (the trip is cancelled)
            for f in futures:
                if not f.done():
                    f.set_exception(asyncio.TimeoutError(f"no answer within {self.timeout_s * len(futures):g} s"))
            response.cancel()

        timer = asyncio.get_running_loop().call_later(self.timeout_s * len(futures), expire)
        task = asyncio.ensure_future(self._deliver(response, futures, len(batch) == 1))
        task.add_done_callback(lambda _: timer.cancel())
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
