"""Search latency: exact brute-force MaxSim against FAISS IVFPQ, ScaNN and codec-ivf (lists over
the token codec's centroids), each + exact rescoring, side by side in one process, at two
corpus sizes.

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

Exact search against bare loops, in the same run (a second table, per corpus): the exact
path (``Searcher.search_encoded``, SearchConfig(exact=True): codes decoded a block at a time
into one reused buffer, one matmul a block) against two bare vectorised loops over the same
partition, each query timed on each in rotating order:

- ``bare f32 held``: the decoded float32 vectors held in memory (decoded once, outside the
  timing), per query one matmul over all of them, np.maximum.reduceat, argpartition: the
  machine's limit when a float copy is kept;
- ``bare decode``: the same, decoding every code first (``decode_range`` of the whole
  partition, the codec's own decode), per query: the fair comparison for an index that
  keeps no float copy.

The bare loops' matmul is ``operators.kernels.matmul``, the exact path's own BLAS call, so
the ratios compare the loops, not two BLAS libraries (``bare f32 numpy @`` shows numpy's
OpenBLAS for reference). ``ratio`` is bare p50 / exact p50 (≥ 1: the exact path is as fast).
Batched exact (``Searcher.search_encoded_batch``: every query scored in one pass over the
codes) is reported as queries/s against one query at a time. ``--exact-only`` measures this
table alone (no ANN builds); ``--index DIR`` (repeatable) measures existing indexes, e.g. a
float16 one, instead of indexing the two corpora:

    python benchmarks/search_latency.py --exact-only --index /tmp/exact-f16 --queries 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal


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


def exact_vs_bare(searcher, encoded, rounds: int, k: int = 10) -> dict:
    """p50 ms of the exact path and the bare loops over the same partition (rotating order,
    median over rounds a query), batched exact queries/s, and how often the bare loops'
    top-k scores are the exact path's (one passage a document here: msmarco-sample)."""
    from mvr.operators.kernels import matmul

    (part,) = searcher.partitions["maxsim"]
    v = part.vectors
    starts = v.offsets[:-1]
    held = v.decode_range(0, v.n_vectors)  # the float copy of the first bare loop

    def bare(x, q, mm=matmul):
        s = np.maximum.reduceat(mm(q, x.T), starts, axis=1).sum(axis=0)
        top = np.argpartition(-s, k)[:k]
        return np.sort(s[top])[::-1]

    contenders = {
        "exact (mvr)": lambda e: searcher.search_encoded(e, k, "maxsim").ranked.scores,
        "bare f32 held": lambda e: bare(held, e.tokens),
        "bare decode": lambda e: bare(v.decode_range(0, v.n_vectors), e.tokens),
    }
    names = list(contenders)
    for f in contenders.values():  # warm-up
        f(encoded[0])
    times = {n: np.zeros((rounds, len(encoded))) for n in names}
    agree = {n: [] for n in names}
    batch_s = []
    for r in range(rounds):
        for i, e in enumerate(encoded):
            order = names[(i + r) % len(names) :] + names[: (i + r) % len(names)]
            tops = {}
            for n in order:
                t0 = time.perf_counter()
                tops[n] = contenders[n](e)
                times[n][r, i] = (time.perf_counter() - t0) * 1e3
            for n in names:
                # the same top-k scores (a tie at the k-th place may pick either passage)
                agree[n].append(len(tops[n]) == len(tops["exact (mvr)"]) and np.allclose(tops[n], tops["exact (mvr)"], rtol=0, atol=1e-4))
        t0 = time.perf_counter()
        searcher.search_encoded_batch(encoded, k, "maxsim")
        batch_s.append(time.perf_counter() - t0)
    p50 = {n: float(np.percentile(np.median(t, axis=0), 50)) for n, t in times.items()}
    per_query_qps = 1e3 * len(encoded) / float(np.median(times["exact (mvr)"].sum(axis=1)))
    return {
        "codec": v.codec.name if v.codec is not None else "float32",
        "passages": len(part),
        "vectors": v.n_vectors,
        "dim": v.dim,
        "p50": p50,
        "same_top": {n: float(np.mean(a)) for n, a in agree.items()},
        "batch_qps": len(encoded) / float(np.median(batch_s)),
        "per_query_qps": per_query_qps,
    }


