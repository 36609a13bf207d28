"""MaxSim of candidate passages from residual-1 codes, three ways side by side (issue 49,
step 4):

    python benchmarks/score_from_codes.py [--passages 80,300,1000] [--threads 2] [--reps 100] [--query-vectors 9]

All three score the same candidate passages for one query of ``--query-vectors`` vectors (9:
msmarco-sample's mean) against a ``residual-1`` codec at 192 dimensions and 8,192 centroids
(the default token codec's shape, on synthetic unit vectors near random centroids; the timing
does not depend on the data), each on ``--threads`` threads, then the same max a passage and
sum:

- **decode-then-score**: the candidates decoded into a float matrix (``decode_scaled``),
  one matmul (``Codec.similarities`` as every codec but residual has it);
- **mvr's kernel**: ``residual_scoring.residual_similarities``, the compiled kernel of
  ``operators/codecs/residual_scoring.py`` (called directly, at any number of query vectors:
  ``Residual.similarities`` uses it up to ``MAX_QUERY_VECTORS`` and decodes above, the cut
  this measurement places): each code's vector rebuilt in a 1-vector scratch, normed there
  and multiplied with every query vector;
- **WARP's tables**: q·c from one product with the centroids the candidates name (as the
  first stage computes it), the residual's term from per-query byte tables (24 lookups a
  query vector and code), each vector's 1 / |c + r̂| from |c|², c·r̂ and |r̂|²; a numba
  kernel run on the same threads (``run_split``).

It prints each one's median milliseconds and the largest difference from decode-then-score.
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
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--query-vectors", type=int, default=9)
    args = p.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numba
    import torch

    from mvr.operators.codecs import Codec
    from mvr.operators.codecs.residual import Residual
    from mvr.operators.codecs.residual_scoring import residual_similarities, run_split
    from mvr.operators.kernels import matmul

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    dim, n_centroids, n_vectors, nq = 192, 8192, 200_000, args.query_vectors
    centroids = rng.standard_normal((n_centroids, dim)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    x = centroids[rng.integers(0, n_centroids, n_vectors)] + 0.08 * rng.standard_normal((n_vectors, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = Residual.fit(1, x[:65536], centroids=centroids, normalize=True)
    codes = codec.encode(x)
    norms2 = np.einsum("ij,ij->i", codec.centroids, codec.centroids).astype(np.float32)
    squares = (codec.table**2).sum(axis=1).astype(np.float32)  # |r̂|² of a byte's values

    @numba.njit(fastmath=True, nogil=True)
    def tables_kernel(qc, at, tables, res, cents, ids, norms2, values, squares, out, lo, hi):  # pragma: no cover - compiled
        nq, nb, per = tables.shape[0], tables.shape[1], values.shape[1]
        for t in range(lo, hi):
            c = ids[t]
            cr = np.float32(0.0)
            rr = np.float32(0.0)
            for j in range(nb):
                byte = res[t, j]
                rr += squares[byte]
                for k in range(per):
                    cr += cents[c, j * per + k] * values[byte, k]
            s = np.float32(1.0) / np.float32(max(np.sqrt(norms2[c] + np.float32(2.0) * cr + rr), np.float32(1e-12)))
            u = at[t]
            for q in range(nq):
                acc = qc[q, u]
                for j in range(nb):
                    acc += tables[q, j, res[t, j]]
                out[q, t] = acc * s

    def maxsim(sims: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(sims, offsets[:-1], axis=1).sum(axis=0)

    def decode_then_score(qv: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return maxsim(Codec.similarities(codec, qv, rows), offsets)

    def from_codes(qv: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        sims = residual_similarities(qv, rows[:, codec.id_bytes :], codec.ids_of(rows), codec.centroids, codec.table, codec.normalize)
        return maxsim(sims, offsets)

    def warp_tables(qv: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        ids = codec.ids_of(rows)
        touched, at = np.unique(ids, return_inverse=True)
        qc = matmul(qv, np.ascontiguousarray(codec.centroids[touched].T))
        nb = rows.shape[1] - codec.id_bytes
        tables = (qv.reshape(len(qv) * nb, codec.per_byte) @ codec.table.T).reshape(len(qv), nb, 256)
        sims = np.empty((len(qv), len(rows)), np.float32)
        res = np.ascontiguousarray(rows[:, codec.id_bytes :])
        run_split(tables_kernel, len(rows), sims.size, qc, at, np.ascontiguousarray(tables), res, codec.centroids, ids, norms2, codec.table, squares, sims)
        return maxsim(sims, offsets)

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
    ways = {"decode-then-score": decode_then_score, "mvr's kernel": from_codes, "WARP's tables": warp_tables}
    for n in (int(v) for v in args.passages.split(",")):
        offsets = np.concatenate([[0], np.cumsum(rng.integers(60, 100, n))]).astype(np.int64)
        rows = np.ascontiguousarray(codes[rng.integers(0, n_vectors, offsets[-1])])
        qv = rng.standard_normal((nq, dim)).astype(np.float32)
        qv /= np.linalg.norm(qv, axis=1, keepdims=True)
        want = decode_then_score(qv, rows, offsets)
        cells = []
        base = median_ms(decode_then_score, qv, rows, offsets)
        for name, fn in ways.items():
            diff = float(np.abs(fn(qv, rows, offsets) - want).max())
            ms = base if fn is decode_then_score else median_ms(fn, qv, rows, offsets)
            cells.append(f"{name} {ms:6.2f} ms ({base / ms:.2f}x, max |diff| {diff:.0e})")
        print(f"{n:5d} passages, {offsets[-1]:6d} vectors: " + "; ".join(cells))


if __name__ == "__main__":
    main()
