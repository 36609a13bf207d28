"""Codec-IVF's probe: which lists each query vector visits and the ids they hold, in one
compiled pass (numba) over the (query vectors, cells) product of the query and the centroids.

The product may be approximate (bfloat16 operands, ``CentroidProduct``): each query vector's
``SHORTLIST`` best cells by it are then scored again exactly (float32 dots with the centroid
rows), and the lists are chosen by those exact scores. bfloat16 keeps 8 bits of mantissa: on
msmarco-sample's 445 query vectors the product is off by at most 0.004, while a query
vector's third best cell (it visits 1 to 3) is at least 0.016 above its 16th and 0.032 above
its 32nd (``benchmarks/profile_search.py --probe-check``), so the shortlist holds every cell
an exact ranking visits. Where the CPU has no native bfloat16 (the product would be emulated,
slower than float32), the product is float32 and exact, and no shortlist is taken.

Why: the float32 product was most of the first stage's time and numpy's argpartition, sort and
expansion of the lists most of the rest (``benchmarks/profile_search.py``, docs/search.md: the
first stage 1.11 → 0.48 ms a query, profiled)."""

from __future__ import annotations

from typing import Any, Optional

import numba
import numpy as np

from mvr.operators.kernels import get_torch

SHORTLIST = 32  # cells a query vector rescores exactly after an approximate product (module docstring)


def bfloat16_native() -> bool:
    """Whether torch's CPU matmul runs bfloat16 natively here (oneDNN with AVX-512 BF16 or
    AMX); without it a bfloat16 product is emulated and slower than float32."""
    torch = get_torch()
    if torch is None:
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - an older or stripped torch
        return False


class CentroidProduct:
    """The (query vectors, cells) products of a query's vectors with fixed centroids:
    bfloat16 operands where the CPU has them natively (``exact`` False: the probe rescores a
    shortlist), float32 otherwise (``exact`` True). A bfloat16 copy of the centroids is its
    one allocation ((cells, dim) · 2 B); a float32 product reads the given rows in place."""

    def __init__(self, centroids: np.ndarray, approximate: Optional[bool] = None) -> None:
        torch = get_torch()
        self.exact = not (bfloat16_native() if approximate is None else approximate) or torch is None
        if torch is None:
            self._table: Any = np.ascontiguousarray(centroids, dtype=np.float32)
        else:
            table = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32))
            self._table = table if self.exact else table.to(torch.bfloat16)

    def __call__(self, queries: np.ndarray) -> np.ndarray:
        """(nq, cells) float32 products of the (nq, dim) query vectors with the centroids."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        torch = get_torch()
        if torch is None:
            out: np.ndarray = q @ self._table.T
            return out
        tq = torch.from_numpy(q)
        if not self.exact:
            tq = tq.to(torch.bfloat16)
        product: np.ndarray = torch.mm(tq, self._table.T).float().numpy()
        return product


@numba.njit(nogil=True, cache=True)
def _sift_down(heap_v: np.ndarray, heap_i: np.ndarray, j: int, size: int) -> None:  # pragma: no cover - compiled
    """Restore the min-heap order of ``heap_v[:size]`` (``heap_i`` moved alongside) below ``j``."""
    while True:
        child = 2 * j + 1
        if child >= size:
            return
        if child + 1 < size and heap_v[child + 1] < heap_v[child]:
            child += 1
        if heap_v[child] >= heap_v[j]:
            return
        heap_v[j], heap_v[child] = heap_v[child], heap_v[j]
        heap_i[j], heap_i[child] = heap_i[child], heap_i[j]
        j = child


@numba.njit(nogil=True, cache=True)
def _shortlist(column: np.ndarray, size: int, out: np.ndarray) -> int:  # pragma: no cover - compiled
    """The indices of the ``size`` largest values of ``column`` into ``out[:size]`` (in no
    order), by a min-heap; returns how many (``min(size, len(column))``)."""
    n = len(column)
    size = min(size, n)
    heap_v = np.empty(size, np.float32)
    for i in range(size):
        out[i] = i
        heap_v[i] = column[i]
    for start in range(size // 2 - 1, -1, -1):  # heapify
        _sift_down(heap_v, out, start, size)
    for i in range(size, n):
        if column[i] > heap_v[0]:
            heap_v[0], out[0] = column[i], i
            _sift_down(heap_v, out, 0, size)
    return size


@numba.njit(nogil=True, cache=True, fastmath=True)
def probe_lists(
    queries: np.ndarray,
    centroids: np.ndarray,
    product: np.ndarray,
    exact: bool,
    shortlist: int,
    offsets: np.ndarray,
    lists: np.ndarray,
    nprobe: int,
    k: int,
    look: int,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled: numba runs the machine code, coverage sees no line of it
    """Each query vector's lists and their ids: its best ``nprobe`` cells by q · c, then
    further cells in that order while the ids gathered before them are fewer than ``k``
    (``look`` cells considered at most), every id of a visited list taken (ascending within a
    list, the best list first), each scored q · c of its cell.

    ``queries`` (nq, dim) float32, ``centroids`` (cells, dim) float32, ``product`` (nq, cells)
    their products (approximate unless ``exact``: then each query vector's ``shortlist`` best
    cells by it are scored again with float32 dots and chosen from), ``offsets`` (cells + 1,)
    int64 and ``lists`` the ids list by list. Returns ids (nq, width) int64 and scores (nq,
    width) float32, -1 / -inf past a query vector's ids, ``width`` its most ids (at least k)."""
    nq, dim = queries.shape
    cells = centroids.shape[0]
    look = min(look, cells)
    wide = look if exact else min(cells, max(shortlist, look))
    chosen = np.empty((nq, look), np.int64)
    chosen_s = np.empty((nq, look), np.float32)
    taken = np.zeros((nq, look), np.int64)
    cand = np.empty(wide, np.int64)
    cand_s = np.empty(wide, np.float32)
    width = k
    for qi in range(nq):
        n = _shortlist(product[qi], wide, cand)
        for j in range(n):
            c = cand[j]
            if exact:
                cand_s[j] = product[qi, c]
            else:
                acc = np.float32(0.0)
                for d in range(dim):
                    acc += queries[qi, d] * centroids[c, d]
                cand_s[j] = acc
        order = np.argsort(-cand_s[:n], kind="mergesort")  # best first; ties by position
        before = 0
        for j in range(min(look, n)):
            c = cand[order[j]]
            chosen[qi, j] = c
            chosen_s[qi, j] = cand_s[order[j]]
            size = offsets[c + 1] - offsets[c]
            if j < nprobe or before < k:
                taken[qi, j] = size
            before += size
        total = 0
        for j in range(look):
            total += taken[qi, j]
        width = max(width, total)
    ids = np.full((nq, width), -1, np.int64)
    scores = np.full((nq, width), -np.inf, np.float32)
    for qi in range(nq):
        at = 0
        for j in range(look):
            c = chosen[qi, j]
            for e in range(taken[qi, j]):
                ids[qi, at] = lists[offsets[c] + e]
                scores[qi, at] = chosen_s[qi, j]
                at += 1
    return ids, scores
