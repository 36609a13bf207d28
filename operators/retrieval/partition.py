"""One partition of an index: the stored vectors of its passages (one vector kind; codes of
the index's codec, memory-mapped from the shards, decoded only for the candidates a query
rescores), their document ids, and optionally an ANN index over those vectors. A query takes two trips:

1. ``hits``: each query vector's k' nearest indexed vectors, mapped to the partition's
   passages (the best score of each query vector and passage);
2. ``rank``: exact rescoring of the candidate passages chosen from every partition's hits
   (``operators/retrieval/candidates.py``) and the partition's top-k documents.

Without an ANN index the partition is exact: ``rank`` scores every passage (brute force).

Both trips take ``allowed``, a per-query restriction to some of the partition's passages
(rows): a metadata filter (docs/filters.md), or any other set of passages a caller wants
(deleted ones are the partition's ``live`` mask, fixed at load). ``hits`` drops hits outside
it before candidates are chosen; ``rank`` scores only allowed rows. ``allowed`` is either
sorted unique int64 rows or an (n,) bool mask (``allowed_rows`` turns global passage numbers
into the former); membership is vectorised (``in_allowed``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from mvr.operators.ann.base import AnnIndex
from mvr.operators.kernels import get_torch
from mvr.operators.packed import Packed
from mvr.operators.retrieval import scoring
from mvr.operators.retrieval.ranking import Ranked, top_documents
from mvr.operators.retrieval.stored_vectors import StoredVectors

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass
class Hits:
    """A partition's first-stage hits, one entry per indexed vector found: ``query_vector``
    (n,) int64 which query vector found it, ``rows`` (n,) int64 the passage (row in the
    partition) it belongs to, ``scores`` (n,) float32 its first-stage score."""

    query_vector: np.ndarray
    rows: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def empty(cls) -> "Hits":
        """No hits (a partition that did not answer)."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


@dataclass
class PartitionResult:
    """A partition's answer: its top documents, the passages it rescored, and milliseconds."""

    ranked: Ranked
    candidates: int
    rescore_ms: float


@dataclass
class Scored:
    """Exact scores of some of a partition's passages, rescored ahead of the candidate merge
    (``operators.retrieval.candidates.first_trip``): ``rows`` (n,) int64 ascending, ``scores`` (n,)
    float32, and the rows' ``doc_ids`` (n,) object and ``passage_idx`` (n,) int32."""

    rows: np.ndarray
    scores: np.ndarray
    doc_ids: np.ndarray
    passage_idx: np.ndarray
    rescore_ms: float

    def result(self, rows: np.ndarray, k: int) -> Optional[PartitionResult]:
        """The top-``k`` documents among ``rows`` (sorted unique, the merge's candidates of this
        partition), as ``Partition.rank`` would give them, when every one of them was scored
        here; None when some was not (the partition must be asked to rank them)."""
        rows = np.asarray(rows, np.int64)
        pos = np.searchsorted(self.rows, rows)
        if len(rows) and (pos[-1] >= len(self.rows) or not np.array_equal(self.rows[np.minimum(pos, len(self.rows) - 1)], rows)):
            return None
        if not len(rows):
            return PartitionResult(Ranked(), 0, self.rescore_ms)
        return PartitionResult(top_documents(self.scores[pos], self.doc_ids[pos], self.passage_idx[pos], k), len(rows), self.rescore_ms)


def allowed_rows(passages: np.ndarray, first_passage: int, count: int) -> np.ndarray:
    """The rows (sorted int64) of a partition holding global passages [first_passage,
    first_passage + count) that are among ``passages`` (sorted global passage numbers, e.g.
    ``storage.catalog.Catalog.allowed_passages``): two binary searches and a subtraction."""
    passages = np.asarray(passages, np.int64)
    lo, hi = np.searchsorted(passages, [first_passage, first_passage + count])
    return passages[lo:hi] - np.int64(first_passage)


