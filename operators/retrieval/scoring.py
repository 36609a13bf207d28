"""Exact scorers over packed passage vectors (see ``packed.py``), one per search mode.

The ``*_many`` scorers (and ``score_batch``) take several queries at once, their vectors as
the rows of one matrix (``QueryBatch``), and a ``Packed`` set of n passages, and return
(n_q, n) float32 scores: a block of passages costs one BLAS matmul whatever the number of
queries. ``maxsim``, ``first_m_max``, ``softmax_centroid``, ``dot`` and ``score`` are the
same for one query, (n,). Arithmetic is float32 (float16 input is converted on every
call); the matmuls go through ``operators.kernels.matmul`` (BLAS: torch's MKL, numpy's
without torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, Sequence, get_args

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

from mvr.operators.kernels import matmul
from mvr.operators.packed import Packed


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)  # no copy when already float32


def _segment_max(values: np.ndarray, offsets: np.ndarray, axis: int = -1) -> np.ndarray:
    """Max of ``values`` over each passage's rows (every passage has at least one row)."""
    return np.maximum.reduceat(values, offsets[:-1], axis=axis)


def _similarities(query_vectors: np.ndarray, docs: Packed) -> np.ndarray:
    """(m, rows) float32 q · d of every query vector and passage row: ``Packed.similarities``
    (``row_scale`` applied), or the codec's from the codes for ``Coded`` passages."""
    return docs.similarities(query_vectors)


# Every scorer works on several queries at once: the queries' vectors are the rows of one
# (m, dim) matrix, so a block of passages costs one BLAS matmul (m, dim) @ (dim, rows) and
# segment reductions along the rows of its (m, rows) similarities, each over contiguous memory
# (2-5x faster than reducing down the columns of (rows, m)); one query is a batch of one.


def maxsim_many(query_vectors: np.ndarray, starts: np.ndarray, docs: Packed) -> np.ndarray:
    """ColBERT MaxSim of several queries: S(q, d) = sum_i max_j q_i · d_j. ``query_vectors``:
    (m, dim) float32, the queries' L2-normalised token vectors one after another; ``starts``:
    (n_q,) int64, each query's first row (ascending; query t owns rows starts[t] up to the
    next start). Returns (n_q, n) float32."""
    if not len(docs):
        return np.zeros((len(starts), 0), np.float32)
    sims = _similarities(query_vectors, docs)  # (m, rows)
    best = _segment_max(sims, docs.offsets, axis=1)  # (m, n): each query vector's best row a passage
    full = np.diff(np.append(starts, len(query_vectors))) > 0
    if full.all():
        return np.add.reduceat(best, starts, axis=0)
    out = np.zeros((len(starts), len(docs)), np.float32)  # a query without vectors scores 0
    if full.any():
        out[full] = np.add.reduceat(best, starts[full], axis=0)
    return out


def first_m_many(query_vectors: np.ndarray, docs: Packed) -> np.ndarray:
    """ME-BERT for (n_q, dim) query vectors: max_j q · d_j over each passage's vectors; (n_q, n)."""
    if not len(docs):
        return np.zeros((len(query_vectors), 0), np.float32)
    return _segment_max(_similarities(query_vectors, docs), docs.offsets, axis=1)


def softmax_centroid_many(query_vectors: np.ndarray, docs: Packed) -> np.ndarray:
    """Pseudo-query for (n_q, dim) query vectors: a_j = softmax_j(q · c_j), score = sum_j
    a_j (q · c_j); (n_q, n)."""
    if not len(docs):
        return np.zeros((len(query_vectors), 0), np.float32)
    s = _similarities(query_vectors, docs)  # (n_q, rows)
    e = np.exp(s - np.repeat(_segment_max(s, docs.offsets, axis=1), docs.lengths, axis=1))
    z = np.add.reduceat(e, docs.offsets[:-1], axis=1)
    e *= s
    return (np.add.reduceat(e, docs.offsets[:-1], axis=1) / z).astype(np.float32, copy=False)


