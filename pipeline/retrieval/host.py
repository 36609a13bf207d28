"""A partition host: one passage range of an index with everything that answers a query's
trips there, and the way to call it in this process.

``PartitionHost`` holds, per served vector kind, the range's ``Partition`` (stored vectors,
ids, ANN index; every passage for a mode served exactly) and the BM25 partitions over the same
passages. Its methods are the trips of the query plan (``pipeline/retrieval/plan.py``), as
``trips.Host`` declares them: ``hits``, ``first_trip``, ``rank``, ``rank_batch``,
``bm25_rank`` and ``hybrid``. The Serve
``Partition{i}`` deployments are hosts (``pipeline/serving/partition.py``); in-process search
(``Searcher``) and an ingress holding its partitions itself call them through
``LocalPartition``. No Ray here."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Optional, Sequence

import numpy as np

from mvr.operators.ann.base import set_build_threads
from mvr.operators.encode.compress import l2_normalize
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.retrieval.bm25 import BM25Partition
from mvr.operators.retrieval.candidates import first_trip
from mvr.operators.retrieval.fusion import ScoredPassages, side_by_side_batch
from mvr.operators.retrieval.partition import Hits, Partition, PartitionResult, Scored
from mvr.operators.retrieval.ranking import Ranked
from mvr.operators.retrieval.scoring import MODE_VECTORS, QueryVectors, first_stage_vectors
from mvr.pipeline.retrieval.layout import ShardSpec
from mvr.pipeline.retrieval.trips import TRIP_METHODS, Call
from mvr.storage.bm25_partitions import load_bm25_partition
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import Manifest
from mvr.storage.partitions import exact_partition, load_partition

# The trips a host answers (``PartitionHost.many`` runs any of them).


class PartitionHost:
    """One passage range of the index: for each served vector kind, its exact vectors, document
    ids and ANN index (or every passage, for a mode served exactly), and the BM25 partitions
    over its passages (``shard``: what ``plan_layout`` gave this range). Loaded from the index
    (``threads``: FAISS's OpenMP threads in this process; ``warm_up``: one small search a kind
    so the first query does not pay lazy set-up, ~2 s); ``of_partitions`` wraps partitions
    already in memory."""

    def __init__(self, index_url: str, shard: ShardSpec, manifest: Manifest, threads: Optional[int] = None, warm_up: bool = True) -> None:
        t0 = time.perf_counter()
        if threads:
            set_build_threads(threads)  # FAISS OpenMP threads (BLAS follows OMP_NUM_THREADS)
        codecs = load_codecs(index_url, manifest.codecs)
        parts = {
            kind: exact_partition(index_url, manifest, kind, codecs) if entry is None else load_partition(index_url, kind, entry, manifest, codecs)
            for kind, entry in shard.kinds.items()
        }
        bm25 = {i: load_bm25_partition(index_url, e, tombstones=manifest.tombstones) for i, e in shard.bm25.items()}
        self._set(shard.index, parts, bm25, shard.bm25_own, shard.sparse, shard.first)
        self.load_s = time.perf_counter() - t0
        if warm_up:
            self._warm_up()

    @classmethod
    def of_partitions(
        cls,
        shard: int,
        parts: dict[str, Partition],
        first: Optional[dict[str, int]] = None,
        bm25: Optional[dict[int, BM25Partition]] = None,
        bm25_own: Optional[int] = None,
        sparse: Optional[dict[str, list[int]]] = None,
    ) -> "PartitionHost":
        """A host over partitions already loaded: ``parts`` {kind: Partition}, ``first`` {kind:
        global number of its first passage} (default 0), the BM25 partitions it holds, the one
        answering ``bm25`` and, per kind, those over its passages (``hybrid``)."""
        host = cls.__new__(cls)
        host._set(shard, dict(parts), dict(bm25 or {}), bm25_own, dict(sparse or {}), {k: (first or {}).get(k, 0) for k in parts})
        host.load_s = 0.0
        return host

    def _set(
        self,
        shard: int,
        parts: dict[str, Partition],
        bm25: dict[int, BM25Partition],
        bm25_own: Optional[int],
        sparse: dict[str, list[int]],
        first: dict[str, int],
    ) -> None:
        self.shard, self.parts, self.bm25 = shard, parts, bm25
        self.bm25_own, self.sparse, self.first = bm25_own, sparse, first

    def _warm_up(self) -> None:
        rng = np.random.default_rng(0)
        for mode, kind in MODE_VECTORS.items():
            part = self.parts.get(kind)
            if part is None or not len(part):
                continue
            tokens = l2_normalize(rng.standard_normal((4, part.dim)).astype(np.float32))
            query = EncodedQuery("warm up", tokens, tokens[0])
            rows = None if part.exact else np.unique(part.hits(first_stage_vectors(mode, query), 8).rows)
            part.rank(mode, query, rows, 10)
        for bm25 in self.bm25.values():
            bm25.rank(list(bm25.index.vocab_dict)[:2], 10)

    def _part(self, kind: str) -> Partition:
        part = self.parts.get(kind)
        if part is None:
            raise ValueError(f"partition {self.shard} holds no {kind} vectors (it has {', '.join(self.parts)})")
        return part

    def hits(self, kind: str, query_vectors: np.ndarray, k_prime: int, knobs: dict[str, Any], allowed: Optional[np.ndarray] = None) -> Hits:
        """First trip: each of the (n_q, dim) query vectors' ``k_prime`` nearest indexed vectors
        (among the ``allowed`` rows of a filter; None: all)."""
        return self._part(kind).hits(query_vectors, k_prime, knobs, allowed=allowed)

    def first_trip(
        self, mode: str, kind: str, query: QueryVectors, k_prime: int, knobs: dict[str, Any], share: tuple[int, int], allowed: Optional[np.ndarray] = None
    ) -> tuple[Hits, Scored]:
        """``hits`` and, in the same trip, the exact scores of this partition's likely share of
        the candidates (``operators.retrieval.candidates.first_trip``), so most queries need no ``rank``."""
        return first_trip(self._part(kind), mode, query, k_prime, knobs, share, allowed)

    def rank(self, mode: str, kind: str, query: QueryVectors, rows: Optional[np.ndarray], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """Second trip: exact ``mode`` scores of the candidate ``rows`` (None: every passage)
        that are ``allowed`` (None: all), this partition's top-``k`` documents."""
        return self._part(kind).rank(mode, query, rows, k, allowed=allowed)

    def rank_batch(self, mode: str, kind: str, queries: Sequence[QueryVectors], k: int, allowed: Optional[np.ndarray] = None) -> list[PartitionResult]:
        """Exact search of several queries at once: every ``allowed`` passage (None: all)
        scored for each of them, the vectors decoded once (``Partition.rank_batch``)."""
        if allowed is not None and not len(allowed):
            return [PartitionResult(Ranked(), 0, 0.0) for _ in queries]
        return self._part(kind).rank_batch(mode, queries, k, allowed=allowed)

    def bm25_rank(self, terms: list[str], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """Mode bm25, one trip: this host's BM25 partition's top-``k`` documents (among its
        ``allowed`` rows; None: all)."""
        if self.bm25_own is None:
            raise ValueError(f"partition {self.shard} answers no bm25 queries")
        return self.bm25[self.bm25_own].rank(terms, k, allowed=allowed)

    def hybrid(
        self,
        mode: str,
        kind: str,
        queries: Sequence[QueryVectors],
        terms: Sequence[list[str]],
        rows: Sequence[Optional[np.ndarray]],
        n_best: int,
        allowed: Optional[np.ndarray] = None,
    ) -> list[ScoredPassages]:
        """Mode hybrid, second trip, for one query or several: each query's part of the union
        in this slice (``operators.retrieval.fusion.side_by_side_batch``): its dense n-best
        among its candidate ``rows`` (None: every passage) and its BM25 n-best (``terms``: its
        analysed text), each with both exact scores, both among the ``allowed`` rows. The
        queries scoring every passage share one pass over the vectors."""
        part = self._part(kind)
        if kind not in self.sparse:
            raise ValueError(f"partition {self.shard} holds no BM25 side for its {kind} vectors")
        if len(terms) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(terms)} term lists")
        bm25 = [self.bm25[i] for i in self.sparse[kind]]

        def sparse(q: int) -> np.ndarray:  # (len(part),) BM25 scores of query q, made when its chunk is scored
            return np.concatenate([b.scores(terms[q]) for b in bm25])

        return side_by_side_batch(part, sparse, self.first[kind], mode, queries, rows, n_best, allowed=allowed)

    def many(self, calls: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Several trips in one call (the ingress coalesces the calls of one loop turn,
        ``pipeline/serving/fanout.py``): each (method, args) answered as (True, result) or
        (False, the error it raised)."""
        return run_many(self, calls)

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "shard": self.shard,
            "load_s": round(self.load_s, 3),
            "kinds": {k: {"passages": len(p), "vectors": p.n_vectors, "exact": p.exact} for k, p in self.parts.items()},
            "bm25": {str(i): len(p) for i, p in self.bm25.items()},
        }


def run_many(target: Any, calls: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
    """Each (method, args) of ``calls`` run on ``target``, answered in order as (True, result)
    or (False, the exception it raised): one call fails alone, the others of the trip answer.
    ``hybrid`` calls over the same vectors and allowed rows (e.g. the queries of a
    ``/search/batch``) are run as one batch (``PartitionHost.hybrid``: on the exact path one
    pass over the vectors for them all); when that batch fails, each of its calls is run alone."""
    out: list[Optional[tuple[bool, Any]]] = [None] * len(calls)
    for group in _hybrid_groups(calls):
        batch = [calls[c][1] for c in group]
        mode, kind, _, _, _, n_best, *allowed = batch[0]
        try:
            parts = target.hybrid(
                mode, kind, [q for a in batch for q in a[2]], [t for a in batch for t in a[3]], [r for a in batch for r in a[4]], n_best, *allowed
            )
        except Exception:
            continue
        start = 0
        for c, a in zip(group, batch):
            out[c], start = (True, parts[start : start + len(a[2])]), start + len(a[2])
    for c, (method, args) in enumerate(calls):
        if out[c] is not None:
            continue
        if method not in TRIP_METHODS:
            out[c] = (False, ValueError(f"{method} is not a partition trip"))
            continue
        try:
            out[c] = (True, getattr(target, method)(*args))
        except Exception as e:
            out[c] = (False, e)
    return out  # type: ignore[return-value]


def _hybrid_groups(calls: list[tuple[str, tuple[Any, ...]]]) -> list[list[int]]:
    """Indices of the ``hybrid`` calls that can run as one batch, in groups of two or more:
    the same mode, vector kind, n-best and allowed rows (equal arrays, or none)."""
    groups: list[list[int]] = []
    for c, (method, args) in enumerate(calls):
        if method != "hybrid" or not isinstance(args, tuple) or len(args) not in (6, 7):
            continue
        for g in groups:
            if _joins(calls[g[0]][1], args):
                g.append(c)
                break
        else:
            groups.append([c])
    return [g for g in groups if len(g) > 1]


def _joins(first: tuple[Any, ...], args: tuple[Any, ...]) -> bool:
    """Whether the ``hybrid`` call ``args`` can join the batch of ``first``: the same mode,
    kind and n-best, and the same allowed rows (both None, or equal arrays); otherwise it runs
    alone."""
    a, b = first[6] if len(first) > 6 else None, args[6] if len(args) > 6 else None
    if (first[0], first[1], first[5]) != (args[0], args[1], args[5]):
        return False
    if a is b:
        return True
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


class LocalPartition:
    """A host called in this process: ``call(method, *args)`` runs the trip at once, in the
    caller's thread, and returns its result (``run``) or a done future (``call``, for an
    asyncio caller: the Serve ingress holding its partitions itself)."""

    def __init__(self, host: PartitionHost) -> None:
        self.host = host
        self.trips = 0
        self.calls = 0

    def run(self, method: str, *args: Any) -> Any:
        """The trip's result; what it raised, raised."""
        ((ok, value),) = run_many(self.host, [(method, args)])
        self.trips += 1
        self.calls += 1
        if not ok:
            raise value
        return value

    def call(self, method: str, *args: Any, work: float = 1.0) -> asyncio.Future[Any]:
        """``run(method, *args)`` as a done future (``work``, the call's ``Call.work``, needs no
        timeout here: the call runs in place)."""
        future = asyncio.get_running_loop().create_future()
        try:
            future.set_result(self.run(method, *args))
        except Exception as e:
            future.set_exception(e)
        return future

    def info(self) -> asyncio.Future[dict[str, Any]]:
        """The host's ``info()``, marked as held by the ingress, as a done future."""
        future = asyncio.get_running_loop().create_future()
        future.set_result({**self.host.info(), "placement": "ingress"})
        return future


def local_trip(hosts: Sequence[LocalPartition], calls: dict[int, Call[Any]]) -> dict[int, Any]:
    """One trip of a query plan to hosts in this process (``plan.run_trips``'s ``trip``):
    {host: its call's result}, each host's call run in turn."""
    return {i: hosts[i].run(c.method, *c.args) for i, c in calls.items()}
