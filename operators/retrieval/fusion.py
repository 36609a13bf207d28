"""Sparse–dense hybrids (ME-BERT, Luan et al. 2021): each side's n-best passages, the union
rescored exactly on both sides, fused, aggregated to documents.

1. Where the vectors are (a partition, in process or in a Serve replica), ``side_by_side_batch``
   takes each query's dense candidates (ANN rows, or every passage on the exact path),
   scores them exactly, keeps its local dense n-best and its local BM25 n-best, and returns
   the union with both exact scores. A passage of the global n-best of either side is in its
   partition's local n-best of that side, so nothing the global union needs is lost. Several
   queries are one batch: on the exact path each block of vectors is decoded once and scored
   for all of them with one matmul (as ``Partition.rank_batch``); on the ANN path each passage
   of a group of queries' candidates is decoded once for the group. One query
   (``side_by_side``) is a batch of one.
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
from typing import Callable, Literal, Optional, Sequence, get_args

import numpy as np

from mvr.operators.packed import Packed
from mvr.operators.retrieval import scoring
from mvr.operators.retrieval.partition import Partition, allowed_as_rows
from mvr.operators.retrieval.ranking import Ranked, top_documents
from mvr.operators.retrieval.scoring import MODES, QueryVectors

Fusion = Literal["weighted", "rrf"]  # how a hybrid fuses its two rankings
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)


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
    ``doc_ids`` (n,) object (a list is taken as one), ``passage_idx`` (n,) int32, ``dense``
    and ``sparse`` (n,) float32."""

    passages: np.ndarray
    doc_ids: np.ndarray
    passage_idx: np.ndarray
    dense: np.ndarray
    sparse: np.ndarray

    def __post_init__(self) -> None:
        if not (isinstance(self.doc_ids, np.ndarray) and self.doc_ids.dtype == object):
            ids = np.empty(len(self.doc_ids), object)
            ids[:] = list(self.doc_ids)
            self.doc_ids = ids

    def __len__(self) -> int:
        return len(self.passages)

    @classmethod
    def concat(cls, parts: Sequence["ScoredPassages"]) -> "ScoredPassages":
        return cls(
            np.concatenate([p.passages for p in parts]) if parts else np.zeros(0, np.int64),
            np.concatenate([p.doc_ids for p in parts]) if parts else np.zeros(0, object),
            np.concatenate([p.passage_idx for p in parts]) if parts else np.zeros(0, np.int32),
            np.concatenate([p.dense for p in parts]) if parts else np.zeros(0, np.float32),
            np.concatenate([p.sparse for p in parts]) if parts else np.zeros(0, np.float32),
        )

    def take(self, idx: np.ndarray) -> "ScoredPassages":
        return ScoredPassages(self.passages[idx], self.doc_ids[idx], self.passage_idx[idx], self.dense[idx], self.sparse[idx])


def n_best(scores: np.ndarray, n: int, positive: bool = False) -> np.ndarray:
    """Indices of the ``n`` highest ``scores`` (unsorted); ``positive``: only scores > 0."""
    idx = np.flatnonzero(scores > 0) if positive else np.arange(len(scores))
    if len(idx) > n:
        idx = idx[np.argpartition(-scores[idx], n - 1)[:n]]
    return idx


# float32 bytes of one chunk's (queries, passages) dense and BM25 score matrices: a chunk of a
# batch holds at most this (and at most ``Partition.BATCH_COLUMNS`` query vectors)
CHUNK_SCORE_BYTES = 256 << 20
# float32 bytes of decoded vectors a group of queries' candidates (ANN path) gathers at once:
# each passage of the group's candidates is decoded once for every query of the group
GATHER_BYTES = 256 << 20
# decoding a passage's vectors, in units of scoring them for one query: measured on cranfield
# (pca-192+residual-1 codes, MaxSim, 2-core VM) decoding took 3.1x the matmuls of the same
# passages for one query each. Candidate rows of several queries (ANN path) are scored in one
# pass over every passage when (queries + DECODE_COST) x passages <= (1 + DECODE_COST) x their
# candidates: one decode of everything beats one decode a query's candidates
DECODE_COST = 3.0


