"""Serve load: the search service (``mvr serve``) against the in-process search core on the
same index and queries, then N concurrent HTTP clients on loopback.

    python benchmarks/serve_load.py [--workdir /tmp/mvr-bench] [--partitions 2] [--mode maxsim]
        [--clients 1,2,4,8] [--seconds 15] [--rounds 3] [--placement ingress|deployment]
        [--one-trip-max-partitions 8] [--searcher-replicas 1] [--encoder-threads T]
        [--partition-placement deployment|ingress] [--batch-queries 1] [--direct-ingress]

Index: msmarco-sample with ``mvr index`` defaults and FAISS IVFPQ partitions of every kind
(``mvr build-ann`` defaults, P = --partitions), reused when the workdir holds them (the
index as ``benchmarks/search_latency.py`` left it, its ANN builds replaced). Queries:
msmarco-sample's 50, k = 10, default search knobs.

1. One client: each round sends every query in process (``Searcher.answer``:
   encode, search, titles and text from the catalog, the same body the service returns) and
   every query over HTTP, as two blocks whose order alternates by round, so drifting machine
   load hits both alike. A query's latency is its median over the rounds; the ratio is Serve
   p50 / in-process p50. The answers' own stage timings (encode, candidates, rescore) are
   printed for both, and the HTTP floor: a request the ingress refuses at validation (422),
   which is Serve's proxy, FastAPI and loopback HTTP with no search.
2. Load: for each client count, that many threads each send the queries round-robin over
   their own keep-alive HTTP connection (``KeepAlive``: ``http.client``, the cheapest client
   on the service's own cores; its CPU a query is printed as ``client ms``) for --seconds (bounded: at most 64 clients, 120 s a level);
   QPS, p50 and p99 over every request of the level (``--batch-queries N``: each request a
   ``/search/batch`` of N queries, counted as N requests taking its time). Every answer must
   be complete (status 200, not degraded); failures are counted and printed. Each level first runs the
   in-process baseline on the same cores: as many threads sharing the one Searcher (and its
   query encoder), each answering the same queries with the same body (``local_level``;
   the service's replicas stay deployed and idle meanwhile), then the in-process path with the
   service's batching (``batched_level``: the level's queries answered as batches, one
   forward pass each, by min(2, clients) threads; the service's encoder batches concurrent
   queries the same way). The last line divides the best level's QPS of the service by the
   best in-process level's (threads or batched).

``--direct-ingress``: the service runs with ``direct_ingress`` (each ingress replica answers on its
own port, no proxy hop) and the clients ask the replicas' ports, spread as a load balancer
would (client c: replica c mod R); the one-client figures use the first replica.

CPU steal over the run is printed: on a shared VM it moves every figure."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def run_clients(ask, clients: int, seconds: float) -> dict:
    """``clients`` threads, each calling ``ask(client, i)`` (its i-th query; a falsy result is
    success, a string a failure) until ``seconds`` have passed: QPS, p50 / p95 / p99 ms, failures."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(c: int) -> None:
        i = c * 7
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                failure = ask(c, i)
            except Exception as e:
                failure = f"{type(e).__name__}: {e}"[:80]
            ms = (time.perf_counter() - t0) * 1e3
            with lock:
                if failure:
                    failures.append(failure)
                else:
                    latencies.append(ms)
            i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "requests": len(latencies),
        "failures": failures,
        "qps": len(latencies) / wall,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "p99": percentile(latencies, 99),
    }


def per_query(row: dict, batch: int) -> dict:
    """A level's row whose requests each carried ``batch`` queries, counted a query a request."""
    return {**row, "requests": row["requests"] * batch, "qps": row["qps"] * batch}


def attempt(work) -> Optional[str]:
    """``work()``: None, or the exception it raised as a short failure line."""
    try:
        work()
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:80]
    return None


class KeepAlive:
    """A load-generating HTTP client: one keep-alive connection (``http.client``), JSON in and
    out. It runs on the same cores as the service, so it should cost as little as a client
    can: 0.2–0.3 core-ms a request against 0.7–1.1 for ``requests``
    (``benchmarks/serve_floor.py`` prints both)."""

    def __init__(self, url: str) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, body: dict) -> tuple[int, bytes]:
        """(status, response bytes) of ``POST path`` with ``body`` as JSON."""
        import http.client
        import json

        data = json.dumps(body).encode()
        for retry in (False, True):
            try:
                self.connection.request("POST", path, data, {"Content-Type": "application/json"})
                response = self.connection.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                if retry:
                    raise
                self.connection.close()  # the server closed a kept-alive connection: once more on a new one
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        raise AssertionError("unreachable")


