"""Build-parameter measurements behind the ANN defaults (docs/ann.md, docs/search.md).

    python benchmarks/ann_build.py --index /tmp/mvr-bench/msmarco

INDEX is an mvr index of msmarco-sample with the default settings (``mvr index
../shared/datasets/msmarco-sample INDEX``; benchmarks/search_latency.py leaves one there).
Each line compares two settings on the same vectors, one thread, side by side:

1. FAISS IVFPQ PQ training with 4-dim sub-vectors (m = 96) against 8-dim ones (m = 48), FAISS's
   own PQ training settings, on 20,000 centroid vectors (dim 384, nlist 256);
2. PQ training with FAISS's defaults (256 points a code, 25 rounds) against mvr's (64, 10), on
   10,032 first-m vectors (the first 1,254 passages);
3. ScaNN tree leaves plain against spherical: the exact top-10 found within the top-100 for the
   msmarco-sample queries over the 5,000 pooled vectors, 8 of 71 leaves searched;
4. ScaNN AH with anisotropic quantization (threshold 0.2) against plain AH: build seconds for
   the token vectors of the first 1,254 passages;
5. numpy's float16 → float32 cast of a 200-passage MaxSim candidate set (why exact vectors
   are held as float32 in memory by default).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scann


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def faiss_pq(x: np.ndarray, m: int, nbits: int, points_per_code: int | None, rounds: int | None) -> float:
    import faiss  # imported by main after mvr.operators, which names the OpenBLAS kernels FAISS's copy runs (operators/openblas.py)

    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(x.shape[1]), x.shape[1], 256, m, nbits, faiss.METRIC_INNER_PRODUCT)
    if points_per_code:
        index.pq.cp.max_points_per_centroid = points_per_code
    if rounds:
        index.pq.cp.niter = rounds
    return _seconds(lambda: index.train(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", default="/tmp/mvr-bench/msmarco")
    p.add_argument("--dataset", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets" / "msmarco-sample"))
    args = p.parse_args()

    # the I001 exemption below: faiss after mvr.operators, which names the OpenBLAS kernels FAISS's copy runs (operators/openblas.py)
    from mvr.operators.ann.ivfpq import PQ_ITERATIONS, PQ_POINTS_PER_CODE  # noqa: I001
    from mvr.pipeline.retrieval.searcher import load_query_encoder
    from mvr.storage.beir import read_collection
    from mvr.storage.codec_file import load_codecs
    from mvr.storage.manifest import load_manifest
    from mvr.storage.partitions import plan_partitions, read_passages
    import faiss

    faiss.omp_set_num_threads(1)
    manifest = load_manifest(args.index)
    codecs = load_codecs(args.index, manifest.codecs)
    whole, first = plan_partitions(manifest, 1)[0], plan_partitions(manifest, 4)[0]

    def stored(plan, kind):
        return read_passages(args.index, manifest.shards, plan.slices, kind, codecs, ids=False).vectors

    def vectors(plan, kind):
        v = stored(plan, kind)
        return v.decode_range(0, v.n_vectors)

    x = vectors(whole, "centroids")[:20_000]
    a, b = faiss_pq(x, 96, 8, None, None), faiss_pq(x, 48, 8, None, None)
    print(f"1. FAISS PQ training, {len(x)} vectors: m=96 (4-dim) {a:.1f} s, m=48 (8-dim) {b:.1f} s, ratio {a / b:.1f}x")

    x = vectors(first, "first-m")
    a, b = faiss_pq(x, 48, 8, None, None), faiss_pq(x, 48, 8, PQ_POINTS_PER_CODE, PQ_ITERATIONS)
    print(f"2. PQ training, {len(x)} vectors, m=48: FAISS defaults {a:.1f} s, mvr's {b:.1f} s, ratio {a / b:.1f}x")

    x = vectors(whole, "pooled")
    encoder = load_query_encoder(manifest.config)
    q = np.stack([e.pooled for e in encoder(list(read_collection(args.dataset).queries.values()))])
    exact = np.argsort(-(q @ x.T), axis=1)[:, :10]
    found = {}
    for spherical in (False, True):
        s = scann.scann_ops_pybind.builder(x, 10, "dot_product").tree(71, 8, training_sample_size=len(x), spherical=spherical)
        s = s.score_ah(2, anisotropic_quantization_threshold=0.2, training_sample_size=len(x)).reorder(100).build()
        ids, _ = s.search_batched(q, final_num_neighbors=100, pre_reorder_num_neighbors=100, leaves_to_search=8)
        found[spherical] = np.mean([len(set(exact[i]) & set(ids[i])) / 10 for i in range(len(q))])
    print(f"3. ScaNN, {len(x)} pooled vectors, 8/71 leaves: exact top-10 within top-100 plain {found[False]:.2f}, spherical {found[True]:.2f}")

    x = vectors(first, "tokens")
    secs = {}
    for name, threshold in (("anisotropic 0.2", 0.2), ("plain", float("nan"))):
        builder = scann.scann_ops_pybind.builder(x, 10, "dot_product").tree(306, 8, training_sample_size=8192, spherical=True)
        builder = builder.score_ah(2, anisotropic_quantization_threshold=threshold, training_sample_size=8192).reorder(100)
        builder.set_n_training_threads(1)
        secs[name] = _seconds(builder.build)
    print(f"4. ScaNN build, {len(x)} token vectors: AH anisotropic {secs['anisotropic 0.2']:.1f} s, plain {secs['plain']:.1f} s")

    cand = stored(first, "tokens")
    rows = np.sort(np.random.default_rng(0).choice(len(cand.lengths), 200, replace=False))
    sub16 = cand.take(rows).vectors.astype(np.float16)  # the candidates' decoded vectors, held as float16
    cast = min(_seconds(lambda: sub16.astype(np.float32)) for _ in range(3))
    sub32 = sub16.astype(np.float32)
    qt = np.random.default_rng(1).standard_normal((32, sub32.shape[1])).astype(np.float32)
    matmul = min(_seconds(lambda: qt @ sub32.T) for _ in range(3))
    print(
        f"5. 200 candidates ({len(sub32)} token vectors): float16→float32 cast {cast * 1e3:.1f} ms "
        f"({sub32.size / cast / 1e9:.2f} G values/s), the 32-query-vector product itself {matmul * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
