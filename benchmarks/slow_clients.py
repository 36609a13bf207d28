"""Slow and malformed HTTP clients: how long each kind holds a connection to the search service
before it is cut, and what N of them held open cost the valid clients.

    python benchmarks/slow_clients.py [--index DIR | --workdir /tmp/mvr-bench] [--clients 2]
        [--seconds 15] [--slowloris 0,10,50,200] [--slow-bodies 16,64] [--hold-s 30]
        [--body-timeout-s 10] [--mixed ROUNDS] [--json slow_clients.json]

Index: ``--index``, or msmarco-sample with ``mvr index`` defaults and FAISS IVFPQ partitions
(P = 2) in ``--workdir`` (built when missing, as ``benchmarks/serve_load.py`` builds it). The
service: ``mvr serve``'s defaults (``maxsim`` only), ``body_timeout_s`` from the flag.

1. Each kind of bad client alone (raw sockets), once: the status it is answered, whether the
   service closed the connection, and after how many seconds (at most ``--hold-s``):
   ``slow-headers`` (slowloris: a header byte every second, never finished), ``idle`` (a
   connection that sends nothing), ``slow-body`` (headers whole, then a body byte every
   0.5 s), ``long-content-length`` (a Content-Length 100 bytes over the body sent, then
   idle), ``short-content-length`` (a Content-Length 10 bytes under the body sent),
   ``big-header`` (one 100 KB header), ``many-headers`` (5,000 small ones), ``huge-header``
   (one 8 MB header).
2. Levels: ``--clients`` valid clients (``serve_load.KeepAlive``, one keep-alive connection
   each, msmarco-sample's queries, k = 10) for ``--seconds``, with N slowloris connections
   held open (a header byte each every second; one cut is reopened), then with N slow-body
   clients (each reconnects as soon as it is cut, so N requests are always mid-body). A
   level's row: the valid clients' QPS, p50 / p95 / p99 and failed requests (not 200, or
   degraded), and how many bad connections the service cut meanwhile. Valid and bad
   clients run on the same cores as the service.

3. ``--mixed ROUNDS``: one valid client alone for ``--seconds``, then beside one bad client of
   each kind at once (``mixed_kinds``), ROUNDS times: p95 beside against 2 x p95 alone
   + 100 ms (the bound the suite's test once asserted; a measurement needs a quiet machine).

Prints markdown tables and writes them as JSON (``--json``). CPU steal over the run is
printed: on a shared VM it moves every figure."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal
from serve_load import load_level

# What a bad client sends: (bytes, seconds to wait before sending them), in order.
Schedule = Iterable[tuple[bytes, float]]

STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


@dataclass
class Outcome:
    """How the service treated one bad connection."""

    kind: str
    statuses: list[int] = field(default_factory=list)  # the HTTP statuses it was answered, in order
    closed: bool = False  # the service closed the connection (else the client gave up or was stopped)
    seconds: float = 0.0  # from the connection to its close (or to giving up)
    sent: int = 0  # bytes the client got to send
    text: str = ""  # what the service sent back (its first 2,000 bytes, Latin-1)

    def line(self) -> str:
        how = f"closed after {self.seconds:.2f} s" if self.closed else f"still open after {self.seconds:.2f} s"
        return f"{self.kind}: {'/'.join(map(str, self.statuses)) or 'no answer'}, {how} ({self.sent} bytes sent)"


async def exchange(address: tuple[str, int], kind: str, schedule: Schedule, limit_s: float, stop: Optional[asyncio.Event] = None) -> Outcome:
    """Connect to ``address`` and send ``schedule`` (each part after its wait, reading the
    service's answers meanwhile), then read until the service closes the connection, at most
    ``limit_s`` seconds after connecting (or until ``stop`` is set)."""
    out = Outcome(kind)
    received = bytearray()
    t0 = time.monotonic()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), limit_s)

    async def read() -> None:  # done when the service has closed the connection
        try:
            while chunk := await reader.read(65536):
                received.extend(chunk)
        except OSError:  # reset
            pass

    reading = asyncio.ensure_future(read())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None

    async def closed_within(seconds: float) -> bool:
        """Wait ``seconds`` at most; True once the service has closed the connection (False
        when the time is up or the client is stopped)."""
        waiters = [reading] + ([stopping] if stopping is not None else [])
        await asyncio.wait(waiters, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
        return reading.done()

    def left() -> float:
        return limit_s - (time.monotonic() - t0)

    try:
        for data, wait in schedule:
            if wait > left() or (stop is not None and stop.is_set()) or await closed_within(wait):
                break
            if stop is not None and stop.is_set():
                break
            try:
                writer.write(data)
                await writer.drain()
            except OSError:  # the service closed it while we wrote: read its answer, if any
                await closed_within(min(0.5, left()))
                break
            out.sent += len(data)
        while not reading.done() and left() > 0 and not (stop is not None and stop.is_set()):
            await closed_within(left())
    finally:
        out.closed = reading.done()
        out.seconds = time.monotonic() - t0
        for task in (reading, stopping):
            if task is not None:
                task.cancel()
        writer.close()
    out.statuses = [int(s) for s in STATUS_LINE.findall(bytes(received))]
    out.text = bytes(received[:2000]).decode("latin-1")
    return out


def request(body: bytes, content_length: Optional[int] = None, headers: bytes = b"") -> tuple[bytes, bytes]:
    """(head, body) of a ``POST /search`` with ``body`` (``Connection: close``: the service
    closes the connection once it has answered)."""
    length = len(body) if content_length is None else content_length
    head = (
        b"POST /search HTTP/1.1\r\nHost: mvr\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + b"Content-Length: %d\r\n" % length
        + headers
        + b"\r\n"
    )
    return head, body


def search_body(query: str = "what is the rba") -> bytes:
    return json.dumps({"query": query, "k": 10, "mode": "maxsim"}).encode()


def slow_headers(body: bytes, interval_s: float, trickled: Optional[int] = None) -> Schedule:
    """Slowloris: the request's head a byte every ``interval_s``; after ``trickled`` bytes,
    the rest at once (a slow but valid request), or never (None: a header that never ends)."""
    head, body = request(body)
    if trickled is not None:
        return [(head[i : i + 1], interval_s if i else 0.0) for i in range(trickled)] + [(head[trickled:] + body, interval_s)]
    start = head[: head.index(b"Content-Length")] + b"X-Slow: "
    return itertools.chain([(start, 0.0)], ((b"a", interval_s) for _ in itertools.count()))


def idle() -> Schedule:
    """A connection that sends nothing."""
    return []


def slow_body(body: bytes, interval_s: float) -> Schedule:
    """Headers whole, then the body a byte every ``interval_s``."""
    head, body = request(body)
    return [(head, 0.0)] + [(body[i : i + 1], interval_s) for i in range(len(body))]


def long_content_length(body: bytes, missing: int = 100) -> Schedule:
    """A Content-Length ``missing`` bytes over the body sent, then nothing."""
    head, body = request(body, len(body) + missing)
    return [(head + body, 0.0)]


def short_content_length(body: bytes, extra: int = 10) -> Schedule:
    """A Content-Length ``extra`` bytes under the body sent (the rest reads as a next request)."""
    head, body = request(body, len(body) - extra)
    return [(head + body, 0.0)]


def big_header(body: bytes, size: int) -> Schedule:
    """One header of ``size`` bytes."""
    head, body = request(body, headers=b"X-Big: " + b"a" * size + b"\r\n")
    return [(head + body, 0.0)]


def many_headers(body: bytes, n: int) -> Schedule:
    """``n`` small headers."""
    head, body = request(body, headers=b"".join(b"X-H%d: v\r\n" % i for i in range(n)))
    return [(head + body, 0.0)]


def kinds(body: bytes) -> dict[str, Callable[[], Schedule]]:
    """Each kind of bad client of step 1, by name."""
    return {
        "slow-headers": lambda: slow_headers(body, 1.0),
        "idle": idle,
        "slow-body": lambda: slow_body(body, 0.5),
        "long-content-length": lambda: long_content_length(body),
        "short-content-length": lambda: short_content_length(body),
        "big-header": lambda: big_header(body, 100_000),
        "many-headers": lambda: many_headers(body, 5000),
        "huge-header": lambda: big_header(body, 8 << 20),
    }


def mixed_kinds(body: bytes, trickled: int = 12) -> dict[str, Callable[[], Schedule]]:
    """One bad client of each kind at once (``--mixed``, and the suite's
    tests/test_slow_clients.py): a slow but valid request (``trickled`` header bytes 0.5 s
    apart, then the rest), a slowloris that never finishes, a slow body, a Content-Length
    over and under the body, a 100 KB header and 5,000 headers."""
    return {
        "slow-headers": lambda: slow_headers(body, 0.5, trickled),
        "slow-headers-unfinished": lambda: slow_headers(body, 0.5),
        "slow-body": lambda: slow_body(body, 0.5),
        "long-content-length": lambda: long_content_length(body),
        "short-content-length": lambda: short_content_length(body),
        "big-header": lambda: big_header(body, 100_000),
        "many-headers": lambda: many_headers(body, 5000),
    }


MIXED_P95_FACTOR, MIXED_P95_SLACK_MS = 2.0, 100.0  # --mixed: beside them, p95 <= 2 x alone + 100 ms (docs/serve.md)


def mixed(url: str, address: tuple[str, int], queries: list[str], seconds: float, repeats: int) -> list[dict]:
    """``repeats`` rounds of: one valid client alone for ``seconds`` (its baseline), then for
    ``seconds`` beside one bad client of each ``mixed_kinds`` (each connecting once). A round:
    both rows' p50 / p95 and whether p95 stayed within the bound."""
    rounds = []
    for _ in range(repeats):
        alone = level(url, queries, 1, seconds)
        holders = [Holders(address, kind, make, 1, limit_s=seconds, repeat=False) for kind, make in mixed_kinds(search_body()).items()]
        beside = level(url, queries, 1, seconds, holders, settle_s=0.0)
        bound = MIXED_P95_FACTOR * alone["p95"] + MIXED_P95_SLACK_MS
        rounds.append(
            {
                "alone": {k: alone[k] for k in ("requests", "p50", "p95")},
                "beside": {k: beside[k] for k in ("requests", "p50", "p95")},
                "failures": len(alone["failures"]) + len(beside["failures"]),
                "p95_bound_ms": bound,
                "within": beside["p95"] <= bound,
            }
        )
    return rounds


class Holders:
    """``n`` bad connections of one kind, held open by one thread (an asyncio loop: the
    load generator's own cost stays small) until ``stop()``: each, once the service cuts it,
    connects again (a client that insists), or with ``repeat=False`` runs once.
    ``outcomes``: every connection finished or stopped."""

    def __init__(self, address: tuple[str, int], kind: str, schedule: Callable[[], Schedule], n: int, limit_s: float = 3600.0, repeat: bool = True) -> None:
        self.outcomes: list[Outcome] = []
        self.errors: list[str] = []
        ready = threading.Event()

        async def hold() -> None:
            for _ in itertools.count() if repeat else range(1):
                if self._stop.is_set():
                    return
                try:
                    self.outcomes.append(await exchange(address, kind, schedule(), limit_s, self._stop))
                except OSError as e:  # refused: the service takes no more connections
                    self.errors.append(f"{type(e).__name__}: {e}"[:80])
                    await asyncio.sleep(0.1)

        async def run() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await asyncio.gather(*(hold() for _ in range(n)))

        self.thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
        self.thread.start()
        ready.wait()

    @property
    def cut(self) -> list[Outcome]:
        """The connections the service closed."""
        return [o for o in self.outcomes if o.closed]

    def stop(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._stop.set)
        except RuntimeError:  # the loop has ended: every connection ran its course (repeat=False)
            pass
        self.thread.join()


def level(url: str, queries: list[str], clients: int, seconds: float, holders: Sequence[Holders] = (), settle_s: float = 1.0) -> dict:
    """The valid clients' row (``serve_load.load_level``: QPS, p50 / p95 / p99 ms, failures)
    over ``seconds`` while ``holders`` hold their connections (started ``settle_s`` before),
    then stops them: the bad connections the service cut meanwhile (``cut``, their statuses,
    the longest held) and the connections refused (``connect_errors``)."""
    if holders:
        time.sleep(settle_s)
    try:
        row = load_level([url], queries, "maxsim", clients, seconds)
    finally:
        for h in holders:
            h.stop()
    cut = [o for h in holders for o in h.cut]
    row["cut"] = len(cut)
    row["cut_statuses"] = sorted({s for o in cut for s in o.statuses})
    row["cut_after_s"] = max((o.seconds for o in cut), default=None)
    row["connect_errors"] = sum(len(h.errors) for h in holders)
    return row


def ms(x: Optional[float]) -> str:
    return "-" if x is None or x != x else f"{x:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--index", default=None, help="an index to serve (default: msmarco-sample in --workdir)")
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--clients", type=int, default=2, help="valid clients")
    p.add_argument("--seconds", type=float, default=15.0, help="a level's length")
    p.add_argument("--slowloris", default="0,10,50,200", help="slow-header connections held open, a level each")
    p.add_argument("--slow-bodies", default="16,64", help="slow-body clients, a level each")
    p.add_argument("--hold-s", type=float, default=30.0, help="step 1: how long a bad client waits to be cut")
    p.add_argument("--body-timeout-s", type=float, default=None, help="the service's body_timeout_s (default: ServeConfig's)")
    p.add_argument(
        "--mixed",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also ROUNDS rounds of one valid client alone, then beside one bad client of each kind (p95 against the bound)",
    )
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    from mvr.pipeline.config import AnnBuildConfig, IndexConfig, ServeConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.serving.app import deploy, shutdown
    from mvr.storage.manifest import read_manifest

    datasets = Path(args.datasets)
    steal = Steal()
    index = args.index or str(Path(args.workdir) / "msmarco")
    if args.index is None and read_manifest(index) is None:
        index_corpus(str(datasets / "msmarco-sample"), index, IndexConfig(), log=lambda _: None)
        build_ann(index, AnnBuildConfig(backend="faiss-ivfpq", partitions=2), log=print)
    with open(datasets / "msmarco-sample" / "queries.jsonl") as f:
        queries = [json.loads(line)["text"] for line in f if line.strip()]
    settings = {"port": args.port, "modes": ["maxsim"]}
    if args.body_timeout_s is not None:
        settings["body_timeout_s"] = args.body_timeout_s
    config = ServeConfig.model_validate(settings)
    d = deploy(index, config, log=print)
    address = ("127.0.0.1", args.port)
    body = search_body()
    results: dict = {
        "config": {
            "body_timeout_s": config.body_timeout_s,
            "max_header_bytes": config.max_header_bytes,
            "searcher_max_ongoing_requests": config.searcher.max_ongoing_requests,
            "clients": args.clients,
            "seconds": args.seconds,
            "index": index,
        }
    }
    try:
        load_level([d.url], queries, "maxsim", 1, 2.0)  # warm up
        print(
            f"\neach kind of bad client alone (waits at most {args.hold_s:g} s to be cut; body_timeout_s {config.body_timeout_s:g}, "
            f"max_header_bytes {config.max_header_bytes}):\n"
        )
        print("| bad client | answered | connection | after (s) |\n| --- | --- | --- | --- |")
        results["kinds"] = []
        for kind, schedule in kinds(body).items():
            out = asyncio.run(exchange(address, kind, schedule(), args.hold_s))
            results["kinds"].append(asdict(out))
            print(f"| {kind} | {'/'.join(map(str, out.statuses)) or '-'} | {'closed' if out.closed else 'still open'} | {out.seconds:.2f} |")
        print(f"\nvalid clients ({args.clients}, keep-alive, /search maxsim k=10) over {args.seconds:g} s, beside N bad connections held open:\n")
        print("| bad clients | N | valid requests | QPS | p50 ms | p95 ms | p99 ms | failed | bad cut (status) |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        results["levels"] = []
        plan = [("slow-headers", int(n)) for n in args.slowloris.split(",") if n] + [("slow-body", int(n)) for n in args.slow_bodies.split(",") if n]
        for kind, n in plan:
            make = kinds(body)[kind]
            row = level(d.url, queries, args.clients, args.seconds, [Holders(address, kind, make, n)] if n else [])
            row.update(kind=kind, n=n)
            results["levels"].append({k: v for k, v in row.items() if k != "failures"} | {"failures": row["failures"][:5]})
            statuses = "/".join(map(str, row["cut_statuses"]))
            print(
                f"| {kind} | {n} | {row['requests']} | {row['qps']:.1f} | {ms(row['p50'])} | {ms(row['p95'])} | {ms(row['p99'])} | "
                f"{len(row['failures'])} | {row['cut']}{f' ({statuses})' if statuses else ''} |"
            )
            for failure in row["failures"][:3]:
                print(f"    failure: {failure}")
        if args.mixed:
            print(
                f"\none valid client alone for {args.seconds:g} s, then beside one bad client of each kind "
                f"({', '.join(mixed_kinds(body))}); bound: p95 beside <= {MIXED_P95_FACTOR:g} x alone + {MIXED_P95_SLACK_MS:g} ms:\n"
            )
            print(
                "| round | alone p50 ms | alone p95 ms | beside p50 ms | beside p95 ms | bound ms | within | failed |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
            )
            results["mixed"] = mixed(d.url, address, queries, args.seconds, args.mixed)
            for i, r in enumerate(results["mixed"], 1):
                a, b = r["alone"], r["beside"]
                print(
                    f"| {i} | {ms(a['p50'])} | {ms(a['p95'])} | {ms(b['p50'])} | {ms(b['p95'])} | {ms(r['p95_bound_ms'])} | {'yes' if r['within'] else 'no'} | {r['failures']} |"
                )
    finally:
        shutdown(config)
    results["steal_percent"] = steal.percent()
    print(f"\nCPU steal during the run: {results['steal_percent']:.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
