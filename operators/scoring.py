"""Exact scorers over packed passage vectors (see ``packed.py``), one per search mode.

All take one query and a ``Packed`` set of n passages and return (n,) float32 scores.
Arithmetic is float32; hold vectors as float32 to score many queries (float16 input is
converted on every call)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from operators.packed import Packed


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)  # no copy when already float32


def _segment_max(values: np.ndarray, offsets: np.ndarray, axis: int = -1) -> np.ndarray:
    """Max of ``values`` over each passage's rows (every passage has at least one row)."""
    return np.maximum.reduceat(values, offsets[:-1], axis=axis)


def maxsim(query: np.ndarray, docs: Packed) -> np.ndarray:
    """ColBERT: S(q, d) = sum_i max_j q_i · d_j. ``query``: (n_q, dim) L2-normalised."""
    sims = _f32(query) @ _f32(docs.vectors).T  # (n_q, total)
    return _segment_max(sims, docs.offsets, axis=1).sum(axis=0)


def first_m_max(query: np.ndarray, docs: Packed) -> np.ndarray:
    """ME-BERT: max_j q · d_j over each passage's first m vectors. ``query``: (dim,)."""
    return _segment_max(_f32(docs.vectors) @ _f32(query), docs.offsets)


def softmax_centroid(query: np.ndarray, docs: Packed) -> np.ndarray:
    """Pseudo-query: a_j = softmax_j(q · c_j), e_d = sum_j a_j c_j, score = q · e_d
    (= sum_j a_j (q · c_j)). ``query``: (dim,) pooled query vector."""
    s = _f32(docs.vectors) @ _f32(query)
    owners = docs.owners()
    e = np.exp(s - _segment_max(s, docs.offsets)[owners])
    z = np.add.reduceat(e, docs.offsets[:-1])
    return (np.add.reduceat(e * s, docs.offsets[:-1]) / z).astype(np.float32)


def dot(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Single-vector: q · d for (n, dim) passage vectors."""
    return _f32(vectors) @ _f32(query)


# Search modes and the stored vectors each one scores (and searches with ANN).
MODES = ("maxsim", "softmax-centroid", "first-m", "pooled")
# All search modes: the dense ones, BM25 alone, and a dense mode fused with BM25.
SEARCH_MODES = MODES + ("bm25", "hybrid")
MODE_VECTORS = {"maxsim": "tokens", "softmax-centroid": "centroids", "first-m": "first-m", "pooled": "pooled"}
VECTOR_KINDS = ("tokens", "centroids", "first-m", "pooled")


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
    (Packed for tokens, centroids and first-m; an (n, dim) matrix for pooled)."""
    if mode == "maxsim":
        return maxsim(query.tokens, docs)
    if mode == "first-m":
        return first_m_max(query.pooled, docs)
    if mode == "softmax-centroid":
        return softmax_centroid(query.pooled, docs)
    if mode == "pooled":
        return dot(query.pooled, docs)
    raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
