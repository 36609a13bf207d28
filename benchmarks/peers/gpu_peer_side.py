"""A peer's side of ``benchmarks/gpu_check.py``'s comparison: run in the peer's own venv
(fast-plaid: ``benchmarks/peers/plaid_venv.py``; xtr-warp-rs: ``benchmarks/peers/warp_venv.py``),
never in mvr's environment; imports nothing of mvr.

    python gpu_peer_side.py PEER WORKDIR DEVICE SETTINGS_JSON

PEER: ``fast-plaid`` or ``xtr-warp``. WORKDIR holds what mvr exported
(``benchmarks/vs_plaid.py``'s ``export``): ``docs.npy`` (every token vector of every passage,
float32, passage order), ``doc_offsets.npy``, ``queries.npy`` and ``query_offsets.npy``.
DEVICE: ``cuda`` (the GPU run) or ``cpu`` (gpu_check's dry run). SETTINGS_JSON:
{"concurrency": [1, 16], "rounds": R, "top_k": K, "threads": T}.

It builds the peer's index over the passages on DEVICE with the peer's defaults (timed), loads
it, warms up, then for each concurrency c and round searches every query in calls of c
queries (the peers' batch API: c queries in flight at once; each query's latency is its
call's), and prints one JSON line: {"peer", "versions", "device", "build_s", "concurrency":
{c: {"per_query_ms": [...], "p50_ms", "qps"}}, "top": [[[passage, score], …] a query] (the
c = 1 run's), "peak_gpu_mib": torch's peak allocation in this process (None on the CPU)}.
Latency: a query's median over the rounds; QPS: queries ÷ wall seconds, the rounds' median.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from peer_side import split  # this script's directory is first on sys.path: run as a file, in the peer's venv


def padded(queries: list[torch.Tensor]) -> torch.Tensor:
    """(c, longest, dim) float32, shorter queries padded with zero vectors (a zero vector adds
    nothing to a MaxSim score)."""
    out = torch.zeros((len(queries), max(len(q) for q in queries), queries[0].shape[1]), dtype=queries[0].dtype)
    for i, q in enumerate(queries):
        out[i, : len(q)] = q
    return out


def fast_plaid(path: Path, docs: list[torch.Tensor], device: str, threads: int) -> tuple[Callable, float, str]:
    """fast-plaid's index over ``docs`` on ``device`` (its defaults): (search(queries, k),
    build seconds, package version)."""
    from fast_plaid import search as fp_search

    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    index = fp_search.FastPlaid(index=str(path), device=device)
    index.create(documents_embeddings=docs)
    build_s = time.perf_counter() - t0

    def search(queries: list[torch.Tensor], k: int) -> list[list[tuple[int, float]]]:
        return index.search(queries_embeddings=queries, top_k=k, show_progress=False, n_processes=1)

    return search, build_s, version("fast-plaid")


def xtr_warp(path: Path, docs: list[torch.Tensor], device: str, threads: int) -> tuple[Callable, float, str]:
    """xtr-warp-rs's index over ``docs`` built and loaded on ``device`` (its defaults; search
    knobs left to its own per-query optimiser): (search(queries, k), build seconds, version)."""
    from xtr_warp import XTRWarp

    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    index = XTRWarp(index=str(path))
    index.create(embeddings_source=docs, device=device)
    index.load(device=device, dtype=torch.float32)
    build_s = time.perf_counter() - t0
    kwargs = {"num_threads": threads} if device == "cpu" else {}

    def search(queries: list[torch.Tensor], k: int) -> list[list[tuple[int, float]]]:
        return index.search(queries_embeddings=queries, top_k=k, **kwargs)

    return search, build_s, version("xtr-warp-rs")


PEERS = {"fast-plaid": fast_plaid, "xtr-warp": xtr_warp}


def main() -> None:
    peer, work, device, settings = sys.argv[1], Path(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    protocol = os.fdopen(os.dup(1), "w")  # the result line gets the real stdout; the peer's prints go to stderr
    os.dup2(2, 1)
    threads = int(settings.get("threads") or os.cpu_count() or 1)
    torch.set_num_threads(threads)
    docs = split(np.load(work / "docs.npy"), np.load(work / "doc_offsets.npy"))
    queries = split(np.load(work / "queries.npy"), np.load(work / "query_offsets.npy"))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    raw_search, build_s, peer_version = PEERS[peer](work / f"{peer}-index", docs, device, threads)
    calls = {"pad": False}

    def search(batch: list[torch.Tensor], k: int) -> list[list[tuple[int, float]]]:
        """The peer's search of a list of queries of any lengths (padded into one tensor when
        the peer takes only that)."""
        if not calls["pad"]:
            try:
                return raw_search(batch, k)
            except (TypeError, RuntimeError, ValueError):
                if len({len(q) for q in batch}) == 1:
                    raise
                calls["pad"] = True
        return raw_search(padded(batch), k)

    k = int(settings["top_k"])
    search(queries[:1], k)  # warm-up: the first search loads what it loads
    out: dict[str, Any] = {"peer": peer, "device": device, "build_s": build_s, "concurrency": {}, "padded_queries": False}
    out["versions"] = {peer: peer_version, "torch": torch.__version__, "numpy": np.__version__}
    for c in settings["concurrency"]:
        rounds = int(settings["rounds"])
        search(queries[:c], k)  # warm-up at this batch size, untimed
        ms = np.zeros((rounds, len(queries)))
        walls = []
        for r in range(rounds):
            t_round = time.perf_counter()
            for start in range(0, len(queries), c):
                t0 = time.perf_counter()
                hits = search(queries[start : start + c], k)
                if device == "cuda":
                    torch.cuda.synchronize()
                ms[r, start : start + c] = (time.perf_counter() - t0) * 1e3
                if c == 1 and r == 0:
                    out.setdefault("top", []).extend([[[int(p), float(s)] for p, s in h] for h in hits])
            walls.append(time.perf_counter() - t_round)
        per_query = np.median(ms, axis=0)
        out["concurrency"][str(c)] = {
            "per_query_ms": [round(float(v), 3) for v in per_query],
            "p50_ms": float(np.percentile(per_query, 50)),
            "qps": len(queries) / float(np.median(walls)),
        }
    out["padded_queries"] = calls["pad"]
    out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    print(json.dumps(out), file=protocol, flush=True)


if __name__ == "__main__":
    main()