def client_cpu_ms() -> float:
    """This process's CPU time so far, ms (user + system)."""
    import resource

    u = resource.getrusage(resource.RUSAGE_SELF)
    return (u.ru_utime + u.ru_stime) * 1e3


def load_level(urls: list[str], queries: list[str], mode: str, clients: int, seconds: float, batch: int = 1) -> dict:
    """``clients`` HTTP clients (``KeepAlive``), each on its own connection, for ``seconds``:
    every answer must be complete (status 200, not degraded). ``batch`` > 1: each request is a
    ``/search/batch`` of that many queries, each counted as a request taking its time.
    ``urls``: the service's (the proxy), or its replicas' (direct ingress), client c asking
    ``urls[c % len(urls)]`` as a load balancer spreading connections would. The row's
    ``client_ms``: the load generator's own CPU a request (ms), spent on the same cores."""
    import json

    connections = [KeepAlive(urls[c % len(urls)]) for c in range(clients)]

    def ask(c: int, i: int) -> Optional[str]:
        if batch == 1:
            status, data = connections[c].post("/search", {"query": queries[i % len(queries)], "k": 10, "mode": mode})
            ok = status == 200 and not json.loads(data)["degraded"]
        else:
            texts = [queries[(i * batch + j) % len(queries)] for j in range(batch)]
            status, data = connections[c].post("/search/batch", {"queries": texts, "k": 10, "mode": mode})
            ok = status == 200 and not any(b["degraded"] for b in json.loads(data)["responses"])
        return None if ok else f"{status} {data[:80].decode(errors='replace')}"

    cpu0 = client_cpu_ms()
    row = per_query(run_clients(ask, clients, seconds), batch)
    row["client_ms"] = (client_cpu_ms() - cpu0) / max(1, row["requests"])  # a query
    for c in connections:
        c.connection.close()
    return row


def local_level(searcher, index: str, queries: list[str], mode: str, clients: int, seconds: float) -> dict:
    """The in-process baseline of ``load_level``: ``clients`` threads sharing one Searcher
    (its partitions and query encoder; numpy, torch and FAISS release the GIL), each with its
    own catalog connection, answering queries (``Searcher.answer``: the same body
    as the service) for ``seconds``."""
    from mvr.storage.catalog import Catalog

    catalogs = [Catalog(index) for _ in range(clients)]

    def ask(c: int, i: int) -> Optional[str]:
        return attempt(lambda: searcher.answer(queries[i % len(queries)], 10, mode, catalog=catalogs[c]))

    try:
        return run_clients(ask, clients, seconds)
    finally:
        for c in catalogs:
            c.close()


