"""Similarities of query vectors with product codes, computed from the codes: a table of each
query vector's product with every sub-centroid (M × 256 a query vector), then a sum of M
lookups a code (FAISS's asymmetric inner product), in one compiled kernel (numba) run on the
exact-scoring threads as the residual codes' is (``residual_scoring.run_split``). What
``PQ.similarities`` (pooled and centroids' ``pq-192``: one pooled query vector against a
partition's hits) and first-m's refinement (``Refined.similarities``) score with."""

from __future__ import annotations

import numba
import numpy as np

from mvr.operators.codecs.residual_scoring import run_split


@numba.njit(fastmath=True, nogil=True, cache=True)
def _lookup_sums_range(tables: np.ndarray, codes: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:  # pragma: no cover - compiled
    """out[q, t] = sum_j tables[q, j, codes[t, j]] for the code rows t in [lo, hi)."""
    m, subspaces = tables.shape[0], tables.shape[1]
    for t in range(lo, hi):
        for q in range(m):
            acc = np.float32(0.0)
            for j in range(subspaces):
                acc += tables[q, j, codes[t, j]]
            out[q, t] = acc


def pq_similarities(query_vectors: np.ndarray, codes: np.ndarray, centroids: np.ndarray, normalize: bool = False) -> np.ndarray:
    """(m, n) float32 q · decode(code) of (m, dim) ``query_vectors`` and (n, M) uint8 product
    ``codes`` of ``centroids`` ((M, 256, dim / M) float32 sub-centroids), without decoding:
    equal to ``q @ decode(codes).T`` up to float rounding; with ``normalize`` each code's
    vector is taken at unit length (its squared norm is the sum of its sub-centroids', one
    more table row)."""
    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    subspaces, k, sub = centroids.shape
    if q.ndim != 2 or q.shape[1] != subspaces * sub or codes.ndim != 2 or codes.shape[1] != subspaces:
        raise ValueError(
            f"product-code similarities: (m, {subspaces * sub}) query vectors and (n, {subspaces}) codes expected, got {q.shape} and {codes.shape}"
        )
    # (m, M, 256): one (256, sub) @ (sub, m) product a sub-space (10x faster than the einsum at m = 1)
    tables = np.matmul(centroids, q.reshape(len(q), subspaces, sub).transpose(1, 2, 0)).transpose(2, 0, 1)
    if normalize:
        tables = np.concatenate([tables, np.einsum("jkd,jkd->jk", centroids, centroids)[None]])  # the squared norms' row
    tables = np.ascontiguousarray(tables, dtype=np.float32)
    out = np.empty((len(tables), len(codes)), np.float32)
    if out.size:
        run_split(_lookup_sums_range, len(codes), out.size, tables, np.ascontiguousarray(codes, dtype=np.uint8), out)
    if not normalize:
        return out
    sims = out[: len(q)]
    sims *= np.float32(1.0) / np.maximum(np.sqrt(np.maximum(out[len(q)], 0)), np.float32(1e-12))
    return sims
