"""``CoalescedHandle``'s timeouts (``pipeline/serving/fanout.py``) on a partition that is busy
and on one that hangs: the first answers every call, however many trips wait on it, as long as
it keeps answering; the second is left out after ``timeout_s`` per waiting call. The handle is
driven by an in-process stand-in for a deployment handle; the real replica's hang is
test_serve's SIGSTOP test."""

from __future__ import annotations

import asyncio

import pytest

from mvr.pipeline.serving.fanout import CoalescedHandle


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
        assert all(isinstance(e, asyncio.TimeoutError) for e in got) and "none of 3 calls for 0.3 s" in str(got[0])
        with pytest.raises(asyncio.TimeoutError, match="none of 1 calls for 0.1 s"):  # the next call: its own timeout
            await hung.call("hits", 3)
        busy.worker.cancel()

    asyncio.run(main())
