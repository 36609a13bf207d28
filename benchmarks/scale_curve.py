"""Search cost against corpus size: exact MaxSim, FAISS IVFPQ + rescoring and ScaNN +
rescoring, p50 latency and bytes, from 10⁴ passages up, in process.

    python benchmarks/scale_curve.py [--workdir /tmp/mvr-bench] [--sizes 10000,30000,100000]
        [--queries 20] [--rounds 3] [--backends faiss-ivfpq,scann] [--out docs/scale_curve.png] [--k-prime K[:CAP],...]
        [--partition-vectors N]

Method. The real passages are msmarco-sample's 5,000, indexed with ``mvr index``'s defaults
(the run recorded in docs/benchmarks.md used the then-default pca-64+residual-2 token codec,
18 B a token vector). The corpus of N passages adds N − 5,000
synthetic ones: each has the length of a random real passage and real token codes drawn at
random from the whole collection, half of each code's residual bytes redrawn at random (the
centroid id is kept), so the synthetic vectors spread over the real vectors' cells without
being copies. They compete for every query vector's nearest neighbours (the first stage's
work grows with N as on a real corpus) but rarely make a passage that matches a whole query,
so the exact top-10 stays mostly real and overlap@10 measures whether the ANN path finds it
in a growing haystack. Quality on real collections is measured elsewhere (search.md,
vs_plaid.md); here only latency, memory and overlap with exact.

Per size: the token codes are held as one array (as the memory-mapped shards would be), the
ANN index is built as ``mvr build-ann`` builds a partition (defaults for the size: FAISS
nlist = 4√n, nprobe = nlist/64; ScaNN leaves alike); with ``--partition-vectors`` a size
whose token vectors exceed it is split into P = ⌈vectors / N⌉ partitions of near-equal
passage counts (as ``mvr build-ann --partitions P`` splits; the runs recorded on 2026-11-26
cut near-equal vector counts instead, the same P = 4 at 10⁶), each with its own index built one after the
other (a builder's float32 copy is one partition's), searched together in this one process
(the partitions one after another: a service runs them on P replicas at once) and merged as
the service merges them. Each query (msmarco-sample's,
encoded once, k = 10, default knobs) is timed on each path in rotating order; a query's
latency is its median over the rounds (exact: one round), split into the first stage (ANN
search and candidate merge) and rescoring, with the passages rescored. "held" variants keep the probe
count at its value for the smallest size (FAISS ``nprobe``, ScaNN ``leaves_to_search``).
Bytes: the ANN index as saved (what a replica loads) and the codes (what it maps)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def synthetic_corpus(
    codes: np.ndarray, lengths: np.ndarray, n_extra: int, id_bytes: int, rng: np.random.Generator, chunk: int = 1 << 22
) -> tuple[np.ndarray, np.ndarray]:
    """(codes of the real and n_extra synthetic passages, (n + 1,) offsets): see the module
    docstring for how a synthetic passage is made. Written ``chunk`` vectors at a time into
    one array, so 10⁶ passages (80 M codes of 18 B) need no temporary larger than a chunk's."""
    lens = lengths[rng.integers(0, len(lengths), n_extra)]
    all_lengths = np.concatenate([lengths, lens]).astype(np.int64)
    offsets = np.zeros(len(all_lengths) + 1, np.int64)
    np.cumsum(all_lengths, out=offsets[1:])
    out = np.empty((int(offsets[-1]), codes.shape[1]), np.uint8)
    out[: len(codes)] = codes
    for lo in range(len(codes), len(out), chunk):
        syn = out[lo : min(lo + chunk, len(out))]
        syn[:] = codes[rng.integers(0, len(codes), len(syn))]
        residual = syn[:, id_bytes:]
        redraw = rng.random(residual.shape, dtype=np.float32) < 0.5
        residual[redraw] = rng.integers(0, 256, int(redraw.sum()), dtype=np.uint8)
    return out, offsets


