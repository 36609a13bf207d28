"""The hybrid's unions batched (issue 47, item 7): before and after, side by side in one run.

    python benchmarks/hybrid_batch.py [--index DIR | --workdir /tmp/mvr-bench] [--dataset ../shared/datasets/cranfield]
        [--tune-rounds 1] [--rounds 3] [--batch 32] [--queries 0] [--json hybrid_batch.json]

Both "before" and "after" run the same code: before is one query a trip (a batch of one, what
every hybrid search did before the unions were batched), after is many queries a trip.

(a) ``mvr tune-hybrid INDEX --dataset DIR --exact`` as a user runs it (a fresh process each
    time: imports, model load, the unions, the λ folds, the table; wall seconds), with
    ``--batch 1`` (before: one exact union a query) and without (after: every judged query's
    union in one trip, each block of vectors decoded once for them all), in alternating order
    over ``--tune-rounds`` rounds. Both runs' reported figures must be the same.
(b) A hybrid query in process (``Searcher``, k = 10, default fusion), on the exact path
    (``SearchConfig(exact=True)``) and, when the index has ANN partitions of the dense mode's
    vectors, on the ANN path: each query alone (``search_encoded``: p50 ms over the queries,
    each its median over ``--rounds``), and the queries in batches of ``--batch``
    (``search_encoded_batch``: p50 ms of a batch, and that over the batch size: ms a query),
    with queries/s both ways and whether the rankings are the same. Query encoding is left
    out (the same either way).

The index is ``--index`` or, by default, the dataset indexed with ``mvr index`` defaults into
``--workdir`` with BM25 (``mvr build-bm25``; reused when there). Prints markdown tables and
writes them as JSON (``--json``). Every figure is a time on this machine: run it alone (it
refuses to start while the 1-minute load average is over ``--max-load``; the load averages
and the CPU steal over the run are printed and kept in the JSON)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal

ROOT = Path(__file__).resolve().parents[1]


def mvr(*args: str) -> float:
    """Run ``mvr ARGS`` in a fresh process (output discarded unless it fails); wall seconds."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mvr.jobs.cli", *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"mvr {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def tune(index: str, dataset: str, rounds: int, tmp: Path) -> dict[str, Any]:
    """(a): ``mvr tune-hybrid --exact`` with ``--batch 1`` and without, alternating."""
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    reported: dict[str, Any] = {}
    for r in range(rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            out = tmp / f"tune-{name}-{r}.json"
            extra = ["--batch", "1"] if name == "before" else []
            seconds[name].append(mvr("tune-hybrid", index, "--dataset", dataset, "--exact", "--json", str(out), *extra))
            reported[name] = json.loads(out.read_text())["reported"]
            print(f"tune-hybrid {name}: {seconds[name][-1]:.1f} s", flush=True)
    return {
        "seconds": seconds,
        "median_s": {n: float(np.median(s)) for n, s in seconds.items()},
        "same_figures": reported["before"] == reported["after"],
        "reported": reported["after"],
    }


def latency(searcher: Any, encoded: list, rounds: int, batch: int) -> dict[str, Any]:
    """(b) on one searcher: each query alone and the queries in batches of ``batch``."""
    searcher.search_encoded_batch(encoded[: min(batch, len(encoded))], 10, "hybrid")  # warm-up
    alone = np.zeros((rounds, len(encoded)))
    batches = [encoded[i : i + batch] for i in range(0, len(encoded), batch)]
    together = np.zeros((rounds, len(batches)))
    same = True
    for r in range(rounds):
        first = []
        for i, e in enumerate(encoded):
            t0 = time.perf_counter()
            first.append(searcher.search_encoded(e, 10, "hybrid").ranked.doc_ids)
            alone[r, i] = (time.perf_counter() - t0) * 1e3
        for j, b in enumerate(batches):
            t0 = time.perf_counter()
            got = searcher.search_encoded_batch(b, 10, "hybrid")
            together[r, j] = (time.perf_counter() - t0) * 1e3
            same &= [g.ranked.doc_ids for g in got] == first[j * batch : j * batch + len(b)]
    per_query = np.median(alone, axis=0)
    per_batch = np.median(together, axis=0)
    sizes = np.array([len(b) for b in batches])
    return {
        "queries": len(encoded),
        "batch": batch,
        "alone_p50_ms": float(np.percentile(per_query, 50)),
        "alone_p95_ms": float(np.percentile(per_query, 95)),
        "alone_qps": 1e3 * len(encoded) / float(per_query.sum()),
        "batch_p50_ms": float(np.percentile(per_batch, 50)),
        "batch_ms_a_query_p50": float(np.percentile(per_batch / sizes, 50)),
        "batch_qps": 1e3 * len(encoded) / float(per_batch.sum()),
        "same_rankings": bool(same),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=str(ROOT.parent / "shared" / "datasets" / "cranfield"))
    p.add_argument("--index", help="an index with BM25 partitions (default: the dataset indexed into --workdir)")
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--tune-rounds", type=int, default=1, help="runs of tune-hybrid each way (a)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the latency queries (b)")
    p.add_argument("--batch", type=int, default=32, help="queries a batch (b)")
    p.add_argument("--queries", type=int, default=0, help="queries of (b) (0: every judged query)")
    p.add_argument("--skip-tune", action="store_true", help="(b) only")
    p.add_argument("--max-load", type=float, default=1.0, help="refuse to start while the 1-minute load average is above this")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    if args.batch < 1 or args.rounds < 1 or args.tune_rounds < 1:
        raise SystemExit("--batch, --rounds and --tune-rounds must be at least 1")
    load = os.getloadavg()
    if load[0] > args.max_load:
        raise SystemExit(f"load average {load[0]:.2f} is over --max-load {args.max_load}: every figure here is a time; run it on a quiet machine")

    from mvr.pipeline.config import SearchConfig
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.beir import read_collection
    from mvr.storage.manifest import load_manifest, read_manifest

    dataset = str(Path(args.dataset).resolve())
    index = args.index or str(Path(args.workdir) / f"{Path(dataset).name}-hybrid")
    if read_manifest(index) is None:
        print(f"indexing {dataset} into {index} ...", flush=True)
        mvr("index", dataset, index)
    if not load_manifest(index).bm25:
        mvr("build-bm25", index)
    steal = Steal()
    results: dict[str, Any] = {"index": index, "dataset": dataset, "load_average_start": [round(x, 2) for x in load]}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_tune:
            results["tune_hybrid"] = tune(index, dataset, args.tune_rounds, Path(tmp))
    texts = list(read_collection(dataset, "test").judged_queries.values())
    texts = texts[: args.queries] if args.queries else texts
    manifest = load_manifest(index)
    paths = {"exact": SearchConfig(exact=True)}
    if "tokens" in (manifest.ann or {}):
        paths["ann"] = SearchConfig()
    results["latency"] = {}
    encoder = None
    for path, config in paths.items():
        with Searcher(index, ("maxsim", "bm25", "hybrid"), config, encoder) as searcher:
            encoder = searcher.query_encoder.encoder
            encoded = searcher.encode(texts)
            results["latency"][path] = latency(searcher, encoded, args.rounds, args.batch)
            print(f"hybrid latency, {path} path: measured", flush=True)
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results["cpu_steal_percent"] = round(steal.percent(), 1)

    print(
        f"\n{Path(index).name} ({Path(dataset).name}), load average {results['load_average_start'][0]:.2f} at the start, "
        f"{results['load_average_end'][0]:.2f} at the end, CPU steal {results['cpu_steal_percent']:.0f}%\n"
    )
    if "tune_hybrid" in results:
        t = results["tune_hybrid"]
        print("| mvr tune-hybrid --exact | wall s (median) | runs | same figures |\n| --- | ---: | --- | --- |")
        for name, label in (("before", "before: --batch 1 (one union a query)"), ("after", "after: every union in one trip")):
            print(f"| {label} | {t['median_s'][name]:.1f} | {', '.join(f'{s:.1f}' for s in t['seconds'][name])} | {'yes' if t['same_figures'] else 'NO'} |")
        print(f"| speed-up | {t['median_s']['before'] / t['median_s']['after']:.2f}x | | |\n")
    print("| path | queries | one at a time: p50 ms | p95 ms | queries/s | batch of B: p50 ms | ms a query | queries/s | speed-up | same rankings |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for path, r in results["latency"].items():
        print(
            f"| {path} (B = {r['batch']}) | {r['queries']} | {r['alone_p50_ms']:.1f} | {r['alone_p95_ms']:.1f} | {r['alone_qps']:.1f} | {r['batch_p50_ms']:.1f} | "
            f"{r['batch_ms_a_query_p50']:.1f} | {r['batch_qps']:.1f} | {r['batch_qps'] / r['alone_qps']:.1f}x | {'yes' if r['same_rankings'] else 'NO'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
