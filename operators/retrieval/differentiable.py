"""The search modes' exact scores as differentiable torch functions of an encoder's raw token
vectors: what ``mvr train`` puts in its loss. They compute what indexing (``operators/encode/
compress.py``'s ``Compressor``) and search (``operators/retrieval/scoring.py``) compute, on
padded batches instead of packed passages; ``tests/test_differentiable.py`` holds the two
forms equal.

Inputs: ``raw`` (B, T, D) float token vectors, not normalised, and ``mask`` (B, T) bool, the
positions that are tokens. ``Representations`` are one side's vectors for every mode; the
score functions take a query side and a passage side and return (B_q, B_p) scores.

Softmax-centroid trains as Tang et al. (2021) do: the k-means assignments carry no gradient
(``compress.kmeans_lloyd``, the same k-means as indexing), each centroid is the mean of its
assigned vectors, with gradient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from mvr.operators.encode.compress import check_centroid_space, kmeans_lloyd

_NEG = -1e4  # the score of a padded position under max / softmax (finite: no NaN in gradients)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, dim=-1, eps=1e-12)


@dataclass
class Representations:
    """One side's vectors, each L2-normalised: ``tokens`` (B, T, D) with ``token_mask`` (B, T)
    (stored tokens: the skiplist applied to passages); ``pooled`` (B, D); ``first_m`` (B, m, D)
    with ``first_m_mask``; ``centroids`` (B, k, D) with ``centroid_mask``."""

    tokens: torch.Tensor
    token_mask: torch.Tensor
    pooled: torch.Tensor
    first_m: torch.Tensor
    first_m_mask: torch.Tensor
    centroids: Optional[torch.Tensor] = None
    centroid_mask: Optional[torch.Tensor] = None


def represent(
    raw: torch.Tensor,
    mask: torch.Tensor,
    keep: Optional[torch.Tensor] = None,
    first_m: int = 8,
    centroids: int = 0,
    kmeans_iterations: int = 10,
    centroid_space: str = "unit",
    pooling: str = "mean",
) -> Representations:
    """Every representation of a batch, as ``Compressor`` makes them: ``tokens`` the
    normalised vectors (``keep`` (B, T) bool: those stored, default all); ``pooled`` the
    normalised mean (or first, ``cls``) of all raw vectors; ``first_m`` the first m normalised
    vectors; ``centroids`` (when ``centroids`` > 0) k-means in ``centroid_space``."""
    m = mask.to(raw.dtype)[:, :, None]
    unit = _unit(raw) * m
    pooled = raw[:, 0] if pooling == "cls" else (raw * m).sum(1) / m.sum(1).clamp(min=1)
    out = Representations(unit, mask if keep is None else mask & keep, _unit(pooled), unit[:, :first_m], mask[:, :first_m])
    if centroids > 0:
        space = raw * m if check_centroid_space(centroid_space) == "raw" else unit
        out.centroids, out.centroid_mask = _centroids(space, mask, centroids, kmeans_iterations)
        if centroid_space == "unit":
            out.centroids = _unit(out.centroids)
    return out


def _centroids(x: torch.Tensor, mask: torch.Tensor, k: int, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, k, D) centroids and (B, k) mask: a passage of at most k vectors has its vectors
    (``kmeans_centroids``'s rule), a longer one the means of its k-means clusters (with
    gradient; an empty cluster keeps its k-means value, without)."""
    lengths = mask.sum(1)
    out = x[:, :k].clone() if x.shape[1] >= k else torch.nn.functional.pad(x, (0, 0, 0, k - x.shape[1]))
    out_mask = torch.arange(k, device=x.device)[None, :] < lengths[:, None]
    long = lengths > k
    if long.any():
        xs, ms = x[long], mask[long]
        assign, fixed = kmeans_lloyd(xs, ms, k, iterations)
        onehot = (assign[:, :, None] == torch.arange(k, device=x.device)[None, None, :]).to(x.dtype)  # (b, T, k)
        counts = onehot.sum(1)[:, :, None]  # (b, k, 1)
        means = torch.bmm(onehot.transpose(1, 2), xs) / counts.clamp(min=1)
        out[long] = torch.where(counts > 0, means, fixed.to(x.dtype))
    return out, out_mask


def maxsim(query: Representations, passages: Representations) -> torch.Tensor:
    """ColBERT: sum over the query's tokens of the best passage token; (B_q, B_p)."""
    sims = torch.einsum("qid,pjd->qpij", query.tokens, passages.tokens)
    sims = sims.masked_fill(~passages.token_mask[None, :, None, :], _NEG)
    best = sims.max(-1).values * query.token_mask[:, None, :].to(sims.dtype)
    return best.sum(-1)


def first_m(query: Representations, passages: Representations) -> torch.Tensor:
    """ME-BERT: the best of the passage's first m vectors for the pooled query; (B_q, B_p)."""
    sims = torch.einsum("qd,pjd->qpj", query.pooled, passages.first_m)
    return sims.masked_fill(~passages.first_m_mask[None], _NEG).max(-1).values


def softmax_centroid(query: Representations, passages: Representations) -> torch.Tensor:
    """Pseudo-query: a_j = softmax_j(q · c_j), score = sum_j a_j (q · c_j); (B_q, B_p)."""
    if passages.centroids is None or passages.centroid_mask is None:
        raise ValueError("softmax-centroid needs the passages' centroids (represent(..., centroids=k))")
    s = torch.einsum("qd,pjd->qpj", query.pooled, passages.centroids)
    a = torch.softmax(s.masked_fill(~passages.centroid_mask[None], _NEG), dim=-1)
    return (a * s).sum(-1)


def pooled(query: Representations, passages: Representations) -> torch.Tensor:
    """Single vector: q · d of the pooled vectors; (B_q, B_p)."""
    return query.pooled @ passages.pooled.T


SCORERS = {"maxsim": maxsim, "first-m": first_m, "softmax-centroid": softmax_centroid, "pooled": pooled}


def score(mode: str, query: Representations, passages: Representations) -> torch.Tensor:
    """(B_q, B_p) scores of every query against every passage under ``mode``."""
    try:
        return SCORERS[mode](query, passages)
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(SCORERS)}") from None
