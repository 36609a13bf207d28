"""Similarities of query vectors with residual codes, computed from the codes (WARP's idea on
mvr's codec): each code's vector is rebuilt in a 1-vector scratch (centroid row + the
residual's values looked up a byte at a time), its norm taken there and its dot product with
every query vector accumulated, so no (candidates, dim) float matrix is written and read back.

One compiled kernel (numba, ``nogil``), run on this process's exact-scoring threads
(``run_split``): the rows are split into one contiguous range a thread, each range's
similarities written into its own columns of the output. Python threads, not numba's own
threading layer: numba's OpenMP pool would spin beside torch's, the contention
``operators/kernels.py`` measured for torch's and OpenBLAS's pools.

Why not WARP's per-query lookup tables (q·centroid once per centroid touched, the residual's
contribution from a (query vector, byte, byte value) table): measured on this machine
(``benchmarks/score_from_codes.py``), the tables' 24 scattered lookups a query vector and code
cost more than 192 contiguous multiply-adds, and a unit-length code still needs |c + r̂|,
so the centroid row is read anyway. The measurement is in docs/search.md."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import numba
import numpy as np

from mvr.operators.kernels import get_torch

# Below this many (query vector, code) pairs a call runs on one thread: handing a range to
# another thread costs tens of microseconds.
SPLIT_MIN_PAIRS = 1 << 15
# Above this many query vectors a call decodes and multiplies instead (``Residual.similarities``):
# the kernel's dots cost m · dim a code, the decode a fixed amount and BLAS's product less a
# dot. Measured with benchmarks/score_from_codes.py (2 threads, 80-1,000 passages of ~80
# codes, the kernel called at every width): from the codes 1.9-3.0x faster at 9 query vectors,
# 1.2-3.1x at 16, 1.2-3.6x at 24, 1.06-1.7x at 32, and 0.85x in an earlier run at 32 and 300
# passages (docs/search.md). A query's vectors are 9 on msmarco-sample; a batch of queries
# scored together (exact search) is hundreds.
MAX_QUERY_VECTORS = 24


@numba.njit(fastmath=True, nogil=True, cache=True, inline="always")
def _rebuild(
    residuals: np.ndarray, t: int, c: int, centroids: np.ndarray, values: np.ndarray, normalize: bool, v: np.ndarray
) -> np.float32:  # pragma: no cover - compiled
    """v = centroids[c] + the residual values of ``residuals[t]`` (``values[byte]``: that
    byte's per_byte values); returns 1 / |v| when ``normalize``, else 1."""
    n_bytes, per_byte = residuals.shape[1], values.shape[1]
    for j in range(n_bytes):
        byte = residuals[t, j]
        for k in range(per_byte):
            v[j * per_byte + k] = centroids[c, j * per_byte + k] + values[byte, k]
    if not normalize:
        return np.float32(1.0)
    norm2 = np.float32(0.0)
    for i in range(v.shape[0]):
        norm2 += v[i] * v[i]
    return np.float32(1.0) / np.float32(max(np.sqrt(norm2), np.float32(1e-12)))


@numba.njit(fastmath=True, nogil=True, cache=True)
def _similarities_range(
    query_vectors: np.ndarray,
    residuals: np.ndarray,
    ids: np.ndarray,
    centroids: np.ndarray,
    values: np.ndarray,
    normalize: bool,
    out: np.ndarray,
    lo: int,
    hi: int,
) -> None:  # pragma: no cover - compiled: numba runs the machine code, coverage sees no line of it
    """out[:, t] = q · v_t for the code rows t in [lo, hi): v_t = centroids[ids[t]] + the
    residual values of ``residuals[t]``, divided by |v_t| when ``normalize`` (``_rebuild``)."""
    m, dim = query_vectors.shape
    last = centroids.shape[0] - 1
    v = np.empty(dim, np.float32)
    for t in range(lo, hi):
        scale = _rebuild(residuals, t, min(ids[t], last), centroids, values, normalize, v)  # ids are < k by construction; clipped as decode's gathers clip
        for q in range(m):
            acc = np.float32(0.0)
            for i in range(dim):
                acc += query_vectors[q, i] * v[i]
            out[q, t] = acc * scale


@numba.njit(fastmath=True, nogil=True, cache=True)
def _pair_similarities(
    query_vectors: np.ndarray,
    query_index: np.ndarray,
    residuals: np.ndarray,
    ids: np.ndarray,
    centroids: np.ndarray,
    values: np.ndarray,
    normalize: bool,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """out[t] = query_vectors[query_index[t]] · v_t for every code row t (v_t as in
    ``_similarities_range``): one dot a code, not one a query vector."""
    dim = query_vectors.shape[1]
    last = centroids.shape[0] - 1
    v = np.empty(dim, np.float32)
    for t in range(len(out)):
        scale = _rebuild(residuals, t, min(ids[t], last), centroids, values, normalize, v)
        q = query_index[t]
        acc = np.float32(0.0)
        for i in range(dim):
            acc += query_vectors[q, i] * v[i]
        out[t] = acc * scale


_pool: Optional[ThreadPoolExecutor] = None
_pool_threads = 0
_pool_lock = threading.Lock()


def threads() -> int:
    """Threads exact scoring uses in this process: torch's intra-op threads (the matmuls'),
    1 without torch."""
    torch = get_torch()
    return max(1, int(torch.get_num_threads())) if torch is not None else 1


def run_split(kernel: Callable[..., Any], n: int, pairs: int, *args: Any) -> None:
    """``kernel(*args, lo, hi)`` over [0, n) in ``threads()`` contiguous ranges (one on the
    calling thread, the others on a pool kept for the process), or in one call when
    ``pairs`` (the work's size) is under ``SPLIT_MIN_PAIRS``. The kernel releases the GIL."""
    global _pool, _pool_threads
    parts = min(threads(), max(1, n)) if pairs >= SPLIT_MIN_PAIRS else 1
    if parts == 1:
        kernel(*args, 0, n)
        return
    with _pool_lock:
        if _pool is None or _pool_threads < parts - 1:
            _pool, _pool_threads = ThreadPoolExecutor(parts - 1, thread_name_prefix="mvr-codes"), parts - 1
        pool = _pool
    bounds = np.linspace(0, n, parts + 1).astype(np.int64).tolist()
    futures = [pool.submit(kernel, *args, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    kernel(*args, bounds[0], bounds[1])
    for f in futures:
        f.result()


def residual_similarities(
    query_vectors: np.ndarray, residuals: np.ndarray, ids: np.ndarray, centroids: np.ndarray, values: np.ndarray, normalize: bool
) -> np.ndarray:
    """(m, n) float32 q · v of the (m, dim) ``query_vectors`` and the n codes: ``residuals``
    (n, bytes) uint8 packed residual values, ``ids`` (n,) int64 centroid ids, ``centroids``
    (k, dim) float32, ``values`` (256, per_byte) float32 (a byte's decoded values, in
    order); v = centroid + residual, divided by |v| when ``normalize``. Equal to decoding
    and a matmul up to float rounding."""
    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    dim = centroids.shape[1]
    if q.ndim != 2 or q.shape[1] != dim or residuals.shape[1] * values.shape[1] != dim or len(ids) != len(residuals) or values.shape[0] != 256:
        raise ValueError(
            f"residual similarities: (m, {dim}) query vectors and {dim}-value codes expected, got {q.shape} and {residuals.shape[1] * values.shape[1]}"
        )
    out = np.empty((len(q), len(residuals)), np.float32)
    if out.size:
        run_split(_similarities_range, len(residuals), out.size, q, np.ascontiguousarray(residuals), ids, centroids, values, bool(normalize), out)
    return out


def residual_pair_similarities(
    query_vectors: np.ndarray, query_index: np.ndarray, residuals: np.ndarray, ids: np.ndarray, centroids: np.ndarray, values: np.ndarray, normalize: bool
) -> np.ndarray:
    """(n,) float32 ``query_vectors[query_index[t]]`` · v_t of the n codes (arguments as
    ``residual_similarities``; ``query_index`` (n,) int, each in [0, m)): the first stage's
    hits, each scored by the query vector that found it only. One thread: a query's hits are
    a few hundred to a few thousand codes."""
    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    index = np.asarray(query_index, dtype=np.int64)
    dim = centroids.shape[1]
    if q.ndim != 2 or q.shape[1] != dim or residuals.shape[1] * values.shape[1] != dim or len(ids) != len(residuals) or len(index) != len(residuals):
        raise ValueError(
            f"residual pair similarities: (m, {dim}) query vectors, {dim}-value codes and one query vector a code expected, "
            f"got {q.shape}, {residuals.shape[1] * values.shape[1]} values and {len(index)} for {len(residuals)} codes"
        )
    if len(index) and (index.min() < 0 or index.max() >= len(q)):
        raise ValueError(f"residual pair similarities: query vector numbers outside [0, {len(q)})")
    out = np.empty(len(residuals), np.float32)
    if len(out):
        _pair_similarities(q, index, np.ascontiguousarray(residuals), ids, centroids, values, bool(normalize), out)
    return out