def batched_level(searcher, index: str, queries: list[str], mode: str, clients: int, seconds: float, max_batch: int) -> dict:
    """The in-process baseline with the service's batching: ``clients`` queries at once
    answered by min(2, clients) threads (the cores; torch's threads split between them), each
    answering batches of clients / threads queries (at most ``max_batch``, the encoder's
    ``max_batch_size``): one forward pass (``Searcher.encode``), ``search_encoded_batch`` and
    the same bodies; each query of a batch counts as a request taking the batch's time."""
    import torch

    from mvr.pipeline.retrieval.local_search import response_body
    from mvr.storage.catalog import Catalog

    threads = min(2, clients)
    batch = max(1, min(max_batch, clients // threads))
    catalogs = [Catalog(index) for _ in range(threads)]
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, torch_threads // threads))  # the threads split the cores, not oversubscribe them
    version = searcher.manifest.version

    def ask(c: int, i: int) -> Optional[str]:
        texts = [queries[(i * batch + j) % len(queries)] for j in range(batch)]
        return attempt(lambda: [response_body(r, catalogs[c], version) for r in searcher.search_encoded_batch(searcher.encode(texts), 10, mode)])

    try:
        return per_query(run_clients(ask, threads, seconds), batch)
    finally:
        torch.set_num_threads(torch_threads)
        for c in catalogs:
            c.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--mode", default="maxsim")
    p.add_argument("--clients", default="1,2,4,8")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--placement", default="ingress", choices=("ingress", "deployment"), help="where the query encoder runs (encoder.placement)")
    p.add_argument("--partition-placement", default="deployment", choices=("deployment", "ingress"), help="where the partitions run (partition.placement)")
    p.add_argument("--batch-queries", type=int, default=1, help="queries a load request carries (> 1: POST /search/batch)")
    p.add_argument("--one-trip-max-partitions", type=int, default=8, help="one_trip_max_partitions (0: two trips to the partitions)")
    p.add_argument("--searcher-replicas", type=int, default=1, help="ingress (Searcher) replicas: searcher.replicas")
    p.add_argument("--encoder-threads", type=int, default=None, help="torch threads of each encoder (encoder.threads; default: a node's cores)")
    p.add_argument("--direct-ingress", action="store_true", help="direct_ingress: the clients ask the ingress replicas' own ports (no proxy hop)")
    args = p.parse_args()
    levels = [min(64, int(c)) for c in args.clients.split(",")]
    seconds = min(args.seconds, 120.0)

    import json

    from mvr.pipeline.config import AnnBuildConfig, IndexConfig, ServeConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.pipeline.serving.app import DIRECT_INGRESS_ENV, deploy, shutdown
    from mvr.pipeline.serving.client import SearchClient
    from mvr.storage.catalog import Catalog
    from mvr.storage.manifest import load_manifest, read_manifest

    datasets = Path(args.datasets)
    index = str(Path(args.workdir) / "msmarco")
    steal = Steal()
    if args.direct_ingress:  # the Ray that a first build starts must have it (start_serve sets it only when it starts Ray)
        os.environ.setdefault(DIRECT_INGRESS_ENV, "1")
    if read_manifest(index) is None:
        index_corpus(str(datasets / "msmarco-sample"), index, IndexConfig(), log=lambda _: None)
    ann = load_manifest(index).ann
    if not all(
        len(ann.get(k, {}).get("partitions", [])) == args.partitions and ann[k]["backend"] == "faiss-ivfpq"
        for k in ("tokens", "centroids", "first-m", "pooled")
    ):
        build_ann(index, AnnBuildConfig(backend="faiss-ivfpq", partitions=args.partitions), log=print)
    with open(datasets / "msmarco-sample" / "queries.jsonl") as f:
        queries = [json.loads(line)["text"] for line in f if line.strip()]

    config = ServeConfig.model_validate(
        {
            "port": args.port,
            "encoder": {"placement": args.placement, "threads": args.encoder_threads},
            "partition": {"placement": args.partition_placement},
            "searcher": {**ServeConfig().searcher.model_dump(), "replicas": args.searcher_replicas},
            "one_trip_max_partitions": args.one_trip_max_partitions,
            "direct_ingress": args.direct_ingress,
        }
    )
    d = deploy(index, config, log=print)
    r = d.resources
    print(
        f"service: P={len(d.layout.shards)}; encoder ({args.placement}) {r.encoder.num_cpus:g} CPU x {r.encoder.threads} threads, "
        + (
            f"partitions (deployment) {r.partition.num_cpus:g} CPU x {r.partition.threads} thread(s), "
            if d.index_app
            else "partitions (ingress, called in place), "
        )
        + f"ingress {r.searcher.replicas} x {r.searcher.num_cpus:g} CPU"
        + (f"; one trip to the partitions up to P={args.one_trip_max_partitions}" if d.index_app else "")
        + (f"; direct ingress: {', '.join(d.direct_urls)}" if d.direct_urls else "; through Serve's proxy")
    )
    urls = list(d.direct_urls) or [d.url]
    searcher = Searcher(index, modes=(args.mode,))
    catalog = Catalog(index)
    client = SearchClient(urls[0])
    try:
        for q in queries[:5]:  # warm both paths
            searcher.answer(q, 10, args.mode, catalog=catalog)
            client.search(q, 10, args.mode)
        local: dict[int, list[float]] = {i: [] for i in range(len(queries))}
        served: dict[int, list[float]] = {i: [] for i in range(len(queries))}
        stages: dict[str, dict[str, list[float]]] = {"in-process": {}, "Serve HTTP": {}}  # the answers' own timings_ms
        for rnd in range(args.rounds):
            # whole blocks, alternating which goes first: per-query alternation would let one
            # path's spinning OpenMP / torch threads slow the other's next query
            for which in (0, 1) if rnd % 2 == 0 else (1, 0):
                for i, q in enumerate(queries):
                    t0 = time.perf_counter()
                    if which == 0:
                        body = searcher.answer(q, 10, args.mode, catalog=catalog)
                        local[i].append((time.perf_counter() - t0) * 1e3)
                    else:
                        body = client.search(q, 10, args.mode)
                        assert not body["degraded"], body
                        served[i].append((time.perf_counter() - t0) * 1e3)
                    for stage, ms in body["timings_ms"].items():
                        stages["in-process" if which == 0 else "Serve HTTP"].setdefault(stage, []).append(ms)
        lp = [statistics.median(v) for v in local.values()]
        sp = [statistics.median(v) for v in served.values()]
        print(f"\none client, {args.mode}, k=10, {len(queries)} queries x {args.rounds} rounds (median per query):")
        print(f"  in-process p50 {percentile(lp, 50):6.1f} ms  p99 {percentile(lp, 99):6.1f} ms")
        print(f"  Serve HTTP p50 {percentile(sp, 50):6.1f} ms  p99 {percentile(sp, 99):6.1f} ms")
        print(f"  Serve / in-process p50: {percentile(sp, 50) / percentile(lp, 50):.2f}x")
        floor = []
        for _ in range(100):  # HTTP in and out, the proxy and FastAPI: a request refused at validation
            t0 = time.perf_counter()
            assert client.session.post(urls[0] + "/search", json={"query": ""}, timeout=60).status_code == 422
            floor.append((time.perf_counter() - t0) * 1e3)
        print(f"  Serve HTTP floor (a request refused at validation, 422) p50 {percentile(floor, 50):.1f} ms")
        names = ("encode", "candidates", "rescore", "total")
        print("  stage medians (ms, the answers' timings_ms; Serve's measured in the ingress, each hop included):")
        print("  " + " " * 12 + "".join(f"{n:>11}" for n in names))
        for path, got in stages.items():
            print(f"  {path:<12}" + "".join(f"{statistics.median(got.get(n, [float('nan')])):>11.2f}" for n in names))
        print(
            f"\nload ({seconds:g} s a level, {args.mode}, k=10; in process: threads sharing one Searcher, and batched: "
            f"min(2, clients) threads answering batches of clients / threads queries, the same cores; "
            f"Serve: {'/search' if args.batch_queries == 1 else f'/search/batch of {args.batch_queries} queries'} a request):"
        )
        print(f"  {'clients':>7} {'path':>10} {'requests':>8} {'QPS':>7} {'p50 ms':>8} {'p99 ms':>8} {'failed':>6} {'client ms':>9}")
        best = {"in-process": 0.0, "Serve HTTP": 0.0}
        for c in levels:
            for path in ("in-process", "batched", "Serve HTTP"):
                if path == "in-process":
                    row = local_level(searcher, index, queries, args.mode, c, seconds)
                elif path == "batched":
                    if c == 1:
                        continue  # the same as one in-process client
                    row = batched_level(searcher, index, queries, args.mode, c, seconds, config.encoder.max_batch_size)
                else:
                    row = load_level(urls, queries, args.mode, c, seconds, args.batch_queries)
                side = "Serve HTTP" if path == "Serve HTTP" else "in-process"  # in process: threads or batched, the better
                best[side] = max(best[side], row["qps"])
                client_col = f"{row['client_ms']:>9.2f}" if "client_ms" in row else f"{'-':>9}"
                print(
                    f"  {c:>7} {path:>10} {row['requests']:>8} {row['qps']:>7.1f} {row['p50']:>8.1f} {row['p99']:>8.1f} {len(row['failures']):>6} {client_col}"
                )
                for f in row["failures"][:3]:
                    print(f"      failure: {f}")
        print(
            f"  saturation (the best level of each; in process the better of threads and batched): Serve {best['Serve HTTP']:.1f} QPS / in process {best['in-process']:.1f} QPS = {best['Serve HTTP'] / max(best['in-process'], 1e-9):.2f}x"
        )
        trips = client.stats()["one_trip"]
    finally:
        client.close()
        catalog.close()
        shutdown(config)
    print(f"one trip: {trips['queries']} queries, {trips['asked_again']} of them asked a partition again")
    print(f"\nCPU steal during the run: {steal.percent():.1f}%")


if __name__ == "__main__":
    main()
