"""``CoalescedHandle``'s timeouts (``pipeline/serving/fanout.py``) on a partition that is busy
and on one that hangs: the first answers every call, however many trips wait on it, as long as
it keeps answering; the second is left out after ``timeout_s`` per waiting call. The handle is
driven by an in-process stand-in for a deployment handle; the real replica's hang is
test_serve's SIGSTOP test. The plan gives each call its work, which the handle allows for."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from mvr.operators.encode.query import EncodedQuery
from mvr.pipeline.config import SearchConfig
from mvr.pipeline.retrieval.layout import plan_layout
from mvr.pipeline.retrieval.plan import QueryPlan
from mvr.pipeline.serving.fanout import CoalescedHandle
from mvr.storage.manifest import Manifest


class SerialPartition:
    """A deployment handle's stand-in whose replica answers one trip every ``service_s``
    seconds, in the order sent (``hung``: never)."""

    def __init__(self, service_s: float, hung: bool = False) -> None:
        self.service_s, self.hung = service_s, hung
        self.queue: asyncio.Queue = asyncio.Queue()
        self.worker = asyncio.ensure_future(self._work())

    async def _work(self) -> None:
        while True:
            future, value = await self.queue.get()
            await asyncio.sleep(self.service_s)
            if not self.hung and not future.done():
                future.set_result(value)

    def __getattr__(self, method: str):
        def remote(*args):
            future = asyncio.get_running_loop().create_future()
            self.queue.put_nowait((future, [(True, a) for _, a in args[0]] if method == "many" else args))
            return future

        return type("Method", (), {"remote": staticmethod(remote)})()


def test_a_busy_partition_answers_every_trip_a_hung_one_is_left_out():
    async def main():
        busy = SerialPartition(service_s=0.2)
        handle = CoalescedHandle(busy, timeout_s=0.5)
        calls = []
        for q in range(6):  # six trips of one call, each sent while the partition works on the others
            calls.append(handle.call("hits", q))
            await asyncio.sleep(0)
        # the last is answered 1.2 s after it was sent, more than timeout_s; the partition
        # answered a call every 0.2 s meanwhile, so none is left out
        assert await asyncio.gather(*calls) == [(q,) for q in range(6)]
        assert handle.trips == 6 and handle.calls == 6

        hung = CoalescedHandle(SerialPartition(service_s=0.0, hung=True), timeout_s=0.1)
        batch = [hung.call("hits", q) for q in range(3)]  # one trip of three calls
        got = await asyncio.gather(*batch, return_exceptions=True)
        assert all(isinstance(e, asyncio.TimeoutError) for e in got) and "none of 3 calls (3 of work) for 0.3 s" in str(got[0])
        with pytest.raises(asyncio.TimeoutError, match=r"none of 1 calls \(1 of work\) for 0.1 s"):  # the next call: its own timeout
            await hung.call("hits", 3)
        busy.worker.cancel()

    asyncio.run(main())


def test_a_call_carrying_more_work_is_allowed_its_time():
    async def main():
        slow = SerialPartition(service_s=0.3)
        handle = CoalescedHandle(slow, timeout_s=0.1)
        # one call asking for 5 default queries' worth: 0.5 s allowed, answered after 0.3 s
        assert await handle.call("hits", "heavy", work=5) == ("heavy",)
        with pytest.raises(asyncio.TimeoutError, match=r"none of 1 calls \(1 of work\) for 0.1 s"):  # a default call: its own 0.1 s
            await handle.call("hits", "light")
        hung = CoalescedHandle(SerialPartition(service_s=0.0, hung=True), timeout_s=0.1)
        with pytest.raises(asyncio.TimeoutError, match=r"none of 1 calls \(3 of work\) for 0.3 s"):
            await hung.call("hits", "heavy", work=3)
        slow.worker.cancel()

    asyncio.run(main())


def test_the_plan_weighs_each_call_by_the_work_it_asks_for():
    """A query's calls carry its k′ and candidate cap over its mode's defaults; a batch's
    exact call its number of queries (the plan's first trip, read without answering it)."""
    parts = [{"path": f"ann/t/b/part-{i}", "first_passage": 15 * i, "passages": 15, "vectors": 900, "files": {}} for i in range(2)]
    manifest = Manifest(config={}, model={}, input={}, counts={"passages": 30}, dim=4, codecs={}, shards=[], ann={"tokens": {"partitions": parts}})
    plan = QueryPlan(plan_layout("/idx", manifest, ["maxsim", "pooled"]), SearchConfig())
    query = EncodedQuery("q", np.eye(4, dtype=np.float32)[:2], np.eye(4, dtype=np.float32)[0])
    default = SearchConfig().maxsim

    def first_trip(search) -> list[float]:
        trip = search.send(None)
        search.close()
        return [c.work for c in trip.calls.values()]

    assert first_trip(plan.search(query, 10, "maxsim")) == [1.0, 1.0]
    assert first_trip(plan.search(query, 10, "maxsim", {"k_prime": 8 * default.k_prime})) == [8.0, 8.0]
    assert first_trip(plan.search(query, 10, "maxsim", {"candidate_cap": 3 * default.candidate_cap})) == [3.0, 3.0]
    assert first_trip(plan.search(query, 100, "maxsim")) == [10.0, 10.0]  # k = 10 k_ref: k′ scaled by 10
    assert first_trip(plan.search_many([query] * 3, 10, "pooled")) == [3.0]  # pooled: exact here, one rank_batch
