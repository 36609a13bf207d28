"""Per-passage representations computed from raw token vectors, vectorised over a batch:
L2-normalised token vectors, pooled vector, first-m vectors (ME-BERT) and k-means centroids
(pseudo-query embeddings, equal-interval initialisation).

The centroids' space (``CENTROID_SPACES``, the index's ``compress.centroid_space``):

- ``unit`` (the default): k-means over the passage's L2-normalised token vectors, each
  centroid rescaled to unit length. q · c_j is then a cosine, as every other dense score is.
- ``raw``: k-means over the raw token vectors, centroids as they come (Tang et al. 2021 as
  written). The raw vectors' lengths vary widely (centroid norms about 5.5 ± 2.6 with
  all-MiniLM-L6-v2), so q · c_j mostly measures a centroid's length, not its direction:
  softmax-centroid scored 0.13–0.25 nDCG@10 below a pooled vector this way, against
  0.01–0.04 below in the unit space (docs/search.md).

The query side is the same for both: the pooled query vector, a = softmax_j(q · c_j),
score = sum_j a_j (q · c_j) (``operators/retrieval/scoring.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # torch is imported where used: what imports this module for l2_normalize alone
    # (EncodedQuery's readers, the index app's partition replicas) loads no torch
    import torch
    from numpy.typing import NDArray


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``x`` scaled to unit L2 norm (zero rows stay zero)."""
    out: NDArray[Any] = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)
    return out


def projection_matrix(in_dim: int, out_dim: int, seed: int) -> np.ndarray:
    """(in_dim, out_dim) float32 with orthonormal columns, a fixed function of the seed."""
    if out_dim > in_dim:
        raise ValueError(f"projection_dim {out_dim} exceeds the model's dimension {in_dim}")
    g = np.random.default_rng(seed).standard_normal((in_dim, out_dim))
    q, r = np.linalg.qr(g)
    return (q * np.sign(np.diag(r))).astype(np.float32)


def pad(arrays: Sequence[np.ndarray], fill: float = 0, dtype: Optional["torch.dtype"] = None) -> tuple["torch.Tensor", "torch.Tensor"]:
    """List of (n_i, ...) arrays → a (B, T, ...) tensor (``dtype``, float32 by default) holding
    ``fill`` past each array's end, and the (B, T) bool mask of the real positions."""
    import torch

    dtype = dtype or torch.float32
    width = max(len(a) for a in arrays)
    x = torch.full((len(arrays), width, *np.shape(arrays[0])[1:]), fill, dtype=dtype)
    mask = torch.zeros((len(arrays), width), dtype=torch.bool)
    into, present = x.numpy(), mask.numpy()  # views: numpy casts each array in (read-only ones too)
    for i, a in enumerate(arrays):
        into[i, : len(a)] = a
        present[i, : len(a)] = True
    return x, mask


def pooled(arrays: Sequence[np.ndarray], mode: str = "mean") -> np.ndarray:
    """(B, dim) float32, L2-normalised: mean over each passage's raw vectors, or the first ([CLS])."""
    if mode == "cls":
        out = np.stack([a[0] for a in arrays])
    else:
        out = np.stack([a.mean(axis=0) for a in arrays])
    return l2_normalize(out.astype(np.float32))


def kmeans_centroids(arrays: Sequence[np.ndarray], k: int, iterations: int = 10, chunk: int = 64) -> list[np.ndarray]:
    """Per passage, Lloyd's k-means over its (n_i, dim) vectors, batched over passages.

    Initial centroids are the vectors at positions floor(linspace(0, n_i - 1, k)) (equal
    intervals); an empty cluster keeps its previous centroid; iteration stops early once no
    assignment changes (the result is then the same as running all ``iterations``). A passage
    with n_i <= k vectors gets its vectors as centroids. Passages are batched ``chunk`` at a
    time in length order, so little padding is computed. Returns (min(k, n_i), dim) float32."""
    out: list[np.ndarray] = [np.asarray(a, dtype=np.float32) for a in arrays]
    todo = [i for i, a in enumerate(arrays) if len(a) > k]
    todo.sort(key=lambda i: len(arrays[i]))
    for start in range(0, len(todo), chunk):
        idx = todo[start : start + chunk]
        centroids = _kmeans_batch([arrays[i] for i in idx], k, iterations)
        for i, c in zip(idx, centroids):
            out[i] = c
    return out


def _kmeans_batch(arrays: Sequence[np.ndarray], k: int, iterations: int) -> np.ndarray:
    """(B, k, dim) centroids for passages that all have more than k vectors."""
    x, mask = pad(arrays)  # (B, T, D), (B, T)
    centroids: NDArray[np.float32] = kmeans_lloyd(x, mask, k, iterations)[1].numpy()
    return centroids


