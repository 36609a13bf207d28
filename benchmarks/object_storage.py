"""Serving from object storage (issue 50): a searcher's memory and its time to first answer
with the index in a bucket, against the same index on local disk, side by side in one run.

    python benchmarks/object_storage.py [--workdir /tmp/mvr-bench] [--backend codec-ivf]

The index: msmarco-sample (5,000 passages) with ``mvr index`` defaults and a token ANN build
of ``--backend`` (P = 1; reused when the workdir already holds them), copied whole into a
bucket of moto's S3 server, which this script starts on loopback (the suite's stand-in for
S3; a real bucket adds the network's latency and bandwidth to the cold case only).

Each case runs in a fresh Python process, so that its memory is its own: ``mvr.open`` of the
index (maxsim), one query (the first answer), then the other queries one at a time. Printed per
case: seconds to open, to the first answer (open included), the p50 of the rest, and the
process's resident memory after them: ``anon`` (its own: heap, model, whatever was read into
RAM) and ``file`` (pages of mapped files that queries touched; the kernel shares and drops
them), and the bytes of the node's disk cache (``storage/local_cache.py``).

Cases: ``local`` (the index on disk), ``s3 cold`` (an empty cache: every file fetched, its
sha256 checked), ``s3 warm`` (the cache the cold case filled: no file fetched again, as a
replica restarted on the same node, or a second replica there, finds it)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r"""
import json, os, statistics, sys, time
t0 = time.perf_counter()
import mvr
queries = json.loads(sys.argv[2])
with mvr.open(sys.argv[1], modes=("maxsim",)) as s:
    opened = time.perf_counter() - t0
    s.search(queries[:1], 10, "maxsim")
    first = time.perf_counter() - t0
    rest = []
    for q in queries[1:]:
        t = time.perf_counter()
        s.search([q], 10, "maxsim")
        rest.append((time.perf_counter() - t) * 1e3)
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith("Rss"))
    kb = lambda key: int(status[key].split()[0])
    print(json.dumps({"open_s": opened, "first_s": first, "p50_ms": statistics.median(rest), "anon_mib": kb("RssAnon") / 1024, "file_mib": kb("RssFile") / 1024}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--backend", default="codec-ivf", choices=("faiss-ivfpq", "scann", "codec-ivf"))
    p.add_argument("--queries", type=int, default=50)
    args = p.parse_args()

    import fsspec
    from moto.server import ThreadedMotoServer

    import mvr
    from mvr.pipeline.config import AnnBuildConfig, IndexConfig
    from mvr.storage.beir import read_collection
    from mvr.storage.manifest import read_manifest

    index = Path(args.workdir) / "msmarco-objstore"
    if read_manifest(str(index)) is None:
        print("indexing msmarco-sample ...", flush=True)
        mvr.index(str(Path(args.datasets) / "msmarco-sample"), str(index), IndexConfig(), log=lambda _: None)
    m = read_manifest(str(index))
    assert m is not None
    if m.ann.get("tokens", {}).get("backend") != args.backend:
        print(f"building {args.backend} ...", flush=True)
        mvr.build_ann(str(index), AnnBuildConfig(backend=args.backend, partitions=1, vectors=["tokens"]), log=lambda _: None)
    queries = list(read_collection(str(Path(args.datasets) / "msmarco-sample")).queries.values())[: args.queries]

    port = free_port()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
    }
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3")})
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no line a request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    cache = Path(tempfile.mkdtemp(prefix="mvr-bench-cache-"))
    try:
        s3 = fsspec.filesystem("s3")
        s3.mkdir("bench")
        s3.put(str(index), "bench/index", recursive=True)
        cases = [("local", str(index)), ("s3 cold", "s3://bench/index"), ("s3 warm", "s3://bench/index")]
        rows = []
        for label, url in cases:
            r = subprocess.run(
                [sys.executable, "-c", CASE, url, json.dumps(queries)], env={**env, "MVR_CACHE_DIR": str(cache)}, capture_output=True, text=True, cwd=root
            )
            if r.returncode != 0:
                raise SystemExit(f"{label}: {r.stderr[-3000:]}")
            row = json.loads(r.stdout.strip().splitlines()[-1])
            row["cache_mib"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 2**20
            rows.append((label, row))
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)

    codes = sum(s.codes_bytes for s in m.shards) / 2**20
    print(f"\nmsmarco-sample, {m.counts['passages']:,} passages, token codes {codes:.1f} MiB, ANN {args.backend} P = 1; {len(queries)} queries, k = 10, maxsim")
    print(f"{'case':<10} {'open s':>7} {'first answer s':>15} {'p50 ms':>7} {'RSS anon MiB':>13} {'RSS file MiB':>13} {'cache MiB':>10}")
    for label, r in rows:
        print(
            f"{label:<10} {r['open_s']:>7.2f} {r['first_s']:>15.2f} {r['p50_ms']:>7.1f} {r['anon_mib']:>13.0f} {r['file_mib']:>13.0f} {r['cache_mib']:>10.1f}"
        )


if __name__ == "__main__":
    main()
