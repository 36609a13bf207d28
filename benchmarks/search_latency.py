"""Search latency: exact brute-force MaxSim against FAISS IVFPQ + exact rescoring and ScaNN +
exact rescoring, side by side in one process, at two corpus sizes.

    python benchmarks/search_latency.py [--workdir /tmp/mvr-bench] [--partitions 1] [--rounds 3]

Corpora: msmarco-sample (5,000 passages) and msmarco-sample + dbpedia-sample indexed
together (10,016 passages; dbpedia ids prefixed ``dbpedia:``). Both are indexed with
``mvr index`` defaults (reused when the workdir already holds them), token-vector ANN
partitions are built with ``mvr build-ann`` defaults for each backend, and all three searchers
are held in memory at once. Queries: msmarco-sample's 50, encoded once; each round times every
query on every searcher in rotating order (k = 10, default search knobs), so drifting machine
load hits all alike. A query's latency is its median over the rounds. overlap@10 is against
the exact top-10. "search" excludes query encoding (same for all), "end-to-end" adds the median
encoding time. CPU steal over the run is printed: on a shared VM it moves every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal  # noqa: E402


def combined_corpus(datasets: Path, out: Path) -> None:
    """msmarco-sample + dbpedia-sample as one jsonl (dbpedia ids prefixed)."""
    if out.exists():
        return
    lines = []
    for name, prefix in (("msmarco-sample", ""), ("dbpedia-sample", "dbpedia:")):
        with open(datasets / name / "corpus.jsonl") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    d["_id"] = prefix + d["_id"]
                    lines.append(json.dumps(d))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--queries", type=int, default=50)
    args = p.parse_args()

    from pipeline.ann_build import build_ann
    from pipeline.config import AnnBuildConfig, IndexConfig, SearchConfig
    from pipeline.indexing import index_corpus
    from pipeline.search import Searcher
    from storage.beir import read_collection
    from storage.manifest import read_manifest

    datasets, work = Path(args.datasets), Path(args.workdir)
    combined_corpus(datasets, work / "combined" / "corpus.jsonl")
    corpora = {"msmarco 5k": str(datasets / "msmarco-sample"), "msmarco+dbpedia 10k": str(work / "combined" / "corpus.jsonl")}
    queries = list(read_collection(str(datasets / "msmarco-sample")).queries.values())[: args.queries]
    steal = Steal()
    report = []
    encoder = None
    for label, corpus in corpora.items():
        index = str(work / label.split()[0].replace("+", "-"))
        if read_manifest(index) is None:
            print(f"indexing {label} ...", flush=True)
            index_corpus(corpus, index, IndexConfig(), log=lambda _: None)
        searchers = {}
        exact = Searcher(index, ("maxsim",), SearchConfig(exact=True), encoder)
        encoder = exact.query_encoder.encoder
        searchers["exact"] = exact
        build_s = {}
        for backend in ("faiss-ivfpq", "scann"):
            t0 = time.perf_counter()
            build_ann(index, AnnBuildConfig(backend=backend, partitions=args.partitions, vectors=["tokens"]), log=lambda _: None)
            build_s[backend] = time.perf_counter() - t0
            searchers[backend] = Searcher(index, ("maxsim",), SearchConfig(), encoder)
        t0 = time.perf_counter()
        encoded = exact.encode(queries)
        encode_ms = [(time.perf_counter() - t0) * 1e3 / len(queries)]
        for q in queries[:5]:  # per-query encoding time, as a service pays it
            t0 = time.perf_counter()
            exact.encode([q])
            encode_ms.append((time.perf_counter() - t0) * 1e3)
        enc_ms = float(np.median(encode_ms[1:]))
        names = list(searchers)
        for s in searchers.values():  # warm-up
            s.search_encoded(encoded[0], 10, "maxsim")
        times = {n: np.zeros((args.rounds, len(encoded))) for n in names}
        tops = {}
        for r in range(args.rounds):
            for i, e in enumerate(encoded):
                order = names[(i + r) % len(names):] + names[: (i + r) % len(names)]
                for n in order:
                    t0 = time.perf_counter()
                    res = searchers[n].search_encoded(e, 10, "maxsim")
                    times[n][r, i] = (time.perf_counter() - t0) * 1e3
                    tops[n, i] = res.ranked.doc_ids[:10]
        per_query = {n: np.median(t, axis=0) for n, t in times.items()}
        ex = per_query["exact"]
        passages = read_manifest(index).counts["passages"]
        for n in names:
            overlap = np.mean([len(set(tops[n, i]) & set(tops["exact", i])) / 10 for i in range(len(encoded))])
            pq = per_query[n]
            report.append(
                (label, passages, n, float(np.percentile(pq, 50)), float(np.percentile(pq, 95)), float(np.median(ex / pq)),
                 float(np.percentile(ex, 50) / np.percentile(pq, 50)), float((np.percentile(ex, 50) + enc_ms) / (np.percentile(pq, 50) + enc_ms)),
                 overlap, build_s.get(n, 0.0))
            )
        print(f"{label}: query encoding p50 {enc_ms:.1f} ms", flush=True)
    print(f"\nmaxsim, k = 10, {args.partitions} partition(s), {len(queries)} queries x {args.rounds} rounds, CPU steal {steal.percent():.0f}%")
    header = f"{'corpus':<22}{'passages':>9}{'searcher':>13}{'p50 ms':>9}{'p95 ms':>9}{'speed-up':>10}{'p50/p50':>9}{'end-to-end':>11}{'overlap@10':>11}{'build s':>9}"
    print(header)
    print("-" * len(header))
    for label, passages, n, p50, p95, ratio, ratio50, e2e, overlap, b in report:
        print(f"{label:<22}{passages:>9}{n:>13}{p50:>9.1f}{p95:>9.1f}{ratio:>10.1f}{ratio50:>9.1f}{e2e:>11.1f}{overlap:>11.3f}{b:>9.0f}")
    print("speed-up: median over queries of exact ms / searcher ms; p50/p50: ratio of the p50s; end-to-end: p50s with query encoding added")


if __name__ == "__main__":
    main()
