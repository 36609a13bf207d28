"""Sparse–dense hybrids (ME-BERT, Luan et al. 2021): each side's n-best passages, the union
rescored exactly on both sides, fused, aggregated to documents.

1. Where the vectors are (a partition, in process or in a Serve replica), ``side_by_side``
   takes the partition's dense candidates (ANN rows, or every passage on the exact path),
   scores them exactly, keeps its local dense n-best and its local BM25 n-best, and returns
   the union with both exact scores. A passage of the global n-best of either side is in its
   partition's local n-best of that side, so nothing the global union needs is lost.
2. ``fuse`` merges the partitions' lists: the global n-best of each side, their union, and
   one fused score a passage:

   - ``weighted``: λ · dense' + (1 − λ) · bm25', where x' = (x − min) / (max − min) with
     min and max over that side's ``norm_depth`` best passages (20 by default; a passage
     below them, or found only by the other side, can fall below 0; 0 when all are equal).
     The two sides' score ranges differ by an order of magnitude and vary by query (MaxSim
     sums one cosine per query token; BM25 sums idf-weighted term scores), so raw
     λ-weighting would depend on the query's length; normalising each side over its own best
     keeps one side's scale independent of what the other side adds. Over the best 20, not
     the whole n-best: the top of a list decides a top-10 answer, and the shape of its tail
     depends on the vectors. A lossy codec (PCA) lifts the tail of MaxSim's n-best relative to
     its top (the top-10's spread over the top-100's range fell from 0.24 to 0.21 on
     msmarco-sample), so normalised over the n-best the dense side's differences at the top
     shrank and BM25 weighed more there: the same λ fell 0.007 below MaxSim alone on
     msmarco-sample when the codec changed. Over each side's best 20 the default stays at or
     above its better side with float and coded vectors on three collections (docs/hybrid.md).
   - ``rrf``: 1 / (rrf_k + rank_dense) + 1 / (rrf_k + rank_bm25), ranks (1-based) by each
     side's exact score over the union (Cormack et al. 2009; rrf_k = 60).

   A passage without any query term scores 0 on the BM25 side (it still joins the union
   when it is in the dense n-best)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mvr.operators.retrieval.partition import Partition, allowed_as_rows, in_allowed
from mvr.operators.retrieval.ranking import Ranked, top_documents
from mvr.operators.retrieval.scoring import MODES, QueryVectors

FUSIONS = ("weighted", "rrf")


@dataclass(frozen=True)
class HybridParams:
    """``dense``: the dense mode fused with BM25; ``fusion``: weighted or rrf; ``lam``: λ,
    the dense side's weight in [0, 1]; ``rrf_k``: RRF's rank offset; ``n_best``: passages
    taken from each side before the union; ``norm_depth``: each side's best passages whose
    scores give the weighted fusion's min and max (module docstring)."""

    dense: str = "maxsim"
    fusion: str = "weighted"
    lam: float = 0.8
    rrf_k: int = 60
    n_best: int = 100
    norm_depth: int = 20

    def __post_init__(self) -> None:
        if self.dense not in MODES:
            raise ValueError(f"dense mode {self.dense!r} is not one of {', '.join(MODES)}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion {self.fusion!r} is not one of {', '.join(FUSIONS)}")
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam (λ, the dense weight) must be between 0 and 1, got {self.lam!r}")
        if self.rrf_k < 1 or self.n_best < 1 or self.norm_depth < 1:
            raise ValueError(f"rrf_k, n_best and norm_depth must be at least 1, got {self.rrf_k}, {self.n_best}, {self.norm_depth}")


@dataclass
class ScoredPassages:
    """Passages with both exact scores: ``passages`` (n,) int64 global passage numbers,
    ``doc_ids`` (n,), ``passage_idx`` (n,) int32, ``dense`` and ``sparse`` (n,) float32."""

    passages: np.ndarray
    doc_ids: list[str]
    passage_idx: np.ndarray
    dense: np.ndarray
    sparse: np.ndarray

    def __len__(self) -> int:
        return len(self.passages)

    @classmethod
    def concat(cls, parts: Sequence["ScoredPassages"]) -> "ScoredPassages":
        return cls(
            np.concatenate([p.passages for p in parts]) if parts else np.zeros(0, np.int64),
            [d for p in parts for d in p.doc_ids],
            np.concatenate([p.passage_idx for p in parts]) if parts else np.zeros(0, np.int32),
            np.concatenate([p.dense for p in parts]) if parts else np.zeros(0, np.float32),
            np.concatenate([p.sparse for p in parts]) if parts else np.zeros(0, np.float32),
        )

    def take(self, idx: np.ndarray) -> "ScoredPassages":
        return ScoredPassages(self.passages[idx], [self.doc_ids[i] for i in idx], self.passage_idx[idx], self.dense[idx], self.sparse[idx])


