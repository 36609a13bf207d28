"""The ingress's way to a partition, ``call(method, *args)`` → a future.

``CoalescedHandle``: trips to a partition deployment, coalesced: the calls a ``Searcher``
replica makes to one partition deployment in the same turn of its event loop (the queries of a
``/search/batch``, or concurrent ``/search`` requests whose encoding was batched together)
go as one ``many`` call, so a batch of Q queries over P partitions takes P actor calls a trip
instead of Q × P. A lone call goes as itself.

Each caller gets its own future: a call that fails inside ``many`` fails alone; a trip that
fails (a dead replica) fails every call it carried, as the calls would have failed one by one;
a trip whose callers have all given up is cancelled.

Timeouts tell a hung partition from a busy one: a partition with calls from this handle
waiting that carry w of work in all (``Call.work``: 1 a query at its mode's defaults) and that
answers none of them for w × ``timeout_s`` (counted from its last answer, or from when it was
sent work while it had none) is taken as hung, and every trip waiting on it fails its calls
with ``TimeoutError``. A lone default query on an idle partition so gets ``timeout_s``; a batch
of n calls, a query asking for n times the default candidates, or several trips sent while it
still works on others (its replica runs them side by side, or one after another), get the time
their work takes, as long as the partition keeps answering.

A partition the ingress holds itself (``partition.placement: ingress``) is called in place
through ``pipeline.retrieval.host.LocalPartition``, with the same ``call`` interface."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from mvr.pipeline.retrieval.trips import TRIP_METHODS


class CoalescedHandle:
    """Wraps a partition's ``DeploymentHandle``: ``call(method, *args)`` returns a future of
    ``handle.method.remote(*args)``'s result, sent with the other calls of the same loop turn."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s
        self.pending: list[tuple[str, tuple, asyncio.Future, float]] = []
        self.trips = 0  # actor calls sent
        self.calls = 0  # calls carried by them
        self._delivering: set[asyncio.Task] = set()  # the loop holds tasks weakly: keep them until done
        self._waiting: dict[asyncio.Task, tuple[Any, list[asyncio.Future], float]] = {}  # trips sent, not answered: their response, futures and work
        self._quiet_since = 0.0  # loop time of the partition's last answer, or of the work sent to it while it had none
        self._watchdog: Optional[asyncio.TimerHandle] = None

    def info(self) -> Any:
        """The partition's ``info()`` (an awaitable), sent on its own."""
        return self.handle.info.remote()

    def call(self, method: str, *args: Any, work: float = 1.0) -> asyncio.Future:
        """``method(*args)``'s answer, a future; ``work``: the call's ``Call.work``."""
        if method not in TRIP_METHODS:
            raise ValueError(f"{method} is not a partition trip")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append((method, args, future, max(1.0, work)))
        return future

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        futures = [f for _, _, f, _ in batch]
        if all(f.done() for f in futures):
            return
        self.trips += 1
        self.calls += len(batch)
        if len(batch) == 1:
            method, args, _, _ = batch[0]
            response = getattr(self.handle, method).remote(*args)
        else:
            response = self.handle.many.remote([(m, a) for m, a, _, _ in batch])
        waiting = [len(futures)]

        def given_up(f: asyncio.Future) -> None:  # every caller timed out or was cancelled: so is the trip
            if f.cancelled():
                waiting[0] -= 1
                if waiting[0] == 0:
                    response.cancel()

        for f in futures:
            f.add_done_callback(given_up)
        loop = asyncio.get_running_loop()
        if not self._waiting:
            self._quiet_since = loop.time()
        task = asyncio.ensure_future(self._deliver(response, futures, len(batch) == 1))
        self._waiting[task] = (response, futures, sum(w for _, _, _, w in batch))
        self._delivering.add(task)
        task.add_done_callback(self._delivering.discard)
        task.add_done_callback(self._answered)
        self._watch()

    def _answered(self, task: asyncio.Task) -> None:
        """A trip ended: answered (the partition is alive), or cancelled, or expired."""
        if self._waiting.pop(task, None) is not None and not task.cancelled() and task.result():
            self._quiet_since = asyncio.get_running_loop().time()
        self._watch()

    def _watch(self) -> None:
        """(Re)arm the one timer of this partition: calls carrying w of work waiting → due
        w × ``timeout_s`` after the partition was last heard from."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        work = sum(w for _, _, w in self._waiting.values())
        if work:
            self._watchdog = asyncio.get_running_loop().call_at(self._quiet_since + self.timeout_s * work, self._expire)

    def _expire(self) -> None:
        """The partition answered nothing in time: every trip waiting on it fails its calls."""
        self._watchdog = None
        trips, self._waiting = self._waiting, {}
        calls = sum(len(fs) for _, fs, _ in trips.values())
        work = sum(w for _, _, w in trips.values())
        for response, futures, _ in trips.values():
            for f in futures:
                if not f.done():
                    f.set_exception(asyncio.TimeoutError(f"the partition answered none of {calls} calls ({work:g} of work) for {self.timeout_s * work:g} s"))
            response.cancel()

    @staticmethod
    async def _deliver(response: Any, futures: list[asyncio.Future], single: bool) -> bool:
        """Each call's answer to its future; whether the partition answered the trip (False:
        the trip failed, was cancelled or expired)."""
        try:
            got = await response
        except BaseException as e:  # the trip failed (or was cancelled): each call fails with it
            for f in futures:
                if not f.done():
                    f.set_exception(e if isinstance(e, Exception) else RuntimeError(f"partition trip ended: {type(e).__name__}"))
            return False
        results = [(True, got)] if single else got
        for f, (ok, value) in zip(futures, results):
            if not f.done():
                f.set_result(value) if ok else f.set_exception(value)
        return True
