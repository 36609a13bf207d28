"""The floor of Ray Serve's HTTP path on this machine: what one request costs with no search.

    python benchmarks/serve_floor.py [--clients 1,8] [--seconds 10] [--replicas 1]

A FastAPI ingress that validates a body like ``POST /search``'s and answers a body of
``/search``'s size (10 results of ~370 characters) without searching, measured through
Serve's proxy and then at the replica's own port (Serve's direct ingress, mvr's
``direct_ingress``), each in a Ray started for it, with two load generators: ``requests``
sessions and ``serve_load.KeepAlive`` (``http.client``). For each client count: QPS, p50,
and the client's own CPU a request (on the same cores). The saturated QPS bounds a
service's throughput at one query a request: 2 cores / QPS is the core-time each request
costs before any search."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BODY = {
    "results": [{"doc_id": f"d{i}", "score": 1.0, "title": "t" * 20, "text": "x" * 350} for i in range(10)],
    "mode": "maxsim",
    "path": "ann",
    "candidates": 100,
    "timings_ms": {"encode": 1.0},
    "partitions": 2,
    "partitions_answered": 2,
    "degraded": False,
    "version": 1,
}


def floor_app():
    """The Serve deployment (a FastAPI ingress answering ``BODY``), built on first use."""
    from fastapi import FastAPI
    from ray import serve

    app = FastAPI()

    @serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=64, logging_config={"enable_access_log": False, "log_level": "WARNING"})
    @serve.ingress(app)
    class Floor:
        @app.post("/search")
        async def search(self, r: FloorRequest) -> dict:
            return BODY

    return Floor


from pydantic import BaseModel  # noqa: E402


class FloorRequest(BaseModel):
    """``POST /search``'s fields (validated as the service validates them)."""

    query: str
    k: int = 10
    mode: str = "maxsim"


class RequestsClient:
    """``serve_load.KeepAlive``'s interface over a ``requests`` session (the usual Python client)."""

    def __init__(self, url: str) -> None:
        import requests

        self.url, self.session = url, requests.Session()

    def post(self, path: str, body: dict) -> tuple[int, bytes]:
        r = self.session.post(self.url + path, json=body, timeout=60)
        return r.status_code, r.content


def measure(direct: bool, clients: list[int], seconds: float, replicas: int, port: int) -> None:
    """One Ray and one Serve app; prints a row a client count."""
    import ray
    from ray import serve

    from serve_load import KeepAlive, client_cpu_ms, run_clients

    Floor = floor_app().options(num_replicas=replicas)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    serve.start(http_options={"port": port}, logging_config={"enable_access_log": False, "log_level": "WARNING"})
    serve.run(Floor.bind(), name="floor", route_prefix="/")
    if direct:
        from mvr.pipeline.config import ServeConfig
        from mvr.pipeline.serving.app import direct_urls

        urls = list(direct_urls(ServeConfig(app_name="floor", port=port), replicas))
    else:
        urls = [f"http://127.0.0.1:{port}"]
    with open(HERE.parents[1] / "shared" / "datasets" / "msmarco-sample" / "queries.jsonl") as f:
        queries = [json.loads(line)["text"] for line in f if line.strip()]
    path = "direct ingress" if direct else "Serve proxy"
    for kind in ("requests", "keep-alive"):
        connections = [(RequestsClient if kind == "requests" else KeepAlive)(urls[c % len(urls)]) for c in range(max(clients))]

        def ask(c: int, i: int, connections: list = connections):
            status, data = connections[c].post("/search", {"query": queries[i % len(queries)], "k": 10, "mode": "maxsim"})
            return None if status == 200 and not json.loads(data)["degraded"] else str(status)

        for c in clients:
            run_clients(ask, c, 2.0)  # warm
            cpu0 = client_cpu_ms()
            row = run_clients(ask, c, seconds)
            cpu = (client_cpu_ms() - cpu0) / max(1, row["requests"])
            print(f"  {path:>14} {kind:>10} {c:>7} {row['qps']:>8.1f} {row['p50']:>8.2f} {cpu:>11.2f} {len(row['failures']):>6}", flush=True)
    serve.shutdown()
    ray.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", default="1,8")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--one", choices=("proxy", "direct"), help=argparse.SUPPRESS)  # a child run
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    if args.one:
        measure(args.one == "direct", clients, args.seconds, args.replicas, args.port)
        return
    print(f"Serve's HTTP floor: an ingress answering /search's body without searching, {args.replicas} replica(s), {args.seconds:g} s a level")
    print(f"  {'path':>14} {'client':>10} {'clients':>7} {'QPS':>8} {'p50 ms':>8} {'client CPU':>11} {'failed':>6}")
    for one in ("proxy", "direct"):  # each in its own process: the setting is read when Ray starts
        env = {**os.environ, "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1" if one == "direct" else "0", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                one,
                "--clients",
                args.clients,
                "--seconds",
                str(args.seconds),
                "--replicas",
                str(args.replicas),
                "--port",
                str(args.port),
            ],
            env=env,
            check=True,
            stderr=subprocess.DEVNULL,
        )
    print("  (client CPU: ms of the load generator's own CPU a request, on the same cores)")


if __name__ == "__main__":
    main()
