"""The query plan: the steps of one search over an index's partition hosts, written once for
in-process search (``Searcher``) and the Serve ingress (``pipeline/serving/api.py``) alike.

For a query and mode (its settings checked by ``pipeline/retrieval/request.py``):

1. **candidates** (ANN path): every host of the mode's vector kind returns each query vector's
   k' nearest indexed vectors mapped to its passages (``hits``), or, with few hosts behind a
   network hop, the same and the exact scores of its likely share of the candidates in one
   trip (``first_trip``); the hits are merged as if one index held every vector
   (``operators.retrieval.candidates.CandidateRounds``), k' growing while too few passages were hit;
2. **rescore** where the vectors are: each host ranks its candidates exactly (``rank``; not
   asked again when the first trip scored them all), or for ``hybrid`` returns its part of the
   union with both exact scores (``hybrid``; for several queries in one trip, its vectors
   decoded once for all of them), or for ``bm25`` its top documents (``bm25_rank``); an exact
   mode scores every passage (several queries: ``rank_batch``, in one pass);
3. **merge** the hosts' ranked documents (or fuse the hybrid's union), with per-stage timings.

A metadata filter (``Restriction``) gives each host its allowed rows on every trip; a filter
allowing few passages is scored exactly, and an ANN search that found fewer than k documents
while some allowed passage was not rescored is redone exactly over the allowed passages.

The plan reaches its hosts only through trips: ``await Trip({i: call(Host.method, *args)})``
asks host ``i`` to run ``method(*args)`` (``trips.py``: the hosts' interface, typed) and
gives back ``{i: result}`` for the hosts that answered (one that failed or did not answer in
time is missing, and the answer comes from the others, marked degraded). The plan is an
``async def`` that awaits nothing but ``Trip``s, so a
driver steps it and decides how a trip is run: ``run_trips`` runs each one at once in this
thread (in process: a failing host raises), ``run_trips_async`` awaits each one (the ingress:
deployment handles side by side, with a timeout). No HTTP and no Ray here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Coroutine, Generator, Generic, Optional, Sequence, TypeVar, Union

import numpy as np
from numpy.typing import NDArray

from mvr.operators.encode.query import EncodedQuery
from mvr.operators.retrieval.bm25 import Analyzer
from mvr.operators.retrieval.candidates import CandidateRounds, FirstStage, local_share
from mvr.operators.retrieval.fusion import HybridParams, ScoredPassages, fuse
from mvr.operators.retrieval.partition import Hits, PartitionResult, Scored
from mvr.operators.retrieval.ranking import Ranked, merge
from mvr.operators.retrieval.scoring import MODES, first_stage_vectors
from mvr.pipeline.config import BM25Config, SearchConfig
from mvr.pipeline.retrieval.layout import ServedMode, ServingLayout
from mvr.pipeline.retrieval.request import Restriction, filtered_exact, request_settings
from mvr.pipeline.retrieval.trips import Call, Host, call

Calls = dict[int, Call[Any]]  # a trip's calls: {host: its call}
Rows = Optional[NDArray[np.int64]]  # a host's rows (candidates or allowed); None: all of them
T = TypeVar("T")
R = TypeVar("R")


class Trip(Generic[R]):
    """One trip of a plan: ``calls`` {host: a call answering an ``R``}; awaiting it yields it
    to the driver, which answers {host: its ``R``} for the hosts that answered."""

    def __init__(self, calls: dict[int, Call[R]]) -> None:
        self.calls = calls

    def __await__(self) -> Generator["Trip[Any]", dict[int, Any], dict[int, R]]:
        if not self.calls:
            return {}
        return (yield self)


class NoPartitionAnswered(RuntimeError):
    """Every host of the mode failed or timed out: there is nothing to answer with."""


@dataclass
class SearchResult:
    """One query's answer: ``ranked`` documents best first; ``path`` "ann", "exact" or
    "bm25"; ``candidates``: passages rescored over all hosts; ``timings_ms``: encode,
    candidates, rescore, merge and total; ``asked_again``: None when the one-trip path was not
    taken, else whether some host had to be asked to ``rank`` after it."""

    query: str
    mode: str
    ranked: Ranked
    path: str
    candidates: int
    partitions_answered: int
    partitions: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    allowed_passages: Optional[int] = None  # with a filter: the passages it allows
    asked_again: Optional[bool] = None

    def hits(self) -> list[tuple[str, float]]:
        return [(d, float(s)) for d, s in zip(self.ranked.doc_ids, self.ranked.scores)]


def merge_partition_results(
    query: str, mode: str, path: str, k: int, results: Sequence[PartitionResult], partitions: int, timings: dict[str, float]
) -> SearchResult:
    """Merge the hosts' ranked documents into one answer. ``timings`` (ms, wall clock) brings
    encode, candidates and rescore; merge and total (their sum) are added."""
    t0 = time.perf_counter()
    ranked = merge([r.ranked for r in results], k)
    t = {name: timings.get(name, 0.0) for name in ("encode", "candidates", "rescore")}
    t["merge"] = (time.perf_counter() - t0) * 1e3
    t["total"] = sum(t.values())
    return SearchResult(query, mode, ranked, path, sum(r.candidates for r in results), len(results), partitions, {n: round(v, 3) for n, v in t.items()})


NOTHING = PartitionResult(Ranked(), 0, 0.0)


@dataclass(frozen=True)
class SparseSearch:
    """How ``bm25`` is searched: one trip, each host's BM25 top documents."""

    served: ServedMode