def print_exact_vs_bare(rows: list[tuple[str, dict]], queries: int, rounds: int) -> None:
    print(f"\nexact maxsim against bare loops over the same partition, k = 10, {queries} queries x {rounds} rounds")
    header = f"{'index':<22}{'codec':>20}{'vectors':>9}{'dim':>5}{'loop':>18}{'p50 ms':>9}{'ratio':>7}{'same top-10':>12}"
    print(header)
    print("-" * len(header))
    for label, r in rows:
        ex = r["p50"]["exact (mvr)"]
        for n, ms in r["p50"].items():
            print(f"{label:<22}{r['codec']:>20}{r['vectors']:>9}{r['dim']:>5}{n:>18}{ms:>9.1f}{ms / ex:>7.2f}{r['same_top'][n]:>12.2f}")
        print(
            f"{label:<22}{'':>20}{'':>9}{'':>5}{'batched exact':>18}  {r['batch_qps']:.1f} queries/s against {r['per_query_qps']:.1f} one at a time ({r['batch_qps'] / r['per_query_qps']:.1f}x)"
        )
    print(
        "ratio: the loop's p50 / the exact path's p50 (>= 1: the exact path is at least as fast); same top-10: share of queries whose top-10 scores equal the exact path's (1e-4)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--exact-only", action="store_true", help="only the exact path against bare loops (no ANN builds)")
    p.add_argument("--index", action="append", default=[], help="an existing index to measure instead of the two corpora (repeatable)")
    args = p.parse_args()

    from mvr.pipeline.config import AnnBuildConfig, IndexConfig, SearchConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.beir import read_collection
    from mvr.storage.manifest import read_manifest

    datasets, work = Path(args.datasets), Path(args.workdir)
    if not args.index:
        combined_corpus(datasets, work / "combined" / "corpus.jsonl")
    corpora = {"msmarco 5k": str(datasets / "msmarco-sample"), "msmarco+dbpedia 10k": str(work / "combined" / "corpus.jsonl")}
    indexes = {label: str(work / label.split()[0].replace("+", "-")) for label in corpora}
    if args.index:
        corpora, indexes = {}, {Path(i).name: i for i in args.index}
    queries = list(read_collection(str(datasets / "msmarco-sample")).queries.values())[: args.queries]
    steal = Steal()
    report, exact_rows = [], []
    encoder = None
    for label, index in indexes.items():
        if read_manifest(index) is None:
            print(f"indexing {label} ...", flush=True)
            index_corpus(corpora[label], index, IndexConfig(), log=lambda _: None)
        searchers = {}
        exact = Searcher(index, ("maxsim",), SearchConfig(exact=True), encoder)
        encoder = exact.query_encoder.encoder
        searchers["exact"] = exact
        exact_rows.append((label, exact_vs_bare(exact, exact.encode(queries), args.rounds)))
        print(f"{label}: exact against bare loops measured", flush=True)
        if args.exact_only:
            continue
        build_s = {}
        for backend in ("faiss-ivfpq", "scann", "codec-ivf"):
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
                order = names[(i + r) % len(names) :] + names[: (i + r) % len(names)]
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
                (
                    label,
                    passages,
                    n,
                    float(np.percentile(pq, 50)),
                    float(np.percentile(pq, 95)),
                    float(np.median(ex / pq)),
                    float(np.percentile(ex, 50) / np.percentile(pq, 50)),
                    float((np.percentile(ex, 50) + enc_ms) / (np.percentile(pq, 50) + enc_ms)),
                    overlap,
                    build_s.get(n, 0.0),
                )
            )
        print(f"{label}: query encoding p50 {enc_ms:.1f} ms", flush=True)
    print_exact_vs_bare(exact_rows, len(queries), args.rounds)
    if args.exact_only:
        print(f"CPU steal {steal.percent():.0f}%")
        return
    print(f"\nmaxsim, k = 10, {args.partitions} partition(s), {len(queries)} queries x {args.rounds} rounds, CPU steal {steal.percent():.0f}%")
    header = f"{'corpus':<22}{'passages':>9}{'searcher':>13}{'p50 ms':>9}{'p95 ms':>9}{'speed-up':>10}{'p50/p50':>9}{'end-to-end':>11}{'overlap@10':>11}{'build s':>9}"
    print(header)
    print("-" * len(header))
    for label, passages, n, p50, p95, ratio, ratio50, e2e, overlap, b in report:
        print(f"{label:<22}{passages:>9}{n:>13}{p50:>9.1f}{p95:>9.1f}{ratio:>10.1f}{ratio50:>9.1f}{e2e:>11.1f}{overlap:>11.3f}{b:>9.0f}")
    print("speed-up: median over queries of exact ms / searcher ms; p50/p50: ratio of the p50s; end-to-end: p50s with query encoding added")


if __name__ == "__main__":
    main()