def partition_bounds(offsets: np.ndarray, max_vectors: Optional[int]) -> list[tuple[int, int]]:
    """Passage ranges [lo, hi) of the partitions: one, or P = ⌈token vectors / max_vectors⌉
    split as ``mvr build-ann --partitions P`` splits an index (``storage.partitions.equal_bounds``:
    near-equal passage counts)."""
    from mvr.storage.partitions import equal_bounds

    n, total = len(offsets) - 1, int(offsets[-1])
    edges = equal_bounds(n, 1 if not max_vectors else min(n, max(1, -(-total // max_vectors))))
    return list(zip(edges[:-1], edges[1:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=str(root.parent / "shared" / "datasets"))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--sizes", default="10000,30000,100000")
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="faiss-ivfpq,scann")
    p.add_argument("--out", default=None, help="PNG of p50 and bytes against passages")
    p.add_argument(
        "--k-prime",
        default=None,
        help="first-stage k' of the ANN paths, K or K:CAP (CAP: passages rescored at most), comma-separated for several on the same indexes (default: FirstStage's)",
    )
    p.add_argument(
        "--partition-vectors", type=int, default=None, help="split a size into partitions of at most this many token vectors (default: one partition)"
    )
    args = p.parse_args()

    from mvr.operators.ann.base import set_build_threads
    from mvr.operators.ann.factory import make_index
    from mvr.operators.retrieval.candidates import FirstStage
    from mvr.operators.retrieval.partition import Partition
    from mvr.operators.retrieval.stored_vectors import StoredVectors
    from mvr.pipeline.config import IndexConfig, SearchConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.retrieval.searcher import PartitionSearch, Searcher
    from mvr.storage.manifest import read_manifest

    steal = Steal()
    datasets = Path(args.datasets)
    index = str(Path(args.workdir) / "msmarco")
    if read_manifest(index) is None:
        index_corpus(str(datasets / "msmarco-sample"), index, IndexConfig(), log=lambda _: None)
    searcher = Searcher(index, ("maxsim",), SearchConfig(exact=True))
    (real,) = searcher.partitions["maxsim"]
    sv = real.vectors
    codec = sv.codec
    id_bytes = next(s.id_bytes for s in codec.stages() if hasattr(s, "id_bytes"))
    codes = np.ascontiguousarray(sv.raw(np.arange(sv.n_vectors)))
    lengths = np.diff(sv.offsets)
    with open(datasets / "msmarco-sample" / "queries.jsonl") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()][: args.queries]
    queries = searcher.encode(texts)
    set_build_threads(2)
    backends = args.backends.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    default = FirstStage()
    budgets = (
        [(int(k.split(":")[0]), int(k.split(":")[1]) if ":" in k else default.candidate_cap) for k in args.k_prime.split(",")]
        if args.k_prime
        else [(default.k_prime, default.candidate_cap)]
    )
    print(f"k' (and rescoring cap) of the ANN paths: {', '.join(f'{k} ({cap})' for k, cap in budgets)}")
    print(f"real: {len(lengths):,} passages, {len(codes):,} token vectors of {codes.shape[1]} B ({codec.name}); {len(queries)} queries; sizes {sizes}")
    rows = []
    held: dict[str, dict] = {}
    for n in sizes:
        rng = np.random.default_rng(n)
        all_codes, offsets = synthetic_corpus(codes, lengths, max(0, n - len(lengths)), id_bytes, rng)
        vectors = StoredVectors([all_codes], offsets, codec)
        doc_ids = list(real.doc_ids) + [f"synthetic-{i}" for i in range(n - len(lengths))]
        passage_idx = np.zeros(n, np.int32)
        exact = Partition("tokens", vectors, doc_ids, passage_idx)
        bounds = partition_bounds(offsets, args.partition_vectors)
        paths = {}
        for backend in backends:
            parts, ann_bytes, build_s, knobs = [], 0, 0.0, []
            for lo, hi in bounds:  # one partition's index built, saved and measured at a time
                t0 = time.perf_counter()
                own = StoredVectors([all_codes[offsets[lo] : offsets[hi]]], offsets[lo : hi + 1] - offsets[lo], codec)
                ann = make_index(backend, own.dim, own.n_vectors)
                sample = np.sort(
                    np.random.default_rng(0).choice(own.n_vectors, min(ann.params.get("training_sample_size", own.n_vectors), own.n_vectors), replace=False)
                )
                ann.train(own.decode(sample))
                for block in own.vector_blocks(1 << 18):
                    ann.add(block)
                ann.finalize()
                build_s += time.perf_counter() - t0
                with tempfile.TemporaryDirectory() as d:
                    ann.save(d)
                    ann_bytes += dir_bytes(Path(d))
                knob = "nprobe" if backend == "faiss-ivfpq" else "leaves_to_search"
                knobs.append(ann.params[knob])
                parts.append(Partition("tokens", own, doc_ids[lo:hi], passage_idx[lo:hi], ann))
            held.setdefault(backend, {knob: knobs[0]})
            shown = f"{knob} {'/'.join(map(str, sorted(set(knobs))))}"
            for k_prime, cap in budgets:  # the same indexes searched with each k'
                name = backend if len(budgets) == 1 else f"{backend} k'{k_prime}" + ("" if cap == default.candidate_cap else f" cap {cap}")
                paths[name] = (PartitionSearch(parts), FirstStage(k_prime=k_prime, candidate_cap=cap), ann_bytes, build_s, shown)
                if set(knobs) != {held[backend][knob]}:
                    paths[f"{name} held"] = (
                        PartitionSearch(parts),
                        FirstStage(k_prime=k_prime, candidate_cap=cap, ann=dict(held[backend])),
                        ann_bytes,
                        build_s,
                        f"{knob} {held[backend][knob]}",
                    )
        # exact once a query (it is the slow one), then the ANN paths in rotating order
        exact_ms, exact_top = [], []
        for q in queries:
            t0 = time.perf_counter()
            r = exact.rank("maxsim", q, None, 10)
            exact_ms.append((time.perf_counter() - t0) * 1e3)
            exact_top.append(set(r.ranked.doc_ids))
        times: dict[str, list[list[float]]] = {name: [[] for _ in queries] for name in paths}
        stages: dict[str, dict[str, list[float]]] = {name: {"candidates": [], "rescore": [], "rescored": []} for name in paths}
        overlap: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for rnd in range(args.rounds):
            for qi, q in enumerate(queries):
                for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
                    search, fs, *_ = paths[name]
                    t0 = time.perf_counter()
                    result = search.search(q, 10, "maxsim", first_stage=fs)
                    times[name][qi].append((time.perf_counter() - t0) * 1e3)
                    for stage in ("candidates", "rescore"):
                        stages[name][stage].append(result.timings_ms[stage])
                    stages[name]["rescored"].append(result.candidates)
                    if rnd == 0:
                        overlap[name].append(len(set(result.ranked.doc_ids) & exact_top[qi]) / 10)
        code_bytes = all_codes.nbytes + offsets.nbytes
        rows.append(
            {
                "passages": n,
                "path": "exact",
                "partitions": 1,
                "p50_ms": statistics.median(exact_ms),
                "overlap": 1.0,
                "ann_bytes": 0,
                "code_bytes": code_bytes,
                "build_s": 0.0,
                "probe": "-",
                "candidates": 0.0,
                "rescore": statistics.median(exact_ms),
                "rescored": n,
            }
        )
        for name, (search, _fs, ann_bytes, build_s, probe) in paths.items():
            p50 = statistics.median(statistics.median(t) for t in times[name])
            split = {stage: statistics.median(v) for stage, v in stages[name].items()}
            rows.append(
                {
                    "passages": n,
                    "path": name,
                    "partitions": len(search.hosts),
                    "p50_ms": p50,
                    "overlap": float(np.mean(overlap[name])),
                    "ann_bytes": ann_bytes,
                    "code_bytes": code_bytes,
                    "build_s": build_s,
                    "probe": probe,
                    **split,
                }
            )
        print(f"\n{n:,} passages, {vectors.n_vectors:,} token vectors")
        print(
            f"  {'path':<28} {'p50 ms':>9} {'first st.':>9} {'rescore':>8} {'rescored':>8} {'overlap@10':>10} {'ANN MB':>8} {'codes MB':>9} {'build s':>8} {'P':>3}  probe"
        )
        for r in rows:
            if r["passages"] == n:
                print(
                    f"  {r['path']:<28} {r['p50_ms']:>9.2f} {r['candidates']:>9.2f} {r['rescore']:>8.2f} {r['rescored']:>8.0f} {r['overlap']:>10.3f} "
                    f"{r['ann_bytes'] / 1e6:>8.1f} {r['code_bytes'] / 1e6:>9.1f} {r['build_s']:>8.1f} {r['partitions']:>3}  {r['probe']}"
                )
        del paths, parts, exact, vectors, all_codes
    print("\ngrowth of p50 from the smallest to the largest size:")
    for name in dict.fromkeys(r["path"] for r in rows):
        got = [r for r in rows if r["path"] == name]
        if name.endswith(" held"):  # at the smallest size the held probe count is the default's
            got = [r for r in rows if r["path"] == name.removesuffix(" held")][:1] + got
        if len(got) > 1:
            print(f"  {name:<28} {got[-1]['p50_ms'] / got[0]['p50_ms']:6.2f}x over {got[-1]['passages'] / got[0]['passages']:g}x the passages")
    print(f"\nCPU steal during the run: {steal.percent():.1f}%")
    if args.out:
        plot(rows, args.out)
        print(f"plot: {args.out}")


def plot(rows: list[dict], out: str) -> None:
    """p50 latency (log-log) and bytes the index holds against passages, one line a path."""
    from mvr.pipeline.plots import png_bytes, pyplot

    plt = pyplot()
    fig, (lat, mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    indexes = set()  # backends whose bytes are plotted: the k' variants of one share its index
    for name in dict.fromkeys(r["path"] for r in rows):
        got = [r for r in rows if r["path"] == name]
        if name.endswith(" held"):
            got = [r for r in rows if r["path"] == name.removesuffix(" held")][:1] + got
        x = [r["passages"] for r in got]
        lat.plot(x, [r["p50_ms"] for r in got], marker="o", label=name)
        backend = name.split(" ")[0]
        if name != "exact" and backend not in indexes:
            indexes.add(backend)
            mem.plot(x, [(r["ann_bytes"] + r["code_bytes"]) / 1e6 for r in got], marker="o", label=f"{backend} index + codes")
    exact = [r for r in rows if r["path"] == "exact"]
    mem.plot([r["passages"] for r in exact], [r["code_bytes"] / 1e6 for r in exact], marker="o", label="codes (exact)")
    lat.set(xscale="log", yscale="log", xlabel="passages", ylabel="p50 ms a query (search, k = 10)", title="latency")
    mem.set(xscale="log", yscale="log", xlabel="passages", ylabel="MB", title="bytes of the index (all partitions)")
    lat.legend(fontsize=8)
    mem.legend(fontsize=8)
    fig.tight_layout()
    with open(out, "wb") as f:
        f.write(png_bytes(fig))


if __name__ == "__main__":
    main()
