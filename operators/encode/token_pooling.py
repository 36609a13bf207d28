"""Token pooling: fewer token vectors a passage by merging its most similar ones (PyLate's
``pool_factor``, Clavié et al. 2024, "Reducing the Footprint of Multi-Vector Retrieval with
Minimal Performance Impact via Token Pooling").

A passage's n token vectors are clustered hierarchically — Ward linkage
(``scipy.cluster.hierarchy.linkage``) over their pairwise cosine distances 1 − cos — and the
tree is cut into at most ``max(1, n // pool_factor)`` clusters (``fcluster``, criterion
``maxclust``); each cluster is stored as the mean of its vectors, rescaled to unit length.
Clusters come out in the order of their first token, so a passage's pooled vectors keep
the order of the text (the [CLS] vector's cluster first). ``pool_factor`` 1 (or a passage
of ≤ 1 vector, or one too short to lose a vector) returns the vectors unchanged.

Vectorised per passage: one distance matrix product, one linkage, one sort and one
``np.add.reduceat`` a passage; no Python loop over vectors. No Ray, no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray


def check_pool_factor(pool_factor: int) -> int:
    """``pool_factor`` as an int ≥ 1; ValueError otherwise."""
    if isinstance(pool_factor, bool) or not isinstance(pool_factor, (int, np.integer)) or pool_factor < 1:
        raise ValueError(f"pool_factor must be an integer >= 1 (1: no pooling), got {pool_factor!r}")
    return int(pool_factor)


def pooled_count(n_tokens: int, pool_factor: int) -> int:
    """Vectors a passage of ``n_tokens`` keeps at most: n for factor 1, else max(1, n // factor)."""
    return n_tokens if pool_factor == 1 or n_tokens <= 1 else max(1, n_tokens // pool_factor)


def cluster_labels(vectors: np.ndarray, n_clusters: int) -> np.ndarray:
    """(n,) int64 cluster of each of ``vectors`` ((n, dim), unit length), 0..c−1 with c ≤
    ``n_clusters``, numbered in the order of each cluster's first vector: Ward linkage on the
    cosine distances, cut at ``n_clusters``."""
    from scipy.cluster.hierarchy import fcluster, linkage  # here: 0.35 s to import, and only pooling needs it
    from scipy.spatial.distance import squareform

    x = np.asarray(vectors, dtype=np.float64)
    n = len(x)
    if n_clusters >= n:
        return np.arange(n, dtype=np.int64)
    if n_clusters <= 1:
        return np.zeros(n, dtype=np.int64)
    dist = 1.0 - x @ x.T
    dist = np.maximum((dist + dist.T) / 2, 0.0)  # exactly symmetric, no negative rounding
    np.fill_diagonal(dist, 0.0)
    tree = linkage(squareform(dist, checks=False), method="ward")
    raw = fcluster(tree, n_clusters, criterion="maxclust")
    # renumber by first occurrence: np.unique's first indices, ranked
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def pool_tokens(vectors: np.ndarray, pool_factor: int) -> np.ndarray:
    """One passage's (n, dim) unit token vectors → (c, dim) float32 pooled vectors, c ≤
    ``pooled_count(n, pool_factor)`` (module docstring)."""
    f = check_pool_factor(pool_factor)
    x = np.asarray(vectors)
    if x.ndim != 2:
        raise ValueError(f"token vectors must be an (n, dim) matrix, got shape {x.shape}")
    k = pooled_count(len(x), f)
    if k >= len(x):
        return x.astype(np.float32, copy=False)
    labels = cluster_labels(x, k)
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    means = np.add.reduceat(x[order].astype(np.float64), starts, axis=0) / counts[:, None]
    norms = np.linalg.norm(means, axis=1, keepdims=True)
    out: NDArray[np.float32] = (means / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def pool_passages(arrays: Sequence[np.ndarray], pool_factor: int) -> list[np.ndarray]:
    """``pool_tokens`` of every passage (the list unchanged for factor 1)."""
    f = check_pool_factor(pool_factor)
    if f == 1:
        return list(arrays)
    return [pool_tokens(a, f) for a in arrays]