def in_allowed(rows: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """(len(rows),) bool: which ``rows`` are allowed (``allowed``: sorted unique int rows, or
    a bool mask over the partition's rows)."""
    rows = np.asarray(rows, np.int64)
    if allowed.dtype == bool:
        picked: NDArray[np.bool_] = allowed[rows]
        return picked
    if not len(allowed):
        return np.zeros(len(rows), bool)
    i = np.minimum(np.searchsorted(allowed, rows), len(allowed) - 1)
    found: NDArray[np.bool_] = allowed[i] == rows
    return found


def allowed_as_rows(allowed: np.ndarray) -> np.ndarray:
    """``allowed`` (rows or a bool mask) as sorted int64 rows."""
    return np.flatnonzero(allowed).astype(np.int64) if allowed.dtype == bool else np.asarray(allowed, np.int64)


class Partition:
    """``vectors``: the passages' stored vectors (``StoredVectors``: codes or float vectors;
    a Packed (tokens, centroids or first-m) or an (n, dim) matrix (pooled) is wrapped as
    plain float vectors); ``doc_ids`` (n,) str; ``passage_idx`` (n,) int32; ``ann``: index
    over the vectors' rows in order (row r belongs to passage ``vectors.owner(r)``); ``live``:
    (n,) bool, False for a deleted passage (a tombstone, ``storage/tombstones.py``), which no
    stage returns (None: every passage is live)."""

    def __init__(
        self,
        kind: str,
        vectors: StoredVectors | Packed | np.ndarray,
        doc_ids: Sequence[str],
        passage_idx: np.ndarray,
        ann: Optional[AnnIndex] = None,
        live: Optional[np.ndarray] = None,
    ) -> None:
        if kind not in scoring.VECTOR_KINDS:
            raise ValueError(f"unknown vector kind {kind!r}; choose one of {', '.join(scoring.VECTOR_KINDS)}")
        self.kind = kind
        get_torch()  # the exact scan's kernels run on torch: loaded with the partition, not at its first query
        self.vectors = StoredVectors.from_arrays(vectors)
        self.doc_ids = list(doc_ids)
        self.passage_idx = np.asarray(passage_idx, dtype=np.int32)
        n = len(self.vectors)
        if len(self.doc_ids) != n or len(self.passage_idx) != n:
            raise ValueError(f"{n} passages' vectors but {len(self.doc_ids)} doc ids, {len(self.passage_idx)} passage numbers")
        if ann is not None and ann.ntotal != self.vectors.n_vectors:
            raise ValueError(f"the ANN index holds {ann.ntotal} vectors, the partition {self.vectors.n_vectors}")
        self.ann = ann
        if live is not None:
            live = np.asarray(live, dtype=bool)
            if live.shape != (n,):
                raise ValueError(f"a live mask of shape {live.shape} for {n} passages")
            if live.all():
                live = None
        self.live = live

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def n_vectors(self) -> int:
        return self.vectors.n_vectors

    @cached_property
    def doc_id_array(self) -> np.ndarray:
        """(n,) object: ``doc_ids`` as an array, for taking many rows' ids at once (made on
        first use)."""
        out = np.empty(len(self.doc_ids), object)
        out[:] = self.doc_ids
        return out

    @property
    def dim(self) -> int:
        """Dimension of the decoded vectors (the space queries are scored in)."""
        return self.vectors.dim

    @property
    def exact(self) -> bool:
        return self.ann is None

    def hits(self, query_vectors: np.ndarray, k_prime: int, knobs: Optional[dict[str, Any]] = None, allowed: Optional[np.ndarray] = None) -> Hits:
        """First stage for (n_q, dim) query vectors: each one's ``k_prime`` nearest indexed
        vectors (ANN scores) mapped to their passages, minus deleted passages and passages
        outside ``allowed`` (sorted rows or a bool mask; None: all). ``knobs``: backend knobs
        (those the backend does not take, e.g. ``nprobe`` for ScaNN, are ignored) and
        ``probe_fraction`` (share of cells visited, unless the backend's own probe knob is
        given)."""
        if self.ann is None:
            raise ValueError("an exact partition has no first stage: rank every passage instead")
        k_prime = max(1, min(int(k_prime), self.ann.ntotal))
        knobs = dict(knobs or {})
        fraction = knobs.pop("probe_fraction", None)
        if fraction is not None and self.ann.probe_knob not in knobs:
            knobs[self.ann.probe_knob] = self.ann.probes(fraction)
        knobs = {k: v for k, v in knobs.items() if k in self.ann.knobs}
        ids, scores = self.ann.search(query_vectors, k_prime, **knobs)
        qi = np.repeat(np.arange(len(ids), dtype=np.int64), ids.shape[1])
        ids, scores = ids.ravel(), scores.ravel()
        ok = ids >= 0
        qi, ids, s = qi[ok], ids[ok], scores[ok]
        rows = self.vectors.owner(ids)
        if self.live is not None:  # deleted passages are no candidates
            alive = self.live[rows]
            qi, ids, rows, s = qi[alive], ids[alive], rows[alive], s[alive]
        if allowed is not None:  # a filter: passages outside it are no candidates
            keep = in_allowed(rows, allowed)
            qi, ids, rows, s = qi[keep], ids[keep], rows[keep], s[keep]
        if self.ann.coarse_scores and len(ids):
            qi, rows, s = self._rescore_hits(query_vectors, qi, ids, rows, k_prime)
        return Hits(qi, rows, s.astype(np.float32))

    def _rescore_hits(
        self, query_vectors: np.ndarray, qi: np.ndarray, ids: np.ndarray, rows: np.ndarray, k_prime: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hits scored by their cell only (codec-ivf) scored by their own vectors: each hit
        against the query vector that found it (``StoredVectors.pair_similarities``: one dot
        a hit, from the codes), each query vector's best ``k_prime`` of its own hits kept
        (IVF-flat over the codes). Linear in the hits, plus one sort of them."""
        sims = self.vectors.pair_similarities(query_vectors, qi, ids)
        order = np.lexsort((-sims, qi))  # by query vector, each one's best first
        by_query = qi[order]
        rank = np.arange(len(order)) - np.searchsorted(by_query, by_query)  # place among its query vector's hits
        keep = order[rank < k_prime]
        return qi[keep], rows[keep], sims[keep]

    def rescore(self, mode: str, query: scoring.QueryVectors, rows: Optional[np.ndarray] = None) -> np.ndarray:
        """Exact ``mode`` scores of the passages at ``rows`` (None: all, decoded a block at a
        time), (n,) float32. Only those passages' vectors are decoded."""
        scores: NDArray[np.float32] = self.rescore_batch(scoring.QueryBatch.of(mode, [query]), rows)[0]
        return scores

    def rescore_batch(self, batch: scoring.QueryBatch, rows: Optional[np.ndarray] = None) -> np.ndarray:
        """Exact scores of the passages at ``rows`` (None: all) for every query of ``batch``,
        (n_q, n) float32. With ``rows`` only their vectors are decoded (one gather); without,
        every passage is decoded once for the whole batch, a block of whole passages at a time
        into one reused buffer (``StoredVectors.scan``), each block scored with one matmul."""
        if rows is not None:
            return scoring.score_batch(batch, self.vectors.take(rows, for_scoring=True))
        out = np.empty((len(batch), len(self)), dtype=np.float32)
        for start, block in self.vectors.scan(self.vectors.scan_rows(batch.width)):
            out[:, start : start + len(block)] = scoring.score_batch(batch, block)
        return out

    def score_rows(self, mode: str, query: scoring.QueryVectors, rows: np.ndarray) -> Scored:
        """Exact ``mode`` scores of the passages at ``rows`` (sorted unique, live: e.g. from
        ``hits``), with their document ids and passage numbers."""
        t0 = time.perf_counter()
        rows = np.asarray(rows, np.int64)
        if scoring.MODE_VECTORS[scoring.check_mode(mode)] != self.kind:
            raise ValueError(f"mode {mode} scores {scoring.MODE_VECTORS[mode]} vectors; this partition holds {self.kind}")
        scores = self.rescore(mode, query, rows) if len(rows) else np.zeros(0, np.float32)
        return Scored(rows, scores, self.doc_id_array[rows], self.passage_idx[rows], (time.perf_counter() - t0) * 1e3)

    def rank(self, mode: str, query: scoring.QueryVectors, rows: Optional[np.ndarray], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """The top-``k`` documents among the passages at ``rows`` (None: every passage) that
        are live and ``allowed`` (sorted rows or a bool mask; None: all) by exact ``mode``
        scores (this partition must hold the mode's vectors); a document scores as its best
        passage. With ``rows`` None and ``allowed`` given, only allowed passages are decoded
        and scored, unless they are over a quarter of the partition: then every block is
        scored in place and the others are masked (no gathered copy of most vectors)."""
        return self._rank(mode, [query], rows, k, allowed)[0]

    def rank_batch(self, mode: str, queries: Sequence[scoring.QueryVectors], k: int, allowed: Optional[np.ndarray] = None) -> list[PartitionResult]:
        """``rank(mode, q, None, k, allowed)`` of every query (exact: every live, allowed
        passage), the passages decoded once for all of them, ``BATCH_COLUMNS`` query vectors a
        pass. The same answers as one query at a time (scores up to float rounding: the
        matmul's shape differs); each result's ``rescore_ms`` is the batch's time shared
        equally."""
        return self._rank(mode, queries, None, k, allowed)

    BATCH_COLUMNS = 512  # query vectors scored together a pass over the partition (rank_batch)

    def _rank(
        self, mode: str, queries: Sequence[scoring.QueryVectors], rows: Optional[np.ndarray], k: int, allowed: Optional[np.ndarray]
    ) -> list[PartitionResult]:
        if scoring.MODE_VECTORS[scoring.check_mode(mode)] != self.kind:
            raise ValueError(f"mode {mode} scores {scoring.MODE_VECTORS[mode]} vectors; this partition holds {self.kind}")
        t0 = time.perf_counter()
        nothing = [PartitionResult(Ranked(), 0, 0.0) for _ in queries]
        keep = None  # a mask over every passage: the allowed live ones, when scoring all and masking
        if allowed is not None:
            if rows is not None:
                rows = np.asarray(rows, np.int64)[in_allowed(rows, allowed)]
            else:
                allowed_rows_ = allowed_as_rows(allowed)
                if 4 * len(allowed_rows_) <= len(self):
                    rows = allowed_rows_
                else:  # every block scored in place, the others masked (no gathered copy of most vectors)
                    keep = np.zeros(len(self), bool)
                    keep[allowed_rows_] = True
                    if self.live is not None:
                        keep &= self.live
        if rows is not None and len(rows) == 0:
            return nothing
        if rows is not None and self.live is not None:
            rows = rows[self.live[rows]]
            if not len(rows):
                return nothing
        if rows is None and keep is None and self.live is not None:
            keep = self.live
        if rows is None:
            doc_ids, passage_idx = self.doc_ids, self.passage_idx
            n = len(self) if keep is None else int(keep.sum())
        else:
            doc_ids, passage_idx = [self.doc_ids[r] for r in rows], self.passage_idx[rows]
            n = len(rows)
        if not len(queries):
            return []
        ranked = []
        for batch in scoring.QueryBatch.of(mode, queries).split(self.BATCH_COLUMNS):
            scores = self.rescore_batch(batch, rows)  # (queries, passages)
            if keep is not None:
                scores[:, ~keep] = -np.inf  # deleted or not allowed: never returned
            for s in scores:
                r = top_documents(s, doc_ids, passage_idx, k)
                ranked.append(r.finite() if keep is not None else r)
        ms = (time.perf_counter() - t0) * 1e3 / len(queries)
        return [PartitionResult(r, n, ms) for r in ranked]