@dataclass(frozen=True)
class DenseSearch:
    """How a dense ``mode`` is searched: candidates (its ANN first stage ``fs``) or every
    passage (exact path), then exact scores where the vectors are."""

    mode: str
    served: ServedMode
    fs: FirstStage


@dataclass(frozen=True)
class HybridSearch:
    """How ``hybrid`` is searched: its dense mode's candidates (``served``, ``fs``) joined
    with BM25's top documents on each host, both scored exactly, fused by ``params``."""

    served: ServedMode
    fs: FirstStage
    params: HybridParams


Settings = Union[SparseSearch, DenseSearch, HybridSearch]  # a request's strategy (QueryPlan.settings)


@dataclass
class _Candidates:
    """The first stage's outcome: candidate rows per host (None: every passage), the hosts
    still answering, each host's allowed rows, the path, the first trip's exact scores and
    the work a query's call carries (``QueryPlan.work``)."""

    rows: dict[int, Rows]
    alive: list[int]
    allowed: dict[int, Rows]
    path: str
    scored: dict[int, Scored] = field(default_factory=dict)
    work: float = 1.0


class QueryPlan:
    """The search steps (module docstring) over the hosts of ``layout`` with ``config``'s
    defaults. ``one_trip_max_partitions``: with at most this many hosts of a mode, the first
    trip also rescores each host's likely candidates (worth it behind a network hop; 0, the
    in-process setting: always two trips)."""

    def __init__(self, layout: ServingLayout, config: SearchConfig, one_trip_max_partitions: int = 0) -> None:
        self.layout, self.config, self.one_trip_max_partitions = layout, config, one_trip_max_partitions
        bm25 = BM25Config.model_validate(layout.bm25_config) if layout.bm25_config else None
        self.analyzer = Analyzer(bm25.stopwords, bm25.stemmer) if bm25 else None
        self._defaults: dict[str, Optional[FirstStage]] = {}  # each dense mode's first stage at the config's defaults (``work``)

    def served(self, mode: str) -> ServedMode:
        """How ``mode`` is answered here; ValueError naming the modes served."""
        served = self.layout.modes.get(mode)
        if served is None:
            raise ValueError(f"mode {mode!r} is not served here (served: {', '.join(self.layout.modes)})")
        return served

    def settings(self, mode: str, knobs: dict[str, Any]) -> Settings:
        """A request's settings (``request_settings``) as the strategy of its mode's kind;
        ValueError when the mode, or a hybrid's dense mode with its BM25 side, is not served."""
        fs, hybrid = request_settings(self.config, mode, knobs)
        served = self.served(mode)
        if fs is None:
            return SparseSearch(served)
        if hybrid is None:
            return DenseSearch(mode, served, fs)
        dense = self.layout.modes.get(hybrid.dense)
        if dense is None or not all(dense.kind in self.layout.shards[i].sparse for i in dense.shards):
            raise ValueError(f"hybrid's dense mode {hybrid.dense!r} is not served with a BM25 side here")
        return HybridSearch(dense, fs, hybrid)

    def terms(self, text: str) -> list[str]:
        """The BM25 terms of a query text."""
        return self.terms_of([text])[0]

    def terms_of(self, texts: Sequence[str]) -> list[list[str]]:
        """The BM25 terms of each query text (one analyzer call for them all)."""
        if self.analyzer is None:
            raise ValueError("this index has no BM25 partitions served here")
        return self.analyzer(list(texts))

    def host_range(self, served: ServedMode, i: int) -> tuple[int, int]:
        """(first passage, passages) of host ``i``'s slice of ``served``."""
        spec = self.layout.shards[i]
        if served.mode == "bm25" and spec.bm25_own is not None:  # (every host of bm25 owns a BM25 partition)
            e: Optional[dict[str, Any]] = spec.bm25[spec.bm25_own]
        else:
            e = spec.kinds.get(served.kind)
        if e is None:  # the exact slice over every passage
            return 0, served.passages
        return int(e["first_passage"]), int(e["passages"])

    def work(self, mode: str, k_prime: int, cap: int) -> float:
        """A dense query's work at k′ ``k_prime`` and candidate cap ``cap``, in queries of
        ``mode`` at its configured defaults: how many times those defaults it asks for (≥ 1).
        The service allows a partition ``partition_timeout_s`` for each (``Call.work``)."""
        if mode not in self._defaults:
            self._defaults[mode] = request_settings(self.config, mode, {})[0]
        base = self._defaults[mode]
        if base is None:
            return 1.0
        return max(1.0, k_prime / max(1, base.k_prime), cap / max(1, base.candidate_cap))

    def _allowed(self, served: ServedMode, restriction: Optional[Restriction]) -> dict[int, Rows]:
        if restriction is None:
            return {i: None for i in served.shards}
        return {i: restriction.rows(*self.host_range(served, i)) for i in served.shards}

    async def _candidates(
        self, mode: str, served: ServedMode, query: EncodedQuery, need: int, fs: FirstStage, restriction: Optional[Restriction], one_trip: bool
    ) -> _Candidates:
        """Step 1 for dense ``mode`` (candidates for ``need`` passages): rows per host."""
        allowed = self._allowed(served, restriction)
        alive = list(served.shards)
        out = _Candidates({i: None for i in alive}, alive, allowed, served.path)
        if served.path == "exact":
            return out
        if restriction is not None and filtered_exact(len(restriction), fs, need):
            out.path = "exact"  # few allowed passages: score them all
            return out
        qv = first_stage_vectors(mode, query)
        rounds = CandidateRounds(fs, need, served.passages, served.vectors, len(restriction) if restriction is not None else None)
        out.work = self.work(mode, rounds.k_prime, rounds.cap)
        if one_trip:
            share = {i: local_share(rounds.k_prime, rounds.cap, self.host_range(served, i)[1] / max(1, served.passages)) for i in alive}
            first = await Trip(
                {i: call(Host.first_trip, mode, served.kind, query, rounds.k_prime, fs.ann, share[i], allowed[i]).weighing(out.work) for i in alive}
            )
            out.scored = {i: g[1] for i, g in first.items()}
            got = {i: g[0] for i, g in first.items()}
        else:
            got = await Trip({i: call(Host.hits, served.kind, qv, rounds.k_prime, fs.ann, allowed[i]).weighing(out.work) for i in alive})
        while True:
            alive = [i for i in alive if i in got]
            rows = rounds.offer([got.get(i, Hits.empty()) for i in served.shards])
            if rows is not None:
                out.rows, out.alive = dict(zip(served.shards, rows)), alive
                return out
            out.scored = {}  # k' grew: the candidates are not those the first trip rescored for
            out.work = self.work(mode, rounds.k_prime, rounds.cap)
            got = await Trip({i: call(Host.hits, served.kind, qv, rounds.k_prime, fs.ann, allowed[i]).weighing(out.work) for i in alive})

    async def hybrid_parts_batch(
        self, queries: Sequence[EncodedQuery], params: HybridParams, fs: FirstStage, restriction: Optional[Restriction] = None
    ) -> tuple[list[list[ScoredPassages]], list[str], int]:
        """For each query, each answering host's part of its hybrid union
        (``operators.retrieval.fusion.side_by_side_batch``; ``fuse`` them for any fusion
        setting); each query's dense path; the hosts asked. The dense candidates are found
        query by query (ANN path; none on the exact path), then one trip asks each host for
        the parts of every query it answered for: its vectors decoded once for all of them."""
        served = self.layout.modes[params.dense]
        found = [await self._candidates(params.dense, served, q, params.n_best, fs, restriction, one_trip=False) for q in queries]
        terms = self.terms_of([q.text for q in queries])
        allowed = found[0].allowed if found else self._allowed(served, restriction)  # the same for every query
        mine = {i: [j for j, c in enumerate(found) if i in c.alive] for i in served.shards}  # host -> the queries it answers for
        got = await Trip(
            {
                i: call(
                    Host.hybrid,
                    params.dense,
                    served.kind,
                    [queries[j] for j in js],
                    [terms[j] for j in js],
                    [found[j].rows[i] for j in js],
                    params.n_best,
                    allowed[i],
                ).weighing(sum(found[j].work for j in js))
                for i, js in mine.items()
                if js
            }
        )
        at = {i: {j: n for n, j in enumerate(js)} for i, js in mine.items()}
        parts = [[got[i][at[i][j]] for i in c.alive if i in got] for j, c in enumerate(found)]
        return parts, [c.path for c in found], len(served.shards)

    async def _search_hybrid(
        self, queries: Sequence[EncodedQuery], k: int, params: HybridParams, fs: FirstStage, restriction: Optional[Restriction], encode_ms: Sequence[float]
    ) -> list[SearchResult]:
        """Hybrid answers of ``queries`` (``hybrid_parts_batch``, then ``fuse`` a query);
        each result's candidates time (the unions' trips) is the batch's shared equally."""
        t1 = time.perf_counter()
        parts, paths, n_hosts = await self.hybrid_parts_batch(queries, params, fs, restriction)
        if any(not p for p in parts):
            raise NoPartitionAnswered("no partition answered")
        candidates_ms = (time.perf_counter() - t1) * 1e3 / max(1, len(queries))
        out = []
        for query, got, path, e_ms in zip(queries, parts, paths, encode_ms):
            t2 = time.perf_counter()
            ranked, n = fuse(got, params, k)
            timings = {"encode": e_ms, "candidates": candidates_ms, "rescore": (time.perf_counter() - t2) * 1e3}
            result = merge_partition_results(query.text, "hybrid", path, k, [PartitionResult(ranked, n, 0.0)], n_hosts, timings)
            result.partitions_answered, result.allowed_passages = len(got), len(restriction) if restriction is not None else None
            out.append(result)
        return out

    def _answer(
        self,
        query: str,
        mode: str,
        path: str,
        k: int,
        served: ServedMode,
        hosts: Sequence[int],
        asked: Calls,
        got: dict[int, PartitionResult],
        timings: dict[str, float],
        restriction: Optional[Restriction],
    ) -> SearchResult:
        """One query's answer from the ``hosts`` that answered, or were not ``asked`` (nothing
        to rank there); ``NoPartitionAnswered`` when that is none of them."""
        results = [got[i] if i in got else NOTHING for i in hosts if i in got or i not in asked]
        if not results:
            raise NoPartitionAnswered("no partition answered")
        result = merge_partition_results(query, mode, path, k, results, len(served.shards), timings)
        result.allowed_passages = len(restriction) if restriction is not None else None
        return result

    async def _search_sparse(self, query: EncodedQuery, k: int, s: SparseSearch, restriction: Optional[Restriction], encode_ms: float) -> SearchResult:
        """``bm25``: one trip, each host's top documents for the query's terms."""
        t1 = time.perf_counter()
        allowed = self._allowed(s.served, restriction)
        t2 = time.perf_counter()
        terms = self.terms(query.text)
        asked = {i: call(Host.bm25_rank, terms, k, allowed[i]) for i in s.served.shards if _some(allowed[i])}
        got = await Trip(asked)
        timings = {"encode": encode_ms, "candidates": (t2 - t1) * 1e3, "rescore": (time.perf_counter() - t2) * 1e3}
        return self._answer(query.text, "bm25", "bm25", k, s.served, s.served.shards, asked, got, timings, restriction)

    async def _search_dense(self, query: EncodedQuery, k: int, s: DenseSearch, restriction: Optional[Restriction], encode_ms: float) -> SearchResult:
        """A dense mode: candidates (or every passage), then each host's exact top ``k``; a
        filtered ANN search that found fewer than ``k`` documents is redone exactly."""
        mode, served = s.mode, s.served
        t1 = time.perf_counter()
        one_trip = 0 < len(served.shards) <= self.one_trip_max_partitions
        c = await self._candidates(mode, served, query, k, s.fs, restriction, one_trip)
        t2 = time.perf_counter()
        rows, alive, allowed, path = c.rows, c.alive, c.allowed, c.path

        def worth_asking(i: int) -> bool:  # no candidate or no allowed row: nothing to rank there
            return _some(rows[i]) and _some(allowed[i])

        ready: dict[int, PartitionResult] = {}  # ranked from the first trip's scores: no second trip
        for i in alive:
            candidates = rows[i]
            if i in c.scored and worth_asking(i) and candidates is not None and (r := c.scored[i].result(candidates, k)) is not None:
                ready[i] = r
        asked = {i: call(Host.rank, mode, served.kind, query, rows[i], k, allowed[i]).weighing(c.work) for i in alive if worth_asking(i) and i not in ready}
        second = bool(asked)
        got = {**await Trip(asked), **ready}
        if restriction is not None and path == "ann":
            if len(merge([g.ranked for g in got.values()], k)) < k and sum(g.candidates for g in got.values()) < len(restriction):
                # fewer than k documents among the candidates: score the allowed passages exactly
                asked = {i: call(Host.rank, mode, served.kind, query, None, k, allowed[i]).weighing(c.work) for i in alive if _some(allowed[i])}
                got, path = await Trip(asked), "exact"
        timings = {"encode": encode_ms, "candidates": (t2 - t1) * 1e3, "rescore": (time.perf_counter() - t2) * 1e3}
        result = self._answer(query.text, mode, path, k, served, alive, asked, got, timings, restriction)
        if one_trip and path == "ann":
            result.asked_again = second
        return result

    async def search(
        self,
        query: EncodedQuery,
        k: int,
        mode: str,
        knobs: Optional[dict[str, Any]] = None,
        restriction: Optional[Restriction] = None,
        encode_ms: float = 0.0,
        first_stage: Optional[FirstStage] = None,
        settings: Optional[Settings] = None,
    ) -> SearchResult:
        """One query, already encoded (``query.text`` alone for ``bm25``), among the passages
        ``restriction`` allows (None: all); ``knobs`` override the config's settings, and
        ``first_stage`` (a caller's own, e.g. a benchmark's) replaces the dense mode's;
        ``settings``: ``settings(mode, knobs)``, when the caller has them already.
        ValueError for a request this plan cannot answer, ``NoPartitionAnswered`` when no host
        did."""
        s = settings or self.settings(mode, knobs or {})
        if isinstance(s, SparseSearch):
            return await self._search_sparse(query, k, s, restriction, encode_ms)
        if first_stage is not None:
            s = replace(s, fs=first_stage)
        if isinstance(s, HybridSearch):  # a batch of one
            return (await self._search_hybrid([query], k, s.params, s.fs, restriction, [encode_ms]))[0]
        return await self._search_dense(query, k, s, restriction, encode_ms)

    async def search_exact(
        self,
        queries: Sequence[EncodedQuery],
        k: int,
        mode: str,
        knobs: Optional[dict[str, Any]] = None,
        restriction: Optional[Restriction] = None,
        encode_ms: Sequence[float] = (),
        settings: Optional[Settings] = None,
    ) -> Optional[list[SearchResult]]:
        """Several queries of a dense ``mode`` answered exactly in one pass over each host's
        vectors (``rank_batch``: each block decoded once for every query), when the mode is
        answered exactly (exact path, or a filter allowing few passages); None otherwise (the
        caller searches them one at a time). Each result's rescore time is the batch's shared
        equally."""
        if mode not in MODES or not queries:
            return None
        s = settings or self.settings(mode, knobs or {})
        if not isinstance(s, DenseSearch):
            return None
        served = s.served
        if not (served.path == "exact" or (restriction is not None and filtered_exact(len(restriction), s.fs, k))):
            return None
        allowed = self._allowed(served, restriction)
        t0 = time.perf_counter()
        asked = {i: call(Host.rank_batch, mode, served.kind, list(queries), k, allowed[i]).weighing(len(queries)) for i in served.shards if _some(allowed[i])}
        got = await Trip(asked)
        if asked and not got:
            raise NoPartitionAnswered("no partition answered")
        rescore = (time.perf_counter() - t0) * 1e3 / len(queries)
        ms = list(encode_ms) or [0.0] * len(queries)
        timings = [{"encode": e_ms, "candidates": 0.0, "rescore": rescore} for e_ms in ms]
        return [
            self._answer(query.text, mode, "exact", k, served, served.shards, asked, {i: g[q] for i, g in got.items()}, t, restriction)
            for q, (query, t) in enumerate(zip(queries, timings))
        ]

    async def search_many(
        self,
        queries: Sequence[EncodedQuery],
        k: int,
        mode: str,
        knobs: Optional[dict[str, Any]] = None,
        restriction: Optional[Restriction] = None,
        encode_ms: Sequence[float] = (),
        settings: Optional[Settings] = None,
    ) -> list[SearchResult]:
        """``search`` of each query, the same results, batched where the plan can: a dense
        mode answered exactly in one pass over each host's vectors (``search_exact``), a
        hybrid's unions in one trip (``hybrid_parts_batch``: on the exact path one pass over
        the vectors for every query); other modes one query at a time. ``encode_ms``: one
        figure a query (default 0)."""
        ms = list(encode_ms) or [0.0] * len(queries)
        if len(ms) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(ms)} encode times")
        s = settings or self.settings(mode, knobs or {})
        exact = await self.search_exact(queries, k, mode, knobs, restriction, ms, s)
        if exact is not None:
            return exact
        if isinstance(s, HybridSearch) and queries:
            return await self._search_hybrid(queries, k, s.params, s.fs, restriction, ms)
        return [await self.search(q, k, mode, knobs, restriction, e, settings=s) for q, e in zip(queries, ms)]


def _some(rows: Rows) -> bool:
    """Whether a host has rows to work on: all of them (None) or some."""
    return rows is None or len(rows) > 0


def run_trips(plan: Coroutine[Trip[Any], Any, T], trip: Callable[[Calls], dict[int, Any]]) -> T:
    """Drive ``plan`` (a ``QueryPlan`` coroutine) to its result, each trip it awaits answered
    by ``trip(calls)`` in this thread (what ``trip`` raises is raised here)."""
    answer: Optional[dict[int, Any]] = None
    try:
        while True:
            asked = plan.send(answer)
            answer = trip(asked.calls)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()


async def run_trips_async(plan: Coroutine[Trip[Any], Any, T], trip: Callable[[Calls], Awaitable[dict[int, Any]]]) -> T:
    """``run_trips`` for a caller with an event loop: each trip awaited (``trip`` runs its
    calls side by side and answers those that answered in time)."""
    answer: Optional[dict[int, Any]] = None
    try:
        while True:
            asked = plan.send(answer)
            answer = await trip(asked.calls)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()
