"""Exact scorers over packed passage vectors (see ``packed.py``), one per search mode.

All take one query and a ``Packed`` set of n passages and return (n,) float32 scores.
Arithmetic is float32; hold vectors as float32 to score many queries (float16 input is
converted on every call)."""

from __future__ import annotations

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