def kmeans_lloyd(x: "torch.Tensor", mask: "torch.Tensor", k: int, iterations: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Lloyd's k-means of each passage's vectors, batched: ``x`` (B, T, D) float32, ``mask``
    (B, T) bool, every passage with more than k vectors. Returns (assignments (B, T) int64,
    -1 at padding; centroids (B, k, D)), computed without gradient: the one k-means of
    indexing (``kmeans_centroids``) and of training (``operators.retrieval.differentiable``,
    which takes each centroid again as the mean of its assigned vectors, with gradient)."""
    import torch

    with torch.no_grad():
        x = x.detach()
        lengths = mask.sum(1)
        steps = torch.arange(k, dtype=torch.float64, device=x.device)
        init = torch.floor(steps[None, :] * (lengths[:, None].double() - 1) / max(k - 1, 1)).long()  # (B, k)
        c = torch.gather(x, 1, init[:, :, None].expand(-1, -1, x.shape[2])).clone()  # (B, k, D)
        x_sq = (x * x).sum(-1)  # (B, T)
        previous = None
        for _ in range(iterations):
            d = x_sq[:, :, None] - 2 * torch.bmm(x, c.transpose(1, 2)) + (c * c).sum(-1)[:, None, :]  # (B, T, k)
            assign = d.argmin(-1).masked_fill(~mask, -1)  # (B, T); padding assigned nowhere
            if previous is not None and torch.equal(assign, previous):
                break
            previous = assign
            onehot = (assign[:, :, None] == torch.arange(k, device=x.device)[None, None, :]).to(x.dtype)  # (B, T, k)
            counts = onehot.sum(1)  # (B, k)
            sums = torch.bmm(onehot.transpose(1, 2), x)  # (B, k, D)
            c = torch.where(counts[:, :, None] > 0, sums / counts.clamp(min=1)[:, :, None], c)
        if previous is None:  # no iteration: assignments to the initial centroids
            d = x_sq[:, :, None] - 2 * torch.bmm(x, c.transpose(1, 2)) + (c * c).sum(-1)[:, None, :]
            previous = d.argmin(-1).masked_fill(~mask, -1)
    return previous, c


CENTROID_SPACES = ("unit", "raw")


def check_centroid_space(space: str) -> str:
    """``space`` if it is one of ``CENTROID_SPACES``; ValueError naming them otherwise."""
    if space not in CENTROID_SPACES:
        raise ValueError(f"unknown centroid space {space!r}; choose one of {', '.join(CENTROID_SPACES)}")
    return space


def passage_centroids(raw: Sequence[np.ndarray], normed: Sequence[np.ndarray], k: int, iterations: int, space: str = "unit") -> list[np.ndarray]:
    """Each passage's (min(k, n_i), dim) float32 k-means centroids in ``space`` (module
    docstring): over ``normed`` (the (n_i, dim) L2-normalised vectors) then rescaled to unit
    length for ``unit``, over ``raw`` (the same vectors before normalising) for ``raw``."""
    if check_centroid_space(space) == "raw":
        return kmeans_centroids(raw, k, iterations)
    return [l2_normalize(c) for c in kmeans_centroids(normed, k, iterations)]


class Compressor:
    """Raw token vectors of a batch of passages → every stored representation.

    Token vectors are projected (if ``projection`` is given), then: ``tokens`` are the
    L2-normalised kept vectors; ``pooled`` the normalised mean (or CLS) of all raw vectors;
    ``first_m`` the first m normalised vectors; ``centroids`` k-means over all of a
    passage's vectors in ``centroid_space`` (``passage_centroids``)."""

    def __init__(
        self,
        projection: Optional[np.ndarray] = None,
        pooling: str = "mean",
        first_m: int = 8,
        centroids: int = 4,
        kmeans_iterations: int = 10,
        centroid_space: str = "unit",
    ) -> None:
        self.projection = projection
        self.pooling = pooling
        self.first_m = first_m
        self.k = centroids
        self.iterations = kmeans_iterations
        self.centroid_space = check_centroid_space(centroid_space)

    def __call__(self, raw: Sequence[np.ndarray], keep: Optional[Sequence[np.ndarray]] = None) -> dict[str, list[np.ndarray]]:
        """``raw``: (n_i, model_dim) float32 per passage; ``keep``: (n_i,) bool per passage,
        which token vectors to store. Returns lists of float32 arrays per representation."""
        if self.projection is not None:
            raw = [r @ self.projection for r in raw]
        normed = [l2_normalize(r) for r in raw]
        tokens = normed if keep is None else [v[m] for v, m in zip(normed, keep)]
        return {
            "tokens": tokens,
            "pooled": list(pooled(raw, self.pooling)),
            "first_m": [v[: self.first_m] for v in normed],
            "centroids": passage_centroids(raw, normed, self.k, self.iterations, self.centroid_space),
        }
