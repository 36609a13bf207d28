"""The residual codec's nearest-centroid search (``operators/codecs/residual._nearest``: FAISS's
exhaustive search at k = 1, ``faiss.knn``) against the numpy product a block of rows it
replaced (x·c - |c|²/2, argmax, 1,024 rows a block), on the same random vectors and the
threads the environment gives both; both must pick the same centroids.

    python benchmarks/nearest_centroid.py [--vectors 50000] [--centroids 8192] [--dim 192]
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/nearest_centroid.py   # one thread
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mvr.operators.codecs.residual import _nearest


def numpy_nearest(centroids: np.ndarray, x: np.ndarray, rows: int = 1024) -> np.ndarray:
    """(n,) argmax of x·c - |c|²/2 a block of ``rows`` rows: one BLAS product a block."""
    half_norms = 0.5 * np.einsum("ij,ij->i", centroids, centroids)
    out = np.empty(len(x), np.int64)
    for start in range(0, len(x), rows):
        scores = x[start : start + rows] @ centroids.T
        scores -= half_norms
        out[start : start + len(scores)] = scores.argmax(axis=1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=50_000)
    p.add_argument("--centroids", type=int, default=8_192)
    p.add_argument("--dim", type=int, default=192)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    centroids = rng.standard_normal((a.centroids, a.dim), dtype=np.float32)
    x = rng.standard_normal((a.vectors, a.dim), dtype=np.float32)
    t0 = time.perf_counter()
    ours = _nearest(centroids, x)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = numpy_nearest(centroids, x)
    numpy_s = time.perf_counter() - t0
    print(
        f"{a.vectors:,} vectors, {a.centroids:,} centroids of {a.dim} dims: _nearest (faiss.knn) {ours_s:.2f} s, "
        f"numpy block product {numpy_s:.2f} s ({numpy_s / ours_s:.2f}x); the same centroid for {np.mean(ours == theirs):.4f} of the vectors"
    )


if __name__ == "__main__":
    main()
