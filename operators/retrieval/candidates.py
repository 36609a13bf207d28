"""Candidate selection across partitions: the first-stage hits of every partition merged as
if one index held all vectors, so the candidates do not depend on the number of partitions.

ColBERT's end-to-end retrieval: each query vector's k' nearest indexed vectors, their
passages deduplicated. Here each partition returns its own top-k' per query vector; the merge
keeps each query vector's global top-k', estimates every passage by Σ_i max_{hits of q_i}
score (MaxSim over the hits; the max hit for a single query vector), and keeps the
``candidate_cap`` best passages for exact rescoring. Too few passages for k documents: k'
grows and the partitions are asked again."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from mvr.operators.retrieval.partition import Hits, Partition, Scored
from mvr.operators.retrieval.scoring import QueryVectors, first_stage_vectors


@dataclass
class FirstStage:
    """Candidate-stage knobs. ``k_prime``: nearest indexed vectors asked for each query vector
    (raised while fewer than k passages come back); ``candidate_cap``: passages rescored at
    most over all partitions (the best by first-stage estimate; raised to k); ``ann``: backend
    search knobs (FAISS ``nprobe``; ScaNN ``leaves_to_search``, ``reorder_k``), unset = the
    index's defaults. ``k_ref``: the k that ``k_prime`` and ``candidate_cap`` are sized for; a
    search for more documents scales them (``budget``), as PLAID widens its search with k."""

    k_prime: int = 100
    candidate_cap: int = 1000
    ann: dict[str, Any] = field(default_factory=dict)
    k_ref: int = 10

    def budget(self, k: int) -> tuple[int, int]:
        """(k', candidate cap) for a top-``k`` search: k' × k / k_ref and the cap at least
        CAP_PER_K · k when k > k_ref; the configured values otherwise."""
        if k <= self.k_ref:
            return self.k_prime, max(self.candidate_cap, k)
        return -(-self.k_prime * k // self.k_ref), max(self.candidate_cap, CAP_PER_K * k)


# Passages rescored per document asked for, at least, once k exceeds k_ref (PLAID's ndocs is
# 4·k beyond k = 100).
CAP_PER_K = 4


def select(hits: Sequence[Hits], k_prime: int, cap: int) -> tuple[list[np.ndarray], int]:
    """Candidate rows for each partition (sorted) from all partitions' hits, and the number of
    distinct passages hit before the cap."""
    if not any(len(h) for h in hits):
        return [np.zeros(0, np.int64) for _ in hits], 0
    part = np.concatenate([np.full(len(h), i, np.int64) for i, h in enumerate(hits)])
    qv = np.concatenate([h.query_vector for h in hits])
    rows = np.concatenate([h.rows for h in hits])
    scores = np.concatenate([h.scores for h in hits]).astype(np.float64)
    # each query vector's global top-k' vectors, then the best hit per (query vector, passage)
    order = np.lexsort((-scores, qv))
    qv, part, rows, scores = qv[order], part[order], rows[order], scores[order]
    keep = (np.arange(len(qv)) - np.searchsorted(qv, qv, side="left")) < k_prime
    qv, part, rows, scores = qv[keep], part[keep], rows[keep], scores[keep]
    width = int(rows.max()) + 1
    passage = part * width + rows
    pair = np.unique(qv * (len(hits) * width) + passage, return_index=True)[1]  # first = best
    passages, inverse = np.unique(passage[pair], return_inverse=True)
    estimate = np.bincount(inverse, weights=scores[pair], minlength=len(passages))
    n_hit = len(passages)
    if n_hit > cap:
        passages = np.sort(passages[np.argpartition(-estimate, cap - 1)[:cap]])
    return [passages[passages // width == i] % width for i in range(len(hits))], n_hit


class CandidateRounds:
    """The first stage's rounds, for callers that gather hits their own way (in process, or
    from Serve replicas with ``await``): ask every partition for ``k_prime`` hits, ``offer``
    them; ``offer`` returns the candidate rows per partition, or None after raising
    ``k_prime`` because fewer than min(k, n_passages) passages were hit (k' stops growing
    once it covers all ``n_vectors`` indexed vectors).

    ``allowed_passages``: with a filter, how many passages it allows (the partitions drop hits
    outside it, ``Partition.hits``): k passages are asked of those, and the first round's k'
    is the configured one scaled by ``n_passages / allowed_passages`` (a filter allowing 10 %
    of the passages keeps about 10 % of the hits), so a selective filter does not need many
    doubling rounds."""

    def __init__(self, first_stage: FirstStage, k: int, n_passages: int, n_vectors: int, allowed_passages: Optional[int] = None) -> None:
        self.max_vectors = max(1, n_vectors)
        k_prime, cap = first_stage.budget(k)
        if allowed_passages is not None:
            k_prime = -(-k_prime * max(1, n_passages) // max(1, allowed_passages))
            n_passages = min(n_passages, allowed_passages)
        self.k_prime = max(1, min(k_prime, self.max_vectors))
        self.cap = cap
        self.need = min(k, n_passages)

    def offer(self, hits: Sequence[Hits]) -> Optional[list[np.ndarray]]:
        rows, n_hit = select(hits, self.k_prime, self.cap)
        if n_hit >= self.need or self.k_prime >= self.max_vectors:
            return rows
        # grow by the shortfall (at least 2x) so a few rounds suffice
        self.k_prime = min(self.max_vectors, self.k_prime * max(2, -(-2 * self.need // max(1, n_hit))))
        return None


# One trip (``first_trip``): standard deviations above its expected share of each query
# vector's global top-k' (binomial) that a partition rescores ahead of the merge.
SHARE_SIGMAS = 5.0


def local_share(k_prime: int, cap: int, fraction: float, sigmas: float = SHARE_SIGMAS) -> tuple[int, int]:
    """(k', cap) with which a partition holding ``fraction`` of the passages picks, from its
    own hits, the passages it rescores ahead of the merge: its expected share of the global
    k' and cap (``fraction`` of each, as when passages are spread over partitions at random)
    plus ``sigmas`` binomial standard deviations. ``fraction`` 1: the global ones."""
    p = min(1.0, max(0.0, float(fraction)))

    def share(n: int) -> int:
        return min(n, max(1, math.ceil(n * p + sigmas * math.sqrt(n * p * (1 - p)))))

    return share(k_prime), share(cap)


def first_trip(
    part: Partition, mode: str, query: QueryVectors, k_prime: int, knobs: dict[str, Any], share: tuple[int, int], allowed: Optional[np.ndarray] = None
) -> tuple[Hits, Scored]:
    """A partition's first trip when the merge is expected to need no second one: its hits
    (``Partition.hits``), and the exact scores of the passages it would contribute to the
    candidates if its share of them is at most ``share`` (``local_share``): those chosen by
    ``select`` from its own hits with that k' and cap. When the merge's candidates of this
    partition are all among them, ``Scored.result`` ranks them as ``Partition.rank`` would
    (the same candidates, so the same top-k); otherwise the caller asks for ``rank``."""
    hits = part.hits(first_stage_vectors(mode, query), k_prime, knobs, allowed=allowed)
    (rows,), _ = select([hits], *share)
    return hits, part.score_rows(mode, query, rows)


def candidates(
    gather: Callable[[int], Sequence[Hits]], first_stage: FirstStage, k: int, n_passages: int, n_vectors: int, allowed_passages: Optional[int] = None
) -> tuple[list[np.ndarray], int]:
    """Run the first stage in process: ``gather(k_prime)`` asks every partition for its hits
    (``CandidateRounds``; ``allowed_passages``: see there). Returns (candidate rows per
    partition, the k' finally used)."""
    rounds = CandidateRounds(first_stage, k, n_passages, n_vectors, allowed_passages)
    while (rows := rounds.offer(gather(rounds.k_prime))) is None:
        pass
    return rows, rounds.k_prime