def dot_many(query_vectors: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Single-vector: q · d for (n, dim) passage vectors and (n_q, dim) queries; (n_q, n)."""
    return matmul(query_vectors, np.asarray(vectors).T)


def _row(query: np.ndarray) -> np.ndarray:
    return _f32(query).reshape(1, -1)


def maxsim(query: np.ndarray, docs: Packed) -> np.ndarray:
    """ColBERT: S(q, d) = sum_i max_j q_i · d_j. ``query``: (n_q, dim) L2-normalised."""
    scores: NDArray[np.float32] = maxsim_many(_f32(query), np.zeros(1, np.int64), docs)[0]
    return scores


def first_m_max(query: np.ndarray, docs: Packed) -> np.ndarray:
    """ME-BERT: max_j q · d_j over each passage's first m vectors. ``query``: (dim,)."""
    scores: NDArray[np.float32] = first_m_many(_row(query), docs)[0]
    return scores


def softmax_centroid(query: np.ndarray, docs: Packed) -> np.ndarray:
    """Pseudo-query: a_j = softmax_j(q · c_j), e_d = sum_j a_j c_j, score = q · e_d
    (= sum_j a_j (q · c_j)). ``query``: (dim,) pooled query vector."""
    scores: NDArray[np.float32] = softmax_centroid_many(_row(query), docs)[0]
    return scores


def dot(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Single-vector: q · d for (n, dim) passage vectors."""
    scores: NDArray[np.float32] = dot_many(_row(query), vectors)[0]
    return scores


# Search modes and the stored vectors each one scores (and searches with ANN): the one source
# of both, as types (the configuration's and the request's fields) and as tuples.
DenseMode = Literal["maxsim", "softmax-centroid", "first-m", "pooled"]
SingleMode = Literal["bm25", DenseMode]  # one side ranks: BM25 or a dense mode (hybrid fuses the two)
SearchMode = Literal[DenseMode, "bm25", "hybrid"]  # all: the dense ones, BM25 alone, a dense mode fused with BM25
VectorKind = Literal["tokens", "centroids", "first-m", "pooled"]
MODES: tuple[DenseMode, ...] = get_args(DenseMode)
SEARCH_MODES: tuple[SearchMode, ...] = get_args(SearchMode)
VECTOR_KINDS: tuple[VectorKind, ...] = get_args(VectorKind)
MODE_VECTORS: dict[str, VectorKind] = {"maxsim": "tokens", "softmax-centroid": "centroids", "first-m": "first-m", "pooled": "pooled"}


class QueryVectors(Protocol):
    """An encoded query: ``tokens`` (n_q, dim) and ``pooled`` (dim,), float32, L2-normalised."""

    tokens: np.ndarray
    pooled: np.ndarray


def check_mode(mode: str) -> str:
    """``mode`` if known; ValueError listing the modes otherwise."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode


def check_search_mode(mode: str) -> str:
    """``mode`` if it is a search mode (dense, bm25 or hybrid); ValueError otherwise."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(SEARCH_MODES)}")
    return mode


def first_stage_vectors(mode: str, query: QueryVectors) -> np.ndarray:
    """The query vectors that search a mode's ANN index: every token vector for ``maxsim``
    (ColBERT), the pooled vector for the others; (n, dim) float32."""
    return _f32(query.tokens) if mode == "maxsim" else _f32(query.pooled)[None, :]


def score(mode: str, query: QueryVectors, docs: Packed | np.ndarray) -> np.ndarray:
    """(n,) exact scores of n passages under ``mode``; ``docs`` is the mode's stored vectors
    (Packed for tokens, centroids and first-m; an (n, dim) matrix for pooled, or its codes as
    a ``Coded`` of one row a passage)."""
    scores: NDArray[np.float32] = score_batch(QueryBatch.of(mode, [query]), docs)[0]
    return scores


@dataclass(frozen=True)
class QueryBatch:
    """Queries of one mode stacked for one matmul a block: ``vectors`` (m, dim) float32,
    every query's token vectors (``maxsim``) or its pooled vector (the other modes), query
    after query; ``starts`` (n_q,) int64, each query's first row."""

    mode: str
    vectors: np.ndarray
    starts: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def width(self) -> int:
        """Query vectors (rows) of the batch."""
        return int(self.vectors.shape[0])

    @classmethod
    def of(cls, mode: str, queries: Sequence[QueryVectors]) -> "QueryBatch":
        """The vectors ``mode`` scores with, of each query in order."""
        check_mode(mode)
        if mode == "maxsim":
            tokens = [np.atleast_2d(_f32(q.tokens)) for q in queries]
            starts = np.zeros(len(tokens), np.int64)
            np.cumsum(np.array([len(t) for t in tokens[:-1]], np.int64), out=starts[1:])
            vectors = np.concatenate(tokens) if tokens else np.zeros((0, 0), np.float32)
        else:
            starts = np.arange(len(queries), dtype=np.int64)
            vectors = np.stack([_f32(q.pooled).reshape(-1) for q in queries]) if len(queries) else np.zeros((0, 0), np.float32)
        return cls(mode, np.ascontiguousarray(vectors, dtype=np.float32), starts)

    def part(self, lo: int, hi: int) -> "QueryBatch":
        """The queries [lo, hi) of the batch (a view of their vectors)."""
        ends = np.append(self.starts[1:], self.width)
        a = int(self.starts[lo]) if lo < len(self) else self.width
        b = int(ends[hi - 1]) if hi > lo else a
        return QueryBatch(self.mode, self.vectors[a:b], self.starts[lo:hi] - a)

    def split(self, max_vectors: int) -> list["QueryBatch"]:
        """Consecutive sub-batches of whole queries, each of at most ``max_vectors`` query
        vectors (a longer query alone): bounds a block's (vectors, rows) similarities."""
        ends = np.append(self.starts[1:], self.width)
        out, first = [], 0
        while first < len(self):
            last = max(first + 1, int(np.searchsorted(ends, self.starts[first] + max_vectors, side="right")))
            out.append(self.part(first, last))
            first = last
        return out


def score_batch(batch: QueryBatch, docs: Packed | np.ndarray) -> np.ndarray:
    """(n_q, n) exact scores of n passages under ``batch.mode`` for every query of the
    batch; ``docs`` is the mode's stored vectors (as ``score``)."""
    if batch.mode == "maxsim":
        assert isinstance(docs, Packed)  # the mode's stored vectors: Packed tokens
        return maxsim_many(batch.vectors, batch.starts, docs)
    if batch.mode == "first-m":
        assert isinstance(docs, Packed)  # Packed first-m vectors
        return first_m_many(batch.vectors, docs)
    if batch.mode == "softmax-centroid":
        assert isinstance(docs, Packed)  # Packed centroids
        return softmax_centroid_many(batch.vectors, docs)
    if isinstance(docs, Packed):  # pooled as its codes (``Coded``, one row a passage): scored from them
        return _similarities(batch.vectors, docs)
    return dot_many(batch.vectors, docs)