def side_by_side(
    dense: Partition,
    sparse: np.ndarray,
    first_passage: int,
    mode: str,
    query: QueryVectors,
    rows: Optional[np.ndarray],
    n: int,
    allowed: Optional[np.ndarray] = None,
) -> ScoredPassages:
    """One query's part of the union (``side_by_side_batch`` of one). ``sparse``:
    (len(dense),) BM25 scores of the partition's passages."""
    return side_by_side_batch(dense, lambda _: sparse, first_passage, mode, [query], [rows], n, allowed)[0]


def side_by_side_batch(
    dense: Partition,
    sparse: Callable[[int], np.ndarray],
    first_passage: int,
    mode: str,
    queries: Sequence[QueryVectors],
    rows: Sequence[Optional[np.ndarray]],
    n: int,
    allowed: Optional[np.ndarray] = None,
) -> list[ScoredPassages]:
    """Each query's part of the union: its local dense n-best among its candidate ``rows``
    (None: every passage) and its local BM25 n-best, with both exact scores.
    ``sparse(i)``: (len(dense),) float32 BM25 scores of the partition's passages for query
    ``i``; ``first_passage``: global number of row 0; ``allowed`` (sorted rows or a bool
    mask; None: all): both sides keep those passages only. Deleted passages (``dense.live``)
    are on neither side.

    The queries are taken in chunks (``CHUNK_SCORE_BYTES``). The queries of a chunk that
    score every passage share one pass over the vectors (``Partition.rescore_batch``: each
    block decoded once and scored with one matmul for all of them). The others score their
    candidates and BM25 n-bests: in one such pass too when those cover most of the partition
    (``DECODE_COST``), else decoded once for a group of queries (``GATHER_BYTES``), each
    query scoring its own. One query is a batch of one: the same
    parts one at a time or together (scores up to float rounding: the matmuls' shapes differ)."""
    if scoring.MODE_VECTORS[scoring.check_mode(mode)] != dense.kind:
        raise ValueError(f"mode {mode} scores {scoring.MODE_VECTORS[mode]} vectors; this partition holds {dense.kind}")
    if len(rows) != len(queries):
        raise ValueError(f"{len(queries)} queries but {len(rows)} candidate row sets")
    size = len(dense)
    ok = dense.live  # (size,) bool: the passages either side may return (None: all)
    if allowed is not None:
        mask = np.zeros(size, bool)
        mask[allowed_as_rows(allowed)] = True
        ok = mask if ok is None else mask & ok
    every = np.arange(size, dtype=np.int64) if ok is None else np.flatnonzero(ok).astype(np.int64)
    batch = scoring.QueryBatch.of(mode, queries)
    out: list[ScoredPassages] = []
    for lo, hi in _chunks(batch, size):
        bm25 = np.zeros((hi - lo, size), np.float32)
        for i in range(lo, hi):
            scores = np.asarray(sparse(i))
            if scores.shape != (size,):
                raise ValueError(f"BM25 scores of shape {scores.shape} for a partition of {size} passages")
            bm25[i - lo] = scores
        if ok is not None:
            bm25[:, ~ok] = 0.0  # not allowed, or deleted: in no side's n-best
        sparse_best = [n_best(b, n, positive=True) for b in bm25]
        cands = [None if (r := rows[i]) is None else _candidates(r, ok) for i in range(lo, hi)]
        scored = _dense_scores(dense, batch.part(lo, hi), cands, sparse_best, every, ok)
        for j, (scored_rows, scores, is_cand) in enumerate(scored):
            c_rows, c_scores = (scored_rows, scores) if is_cand is None else (scored_rows[is_cand], scores[is_cand])
            union = np.union1d(c_rows[n_best(c_scores, n)], sparse_best[j])
            at = np.searchsorted(scored_rows, union)  # every passage of the union was scored
            out.append(ScoredPassages(union + first_passage, dense.doc_id_array[union], dense.passage_idx[union], scores[at], bm25[j, union]))
    return out


def _candidates(rows: np.ndarray, ok: Optional[np.ndarray]) -> np.ndarray:
    """Candidate ``rows`` as sorted unique int64, those ``ok`` keeps (None: all)."""
    rows = np.unique(np.asarray(rows, np.int64))
    return rows if ok is None else rows[ok[rows]]


