"""The residual codec's nearest-centroid search (``operators/codecs/residual._nearest``: one
BLAS product a block of rows) against FAISS's ``IndexFlatL2`` search at k = 1, which it
replaced, on the same random vectors and one thread each; both must pick the same centroids.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/nearest_centroid.py [--vectors 50000] [--centroids 8192] [--dim 192]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mvr.operators.codecs.residual import _nearest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=50_000)
    p.add_argument("--centroids", type=int, default=8_192)
    p.add_argument("--dim", type=int, default=192)
    a = p.parse_args()
    import faiss  # after mvr.operators, which names the OpenBLAS kernels FAISS's copy runs (operators/openblas.py)

    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    centroids = rng.standard_normal((a.centroids, a.dim), dtype=np.float32)
    x = rng.standard_normal((a.vectors, a.dim), dtype=np.float32)
    index = faiss.IndexFlatL2(a.dim)
    index.add(centroids)
    t0 = time.perf_counter()
    theirs = index.search(x, 1)[1][:, 0]
    faiss_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = _nearest(centroids, x)
    ours_s = time.perf_counter() - t0
    print(
        f"{a.vectors:,} vectors, {a.centroids:,} centroids of {a.dim} dims: _nearest {ours_s:.2f} s, "
        f"FAISS IndexFlatL2 {faiss_s:.2f} s ({faiss_s / ours_s:.1f}x); the same centroid for {np.mean(ours == theirs):.4f} of the vectors"
    )


if __name__ == "__main__":
    main()
