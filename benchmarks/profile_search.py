"""Where one ANN + rescoring query's time goes: cProfile over ``Searcher.search_encoded`` (k =
10, default knobs) on an index's token-vector ANN partitions, queries encoded beforehand.

    python benchmarks/profile_search.py --index /tmp/mvr-bench/msmarco \\
        --dataset ../shared/datasets/msmarco-sample [--backend faiss-ivfpq] [--rounds 5] [--top 25] \
        [--score codes|decode|both] [--probe-check] [--idle-ms 3 --evict-mb 64]

The index's tokens must have ANN partitions of ``--backend`` (built here, P = 1, tokens only,
when the manifest holds another backend or none: this replaces the index's ANN entry for
tokens). Prints the p50 / p95 of the timed rounds (no profiler attached), then the profile
of the same rounds, by cumulative and by own time, and the share of a query spent in the
stages that matter (FAISS / ScaNN / codec-ivf search, codec-ivf's hits scored from their
codes, candidate merge, code gather, decode, matmul; a stage's time includes the stages it
calls: the decode of the hits counts in both).

``--probe-check`` (codec-ivf): how far the probe's bfloat16 product
(``operators/ann/list_probe.py``) is from float32 over every query vector of the queries, and
the least gap between each query vector's third best cell (the lists it visits) and its 16th
/ 32nd best: the margin the probe's shortlist of 32 stands on.

``--idle-ms`` / ``--evict-mb``: before each query (timed or profiled; the pause itself is
neither), sleep that long and write over a buffer of that size, so that each query starts
as on a replica between requests, or as in ``benchmarks/vs_plaid.py``'s rotation, where the
peers' queries run in between: its helper threads asleep and its centroids, codes and lists
out of the caches (the VM's L3 is 32 MB). Default: queries back to back, everything warm.

``--score``: how a residual token codec's candidates are scored. ``codes`` (mvr's default):
from the codes (``Codec.similarities``, operators/codecs/residual_scoring.py); ``decode``:
decoded into a float matrix, then one matmul, the path every other codec takes (this
process turns ``Residual.scores_codes`` off before the index loads); ``both``: the timed
rounds of each, side by side in one process, then the profile of the default."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any

import numpy as np

# (label, file suffix, function name): the functions whose cumulative time is the stage (the
# rescoring decodes through ``decode_scaled`` of a rescaling codec, ``decode`` otherwise)
STAGES = [
    ("first stage: ANN search", "operators/ann/base.py", "search"),
    ("codec-ivf hits from their codes", "operators/retrieval/partition.py", "_rescore_hits"),
    ("candidate merge", "operators/retrieval/candidates.py", "select"),
    ("code gather (StoredVectors.raw)", "operators/retrieval/stored_vectors.py", "raw"),
    ("decode (codec)", "operators/codecs/base.py", "decode"),
    ("decode (codec)", "operators/codecs/residual.py", "decode_scaled"),
    ("candidates scored from their codes", "operators/codecs/residual_scoring.py", "residual_similarities"),
    ("scoring matmul", "operators/kernels.py", "matmul"),
    ("top-k documents", "operators/retrieval/ranking.py", "top_documents"),
]


def main() -> None:
    from mvr.operators.ann.factory import BACKENDS
    from mvr.operators.codecs import Residual
    from mvr.pipeline.config import AnnBuildConfig, SearchConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.beir import read_collection
    from mvr.storage.manifest import load_manifest

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--backend", default="faiss-ivfpq", choices=BACKENDS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--score", default="codes", choices=("codes", "decode", "both"))
    p.add_argument("--probe-check", action="store_true")
    p.add_argument("--idle-ms", type=float, default=0.0, help="sleep before each query (ms)")
    p.add_argument("--evict-mb", type=int, default=0, help="MB written over before each query")
    args = p.parse_args()
    scratch = np.ones(args.evict_mb << 17) if args.evict_mb > 0 else None  # float64: 2^17 a MB

    def pause() -> None:
        """Between two queries: the caches overwritten, then the machine idle (the options)."""
        if scratch is not None:
            np.add(scratch, 1.0, out=scratch)
        if args.idle_ms > 0:
            time.sleep(args.idle_ms / 1e3)

    entry = (load_manifest(args.index).ann or {}).get("tokens") or {}
    if entry.get("backend") != args.backend:
        print(f"building {args.backend} partitions over the tokens (P = 1) ...", flush=True)
        build_ann(args.index, AnnBuildConfig(backend=args.backend, partitions=1, vectors=["tokens"], bm25=None), log=lambda _: None, force=True)
    queries = list(read_collection(args.dataset).queries.values())
    for score in ("decode", "codes") if args.score == "both" else (args.score,):
        Residual.scores_codes = score == "codes"  # read when the index's codec loads
        searcher = Searcher(args.index, ("maxsim",), SearchConfig())
        encoded = searcher.encode(queries)
        for e in encoded[:5]:  # warm-up (the kernel compiles, or loads from numba's cache)
            searcher.search_encoded(e, 10, "maxsim")
        ms = []
        for _ in range(args.rounds):
            for e in encoded:
                pause()
                t0 = time.perf_counter()
                searcher.search_encoded(e, 10, "maxsim")
                ms.append((time.perf_counter() - t0) * 1e3)
        n = len(ms)
        print(
            f"{args.backend}, maxsim, k = 10, scored from the {'codes' if score == 'codes' else 'decoded vectors'}: {len(encoded)} queries x {args.rounds} rounds; "
            f"p50 {np.percentile(ms, 50):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms (no profiler); "
            f"before each query: {args.evict_mb} MB written over, {args.idle_ms:g} ms idle",
            flush=True,
        )

    if args.probe_check:
        probe_check(searcher, encoded)
    profile = cProfile.Profile()
    for _ in range(args.rounds):
        for e in encoded:
            pause()
            profile.enable()
            searcher.search_encoded(e, 10, "maxsim")
            profile.disable()
    stats = pstats.Stats(profile)
    total = stats.total_tt
    print(f"profiled: {total / n * 1e3:.2f} ms a query (the profiler's own overhead included)")
    for label in dict.fromkeys(label for label, _, _ in STAGES):  # a stage may be one of several functions
        funcs = {(path, name) for lab, path, name in STAGES if lab == label}
        cum = sum(v[3] for (file, _, func), v in stats.stats.items() if any(file.endswith(p) and func == f for p, f in funcs))
        print(f"  {label:34s} {cum / n * 1e3:6.3f} ms a query ({cum / total:5.1%})")
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


def probe_check(searcher: Any, encoded: list[Any]) -> None:
    """The bfloat16 product's largest error over every query vector and the least margins
    of each one's third best cell over its 16th and 32nd (exact float32 ranks)."""
    from mvr.operators.ann.codec_ivf import CodecIVFIndex
    from mvr.operators.ann.list_probe import CentroidProduct

    index = next(p.ann for p in searcher.partitions["maxsim"] if isinstance(p.ann, CodecIVFIndex))
    q = np.concatenate([e.tokens for e in encoded]).astype(np.float32)
    exact = q @ index.centroids.T
    approx = CentroidProduct(index.centroids, approximate=True)(q)
    ranked = -np.sort(-exact, axis=1)
    print(
        f"probe check, {len(q)} query vectors x {index.cells} cells: bfloat16 product off by at most {np.abs(approx - exact).max():.4f}; "
        f"3rd best cell above the 16th by at least {(ranked[:, 2] - ranked[:, 15]).min():.4f}, above the 32nd by at least {(ranked[:, 2] - ranked[:, 31]).min():.4f}"
    )


if __name__ == "__main__":
    main()