def n_best(scores: np.ndarray, n: int, positive: bool = False) -> np.ndarray:
    """Indices of the ``n`` highest ``scores`` (unsorted); ``positive``: only scores > 0."""
    idx = np.flatnonzero(scores > 0) if positive else np.arange(len(scores))
    if len(idx) > n:
        idx = idx[np.argpartition(-scores[idx], n - 1)[:n]]
    return idx


def side_by_side(
    dense: Partition, sparse: np.ndarray, first_passage: int, mode: str, query: QueryVectors, rows: Optional[np.ndarray], n: int,
    allowed: Optional[np.ndarray] = None,
) -> ScoredPassages:
    """A partition's part of the union: its local dense n-best among ``rows`` (None: every
    passage) and its local BM25 n-best, with both exact scores. ``sparse``: (len(dense),)
    BM25 scores of the partition's passages; ``first_passage``: global number of row 0.
    ``allowed`` (sorted rows or a bool mask; None: all): both sides keep those passages only."""
    if allowed is not None:
        keep = allowed_as_rows(allowed)
        rows = keep if rows is None else np.asarray(rows, np.int64)[in_allowed(rows, allowed)]
        masked = np.zeros_like(sparse)
        masked[keep] = sparse[keep]
        sparse = masked
    cand = np.arange(len(dense), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    # rows=None scores the partition's vectors in place (taking every row would copy them all)
    dense_scores = dense.rescore(mode, query, None if rows is None else cand) if len(cand) else np.zeros(0, np.float32)
    keep = cand[n_best(dense_scores, n)]
    union = np.union1d(keep, n_best(sparse, n, positive=True))
    known = dict(zip(cand.tolist(), dense_scores.tolist()))
    missing = np.array([r for r in union.tolist() if r not in known], dtype=np.int64)
    if len(missing):
        known.update(zip(missing.tolist(), dense.rescore(mode, query, missing).tolist()))
    return ScoredPassages(
        union + first_passage,
        [dense.doc_ids[r] for r in union],
        dense.passage_idx[union],
        np.array([known[r] for r in union.tolist()], dtype=np.float32),
        sparse[union].astype(np.float32),
    )


def min_max(x: np.ndarray, over: np.ndarray) -> np.ndarray:
    """(x − min) / (max − min) with min and max taken over ``x[over]``; zeros when those are
    all equal (or ``over`` is empty)."""
    if not len(over):
        return np.zeros_like(x)
    lo, hi = float(x[over].min()), float(x[over].max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def best_of(x: np.ndarray, among: np.ndarray, depth: int) -> np.ndarray:
    """The ``depth`` indices of ``among`` with the highest ``x`` (all of them when fewer)."""
    if len(among) <= depth:
        return among
    return among[np.argpartition(-x[among], depth - 1)[:depth]]


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks by descending ``x`` (ties by position)."""
    r = np.empty(len(x), np.int64)
    r[np.argsort(-x, kind="stable")] = np.arange(1, len(x) + 1)
    return r


@dataclass
class Union:
    """The fused candidate set: ``passages`` with both scores, and which of them are in the
    dense n-best (``dense_best``) and the BM25 n-best (``sparse_best``), as indices."""

    passages: ScoredPassages
    dense_best: np.ndarray
    sparse_best: np.ndarray


def union_of_best(parts: Sequence[ScoredPassages], n: int) -> Union:
    """The global n-best passages of each side over the partitions' lists, as one list."""
    allp = ScoredPassages.concat(parts)
    _, first = np.unique(allp.passages, return_index=True)  # a passage reported twice counts once
    allp = allp.take(np.sort(first))
    d, s = n_best(allp.dense, n), n_best(allp.sparse, n, positive=True)
    keep = np.union1d(d, s)
    return Union(allp.take(keep), np.searchsorted(keep, d), np.searchsorted(keep, s))


def fused_scores(union: Union, params: HybridParams) -> np.ndarray:
    """(n,) float32 fused score of each passage of ``union`` (see the module docstring)."""
    p = union.passages
    if params.fusion == "rrf":
        return (1.0 / (params.rrf_k + ranks(p.dense)) + 1.0 / (params.rrf_k + ranks(p.sparse))).astype(np.float32)
    depth = params.norm_depth
    dense = min_max(p.dense, best_of(p.dense, union.dense_best, depth))
    sparse = min_max(p.sparse, best_of(p.sparse, union.sparse_best, depth))
    return (params.lam * dense + (1.0 - params.lam) * sparse).astype(np.float32)


def fuse(parts: Sequence[ScoredPassages], params: HybridParams, k: int) -> tuple[Ranked, int]:
    """Top-``k`` documents (best passage each) by fused score, and the union's size."""
    union = union_of_best(parts, params.n_best)
    p = union.passages
    return top_documents(fused_scores(union, params), p.doc_ids, p.passage_idx, k), len(p)
