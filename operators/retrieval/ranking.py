"""Passage scores → ranked documents, and the merge of ranked lists from several partitions.

A document scores as its best passage (max aggregation). Ties keep input order (stable
sorts), and partitions are merged in partition order, so for the same scores a partitioned
search ranks exactly like one partition holding every passage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass
class Ranked:
    """Documents best first: ``doc_ids`` (n,) str, ``scores`` (n,) float32, ``passage_idx`` (n,)
    int32 (the best passage's window number inside its document)."""

    doc_ids: list[str] = field(default_factory=list)
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    passage_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.doc_ids)

    def finite(self) -> "Ranked":
        """The documents whose score is finite (a passage scored -inf is excluded: deleted)."""
        keep = np.isfinite(self.scores)
        if keep.all():
            return self
        return Ranked([d for d, ok in zip(self.doc_ids, keep) if ok], self.scores[keep], self.passage_idx[keep])


def best_first(scores: np.ndarray, at_least: int) -> np.ndarray:
    """The first passages of the stable descending order of ``scores`` ((n,) float32; ties
    keep input order), at least ``at_least`` of them (all when fewer): the passages scoring at
    least the ``at_least``-th best score, found by a partition (O(n)) and sorted among
    themselves, which is exactly a prefix of ``argsort(-scores, kind="stable")``."""
    neg = -np.asarray(scores, dtype=np.float32)
    if 4 * at_least >= len(neg):
        return np.argsort(neg, kind="stable")
    threshold = np.partition(neg, at_least - 1)[at_least - 1]
    head = np.flatnonzero(neg <= threshold)  # ascending: a stable sort keeps ties in input order
    return head[np.argsort(neg[head], kind="stable")]


def top_documents(scores: np.ndarray, doc_ids: Sequence[str] | np.ndarray, passage_idx: np.ndarray, k: int) -> Ranked:
    """The best ``k`` documents of n scored passages (``scores``, ``doc_ids``, ``passage_idx``
    all of length n), each document scored by its best passage. Looks at the best 2k
    passages first (``best_first``) and further only when they hold fewer than k documents."""
    n, want, done, picked = len(scores), 2 * k, 0, []
    seen: set[str] = set()
    while True:
        order = best_first(scores, min(want, n))
        for i in order[done:].tolist():
            d = doc_ids[i]
            if d in seen:
                continue
            seen.add(d)
            picked.append(i)
            if len(picked) == k:
                break
        done = len(order)
        if len(picked) == k or done >= n:
            break
        want *= 4
    idx = np.asarray(picked, dtype=np.int64)
    return Ranked([doc_ids[i] for i in picked], np.asarray(scores, np.float32)[idx], np.asarray(passage_idx)[idx].astype(np.int32))


def merge(parts: Sequence[Ranked], k: int) -> Ranked:
    """The best ``k`` documents of several ranked lists (a document in several lists keeps its
    best score). Exact whenever each part holds its own top-k documents."""
    if not parts:
        return Ranked()
    doc_ids = [d for p in parts for d in p.doc_ids]
    scores = np.concatenate([p.scores for p in parts]) if doc_ids else np.zeros(0, np.float32)
    passage_idx = np.concatenate([p.passage_idx for p in parts]) if doc_ids else np.zeros(0, np.int32)
    return top_documents(scores, doc_ids, passage_idx, k)
