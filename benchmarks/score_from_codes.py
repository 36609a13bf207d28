"""MaxSim straight from residual-1 codes against mvr's decode-then-score (issue 49, step 4):
a study, not a search path.

    pip install numba          # not an mvr dependency: this study decides whether it becomes one
    python benchmarks/score_from_codes.py [--passages 80,300,1000] [--threads 2] [--reps 30]

Both sides score the same candidate passages for one query of 9 vectors (msmarco-sample's
mean) against a ``residual-1`` codec at 192 dimensions and 8,192 centroids (the default
token codec's shape, on synthetic unit vectors near random centroids; the timing does not
depend on the data):

- **decode-then-score**: mvr's rescoring, ``Residual.decode_scaled`` (the candidates'
  vectors built as a float matrix, with their 1 / norm) and one matmul, then the max a
  passage and the sum;
- **from the codes**: one numba kernel, parallel over passages. It takes q·c from the
  (query vectors × centroids) product that the first stage computes anyway. The residual term
  comes from per-query byte tables (24 lookups a query vector and code), and each vector's
  1 / |c + r̂| from |c|², c·r̂ and |r̂|². No float matrix of the candidates is built.

It prints each side's median milliseconds and the largest difference between their scores.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", default="80,300,1000", help="candidate passages a query (comma-separated)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numba
    import torch

    from mvr.operators.codecs.residual import Residual
    from mvr.operators.kernels import matmul

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    dim, n_centroids, n_vectors, nq = 192, 8192, 200_000, 9
    centroids = rng.standard_normal((n_centroids, dim)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    x = centroids[rng.integers(0, n_centroids, n_vectors)] + 0.08 * rng.standard_normal((n_vectors, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = Residual.fit(1, x[:65536], centroids=centroids, normalize=True)
    codes = codec.encode(x)
    norms2 = np.einsum("ij,ij->i", codec.centroids, codec.centroids).astype(np.float32)
    w0, dw = np.float32(codec.weights[0]), np.float32(codec.weights[1] - codec.weights[0])

    @numba.njit(fastmath=True, parallel=True)
    def kernel(sc, tables, norms2, cents, ids, res, offsets, w0, dw, out):
        nq, nb = tables.shape[0], tables.shape[1]
        for p in numba.prange(len(offsets) - 1):
            best = np.full(nq, -np.inf, np.float32)
            for t in range(offsets[p], offsets[p + 1]):
                c = ids[t]
                cr = np.float32(0.0)
                rr = np.float32(0.0)
                for j in range(nb):
                    byte = res[t, j]
                    for k in range(8):
                        w = w0 + dw * ((byte >> (7 - k)) & 1)
                        cr += cents[c, 8 * j + k] * w
                        rr += w * w
                s = 1.0 / np.sqrt(max(norms2[c] + 2.0 * cr + rr, 1e-24))
                for q in range(nq):
                    acc = sc[q, c]
                    for j in range(nb):
                        acc += tables[q, j, res[t, j]]
                    best[q] = max(best[q], acc * s)
            out[p] = best.sum()

    def from_codes(qv: np.ndarray, sc: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        tables = np.ascontiguousarray(np.einsum("vk,qjk->qjv", codec.table, qv.reshape(len(qv), -1, codec.per_byte)), dtype=np.float32)
        out = np.empty(len(offsets) - 1, np.float32)
        kernel(sc, tables, norms2, codec.centroids, codec.ids_of(rows), np.ascontiguousarray(rows[:, codec.id_bytes :]), offsets, w0, dw, out)
        return out

    def decode_then_score(qv: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        vectors, scale = codec.decode_scaled(rows)
        sims = matmul(qv, vectors.T) * scale[None, :]
        return np.maximum.reduceat(sims, offsets[:-1], axis=1).sum(axis=0)

    def median_ms(fn: Callable[..., object], *fn_args: object) -> float:
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn(*fn_args)
            times.append(time.perf_counter() - t0)
        return 1000 * float(np.median(times))

    print(
        f"residual-1, {dim} dims, {n_centroids} centroids, {codec.bytes_per_vector} B a vector; {nq} query vectors; {args.threads} threads; numba {numba.__version__}"
    )
    for n in (int(v) for v in args.passages.split(",")):
        offsets = np.concatenate([[0], np.cumsum(rng.integers(60, 100, n))]).astype(np.int64)
        rows = np.ascontiguousarray(codes[rng.integers(0, n_vectors, offsets[-1])])
        qv = rng.standard_normal((nq, dim)).astype(np.float32)
        qv /= np.linalg.norm(qv, axis=1, keepdims=True)
        sc = matmul(qv, np.ascontiguousarray(codec.centroids.T))  # the first stage's product
        diff = float(np.abs(decode_then_score(qv, rows, offsets) - from_codes(qv, sc, rows, offsets)).max())
        a = median_ms(decode_then_score, qv, rows, offsets)
        b = median_ms(from_codes, qv, sc, rows, offsets)
        print(f"{n:5d} passages, {offsets[-1]:6d} vectors: decode-then-score {a:6.2f} ms, from the codes {b:6.2f} ms ({a / b:.2f}x); max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