def _chunks(batch: scoring.QueryBatch, passages: int) -> list[tuple[int, int]]:
    """[lo, hi) query ranges of ``batch``: at most ``Partition.BATCH_COLUMNS`` query vectors
    (a longer query alone) and ``CHUNK_SCORE_BYTES`` of (queries, passages) scores each."""
    per_chunk = max(1, CHUNK_SCORE_BYTES // (8 * max(passages, 1)))
    out, lo = [], 0
    for sub in batch.split(Partition.BATCH_COLUMNS):
        out += [(lo + a, lo + min(a + per_chunk, len(sub))) for a in range(0, len(sub), per_chunk)]
        lo += len(sub)
    return out


_Scored = tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]  # (rows scored, their scores, which are candidates)


def _dense_scores(
    dense: Partition, batch: scoring.QueryBatch, cands: list[Optional[np.ndarray]], sparse_best: list[np.ndarray], every: np.ndarray, ok: Optional[np.ndarray]
) -> list[_Scored]:
    """Exact dense scores for each query of ``batch``: (rows scored, sorted int64; their (m,)
    float32 scores; (m,) bool, which of them are its candidates, or None: all). A query
    without candidate rows (None in ``cands``) scores ``every`` passage; one with them, its
    candidates and its BM25 n-best (``sparse_best``)."""
    out: list[Optional[_Scored]] = [None] * len(batch)
    for a, b in _runs([i for i, c in enumerate(cands) if c is None]):  # one pass over the vectors a run of queries
        if ok is None or 4 * len(every) > len(dense):  # most passages: scored in place, the others dropped
            scores = dense.rescore_batch(batch.part(a, b), None)
            scores = scores if ok is None else scores[:, every]
        else:  # a few allowed passages: only they are decoded
            scores = dense.rescore_batch(batch.part(a, b), every)
        for i in range(a, b):
            out[i] = (every, scores[i - a], None)
    own_cands = {i: c for i, c in enumerate(cands) if c is not None}
    own = list(own_cands)
    need = {i: np.union1d(own_cands[i], sparse_best[i]) for i in own}
    if own and (len(own) + DECODE_COST) * len(dense) <= (1 + DECODE_COST) * sum(len(need[i]) for i in own):
        # candidates covering most of the partition: one pass over every passage for them all
        # (each block decoded once) costs less than decoding each query's own
        for a, b in _runs(own):
            scores = dense.rescore_batch(batch.part(a, b), None)
            for i in range(a, b):
                out[i] = (need[i], scores[i - a, need[i]], np.isin(need[i], own_cands[i], assume_unique=True))
        return out  # type: ignore[return-value]
    offsets = dense.vectors.offsets
    budget = max(1, GATHER_BYTES // (4 * max(dense.dim, 1)))  # decoded vector rows a group
    vectors = {i: int((offsets[need[i] + 1] - offsets[need[i]]).sum()) for i in own}  # the needed rows' lengths only
    group: list[int] = []
    held = 0
    for j, i in enumerate(own):
        group.append(i)
        held += vectors[i]
        if j + 1 < len(own) and held + vectors[own[j + 1]] <= budget:
            continue
        union = np.unique(np.concatenate([need[g] for g in group]))
        decoded = dense.vectors.take(union, for_scoring=True)  # each passage gathered (and decoded, unless scored from its codes) once for the group
        for g in group:
            at = np.searchsorted(union, need[g])
            mine = decoded if len(at) == len(union) else (decoded.take(at) if isinstance(decoded, Packed) else decoded[at])
            scores = scoring.score_batch(batch.part(g, g + 1), mine)[0] if len(at) else np.zeros(0, np.float32)
            out[g] = (need[g], scores, np.isin(need[g], own_cands[g], assume_unique=True))
        group, held = [], 0
    return out  # type: ignore[return-value]


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of ascending ``indices``, as [a, b) ranges."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


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
    return fuse_union(union_of_best(parts, params.n_best), params, k)


def fuse_union(union: Union, params: HybridParams, k: int) -> tuple[Ranked, int]:
    """``fuse`` of a union already taken (``union_of_best`` with ``params.n_best``): one
    union fused with several settings (λ, RRF) is taken once."""
    p = union.passages
    return top_documents(fused_scores(union, params), p.doc_ids, p.passage_idx, k), len(p)
