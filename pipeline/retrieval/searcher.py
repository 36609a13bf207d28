"""In-process search over an index: the query plan (``pipeline/retrieval/plan.py``) run in
this process over partition hosts held here, the same plan the Serve ingress runs over its
deployments, so in-process and HTTP answers are the same.

A dense mode is answered by its ANN partitions when the manifest lists them (``mvr
build-ann``), and otherwise, or with ``SearchConfig.exact``, by brute force over every passage
(the exact reference); ``SearchResult.path`` says which. ``bm25`` is answered by the BM25
partitions (exact: their scores are the collection's); ``hybrid`` by a dense mode's
partitions and the BM25 partitions over the same passages (``operators/retrieval/fusion.py``).

A metadata filter (``filter`` expression and / or ``doc_ids``, docs/filters.md) becomes the
sorted global numbers of the passages it allows (the catalog, ``Restriction``), each host's
share of them its allowed rows on every trip."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import numpy as np

from mvr.operators.codecs import Codec
from mvr.operators.encode.compress import projection_matrix
from mvr.operators.encode.query import EncodedQuery, QueryEncoder
from mvr.operators.encode.tokenizer import PassageTokenizer
from mvr.operators.retrieval.candidates import FirstStage
from mvr.operators.retrieval.fusion import HybridParams, ScoredPassages
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.scoring import MODE_VECTORS, MODES, check_search_mode
from mvr.pipeline.config import IndexConfig, SearchConfig
from mvr.pipeline.retrieval.host import LocalPartition, PartitionHost, local_trip
from mvr.pipeline.retrieval.layout import ServedMode, ServingLayout, ShardSpec, plan_layout
from mvr.pipeline.retrieval.local_search import response_body
from mvr.pipeline.retrieval.plan import Calls, QueryPlan, SearchResult, Settings, run_trips
from mvr.pipeline.retrieval.request import Restriction, RestrictionCache, validate_request
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import Manifest, load_manifest

if TYPE_CHECKING:
    from mvr.operators.encode.encoder import TokenEncoder  # torch: imported when a searcher loads its model
    from mvr.storage.catalog import Catalog  # duckdb: imported on a filter's first use


def index_query_encoder(index_url: str, manifest: Manifest, encoder: Optional[TokenEncoder] = None) -> QueryEncoder:
    """The query encoder of the index at ``index_url``: its model, conventions, projection and
    codec (the codec file checked against the manifest)."""
    return load_query_encoder(manifest.config, encoder, load_codecs(index_url, manifest.codecs))


def load_query_encoder(index_config: dict[str, Any], encoder: Optional[TokenEncoder] = None, codecs: Optional[Mapping[str, Codec]] = None) -> QueryEncoder:
    """The query encoder an index was built for (same model, conventions and projection), from
    the index configuration its manifest stores (``Manifest.config``), projecting into the
    spaces of the ``codecs``' decoded vectors when given (``index_query_encoder``)."""
    from mvr.operators.encode.encoder import TokenEncoder

    config = IndexConfig.of_index(index_config)
    encoder = encoder or TokenEncoder(config.model.name, config.model.device, config.model.dtype)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    c = config.compress
    projection = projection_matrix(encoder.dim, c.projection_dim, c.projection_seed) if c.projection_dim else None
    return QueryEncoder(encoder, tokenizer, projection, c.pooling, codecs)


class Searcher:
    """In-process search over an index: its partition hosts held in this process.

    ``modes``: the modes to load (default: the four dense ones; ``bm25`` and ``hybrid`` need
    the index's BM25 partitions, ``hybrid`` also loads its dense mode); ``config``: first-stage
    and fusion knobs, or exact. ``paths`` tells, per mode, how it is answered ("ann",
    "exact", "bm25", or the dense path of a hybrid)."""

    def __init__(self, index_url: str, modes: Sequence[str] = MODES, config: Optional[SearchConfig] = None, encoder: Optional[TokenEncoder] = None) -> None:
        for m in modes:
            check_search_mode(m)
        self.index_url = index_url
        self.config = config or SearchConfig()
        self.manifest = load_manifest(index_url)
        self.layout = plan_layout(index_url, self.manifest, modes, exact=self.config.exact, hybrid_dense=self.config.hybrid.dense)
        self.hosts = [LocalPartition(PartitionHost(index_url, spec, self.manifest, warm_up=False)) for spec in self.layout.shards]
        self.trip: Callable[[Calls], dict[int, Any]] = partial(local_trip, self.hosts)  # the plan's trips, run here
        self.plan = QueryPlan(self.layout, self.config)
        self.paths = {m: s.path for m, s in self.layout.modes.items()}
        self.query_encoder = load_query_encoder(self.manifest.config, encoder, load_codecs(index_url, self.manifest.codecs))
        self._catalog: Optional[Catalog] = None
        self._restrictions = RestrictionCache()

    @property
    def partitions(self) -> dict[str, list[Partition]]:
        """{dense mode: its partitions, in order}."""
        return {m: [self.hosts[i].host.parts[s.kind] for i in s.shards] for m, s in self.layout.modes.items() if m in MODES}

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.layout.modes)

    def partition_count(self, mode: str) -> int:
        """Partitions answering ``mode`` (a hybrid's: its dense mode's)."""
        return len(self.plan.served(mode).shards)

    @property
    def catalog(self) -> Catalog:
        """The catalog of the version searched (opened on first use: filters)."""
        if self._catalog is None:
            from mvr.storage.catalog import Catalog

            self._catalog = Catalog(self.index_url, self.manifest.catalog)
        return self._catalog

    def restriction(self, filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> Optional[Restriction]:
        """``resolve_restriction`` over this version's catalog, the last few remembered."""
        if filter is None and doc_ids is None:
            return None
        return self._restrictions.resolve(self.catalog, filter, doc_ids)

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def __enter__(self) -> "Searcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, query: str, k: int, mode: str) -> None:
        validate_request(query, k, mode)
        if mode not in self.layout.modes:
            raise ValueError(f"mode {mode!r} is not loaded by this searcher (it has {', '.join(self.layout.modes)})")

    def encode(self, texts: Sequence[str]) -> list[EncodedQuery]:
        return self.query_encoder(list(texts))

    def hybrid_passages(
        self, queries: Sequence[EncodedQuery], params: HybridParams, fs: FirstStage, restriction: Optional[Restriction] = None
    ) -> list[list[ScoredPassages]]:
        """For each query, each partition's part of its hybrid union
        (``QueryPlan.hybrid_parts_batch``: one trip for all of them); ``fuse`` them for any
        fusion setting."""
        return run_trips(self.plan.hybrid_parts_batch(queries, params, fs, restriction), self.trip)[0]

    def search_encoded(
        self, query: EncodedQuery, k: int = 10, mode: str = "maxsim", encode_ms: float = 0.0, restriction: Optional[Restriction] = None, **knobs: Any
    ) -> SearchResult:
        """Answer an already encoded query (knobs: ``request.KNOBS``, overriding the config's;
        for ``hybrid`` also ``request.HYBRID_KNOBS``), among the passages ``restriction``
        allows (None: all; ``Searcher.restriction`` makes one from a filter)."""
        self.check(query.text, k, mode)
        settings = self.plan.settings(mode, knobs)
        return run_trips(self.plan.search(query, k, mode, knobs, restriction, encode_ms, settings=settings), self.trip)

    def search_encoded_batch(
        self,
        queries: Sequence[EncodedQuery],
        k: int = 10,
        mode: str = "maxsim",
        encode_ms: float | Sequence[float] = 0.0,
        restriction: Optional[Restriction] = None,
        **knobs: Any,
    ) -> list[SearchResult]:
        """``search_encoded`` of each query (``encode_ms``: one figure for all, or one a
        query), the same results (``QueryPlan.search_many``). When the mode is answered
        exactly, every partition scores all the queries in one pass over its vectors; a
        hybrid's unions are taken in one trip (on the exact path, one pass over the vectors);
        other modes are answered one at a time."""
        ms = encode_times(encode_ms, len(queries))
        for q in queries:
            self.check(q.text, k, mode)
        settings = self.plan.settings(mode, knobs)
        return search_batch(self.plan, self.trip, queries, k, mode, knobs, restriction, ms, settings)

    def search(
        self, queries: Sequence[str], k: int = 10, mode: str = "maxsim", filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None, **knobs: Any
    ) -> list[SearchResult]:
        """Answer each query (encoded one at a time, as a service would: each result's
        encode time is its own), searched as ``search_encoded_batch`` does: a dense mode
        answered exactly, or a hybrid, for all of them at once (their search timings are the
        batch's shared equally), other modes one at a time (per-query latencies). ``bm25``
        needs no encoding. ``filter`` (an expression, docs/filters.md) and ``doc_ids``: only
        documents passing both are returned (``FilterError``, a ValueError, for an invalid
        one, before any query is encoded)."""
        for q in queries:
            self.check(q, k, mode)
        settings = self.plan.settings(mode, knobs)  # before any work
        restriction = self.restriction(filter, doc_ids)
        encoded, encode_ms = [], []
        for q in queries:
            t0 = time.perf_counter()
            (e,) = [EncodedQuery.text_only(q)] if mode == "bm25" else self.encode([q])
            encoded.append(e)
            encode_ms.append((time.perf_counter() - t0) * 1e3)
        return search_batch(self.plan, self.trip, encoded, k, mode, knobs, restriction, encode_ms, settings)

    def answer(
        self,
        query: str,
        k: int = 10,
        mode: str = "maxsim",
        filter: Optional[str] = None,
        doc_ids: Optional[Sequence[str]] = None,
        catalog: Optional[Catalog] = None,
        **knobs: Any,
    ) -> dict[str, Any]:
        """One query, answered as the service answers ``POST /search``: its documents with
        their titles and text from the catalog (``local_search.response_body``); ValueError
        for a bad request. ``catalog``: read titles and text from this one (default: this
        searcher's; a thread of its own needs a connection of its own)."""
        (result,) = self.search([query], k, mode, filter=filter, doc_ids=doc_ids, **knobs)
        return response_body(result, catalog or self.catalog, self.manifest.version)


class PartitionSearch:
    """The query plan over partitions already in memory, all of one vector kind and in
    passage order (partition j's passages follow partition j − 1's): what ``Searcher`` runs
    over an index's hosts, for callers that hold ``Partition`` objects (benchmarks, tests).
    Filters are ``Restriction``s over the passages numbered that way from 0."""

    def __init__(self, partitions: Sequence[Partition], config: Optional[SearchConfig] = None) -> None:
        kinds = {p.kind for p in partitions}
        if len(kinds) != 1:
            raise ValueError(f"partitions of one vector kind, in passage order; got {sorted(kinds)}")
        (kind,) = kinds
        firsts = np.concatenate([[0], np.cumsum([len(p) for p in partitions])]).tolist()
        exact = all(p.exact for p in partitions)
        specs = [
            ShardSpec(i, {kind: None if exact else {"first_passage": firsts[i], "passages": len(p)}}, first={kind: firsts[i]}) for i, p in enumerate(partitions)
        ]
        modes = {
            m: ServedMode(m, kind, "exact" if exact else "ann", tuple(range(len(partitions))), int(firsts[-1]), sum(p.n_vectors for p in partitions))
            for m, k in MODE_VECTORS.items()
            if k == kind
        }
        self.plan = QueryPlan(ServingLayout("<in memory>", 0, modes, specs), config or SearchConfig())
        self.hosts = [LocalPartition(PartitionHost.of_partitions(i, {kind: p}, {kind: firsts[i]})) for i, p in enumerate(partitions)]
        self.trip: Callable[[Calls], dict[int, Any]] = partial(local_trip, self.hosts)

    def search(
        self,
        query: EncodedQuery,
        k: int,
        mode: str,
        knobs: Optional[dict[str, Any]] = None,
        restriction: Optional[Restriction] = None,
        first_stage: Optional[FirstStage] = None,
    ) -> SearchResult:
        """``QueryPlan.search`` over these partitions."""
        return run_trips(self.plan.search(query, k, mode, knobs, restriction, first_stage=first_stage), self.trip)

    def search_batch(
        self,
        queries: Sequence[EncodedQuery],
        k: int,
        mode: str,
        knobs: Optional[dict[str, Any]] = None,
        restriction: Optional[Restriction] = None,
        encode_ms: float | Sequence[float] = 0.0,
    ) -> list[SearchResult]:
        """``search`` of each query (``search_batch``: exact modes in one pass)."""
        return search_batch(self.plan, self.trip, queries, k, mode, knobs or {}, restriction, encode_times(encode_ms, len(queries)))


def encode_times(encode_ms: float | Sequence[float], n: int) -> list[float]:
    """One encode time (ms) a query: ``encode_ms`` is one figure for all or one a query."""
    ms = [float(encode_ms)] * n if np.ndim(encode_ms) == 0 else [float(m) for m in encode_ms]  # type: ignore[arg-type, union-attr]
    if len(ms) != n:
        raise ValueError(f"{n} queries but {len(ms)} encode times")
    return ms


def search_batch(
    plan: QueryPlan,
    trip: Callable[[Calls], dict[int, Any]],
    queries: Sequence[EncodedQuery],
    k: int,
    mode: str,
    knobs: dict[str, Any],
    restriction: Optional[Restriction],
    encode_ms: list[float],
    settings: Optional[Settings] = None,
) -> list[SearchResult]:
    """Several encoded queries over ``plan``'s hosts reached by ``trip``
    (``QueryPlan.search_many``: in one pass over each host's vectors when the mode is answered
    exactly, a hybrid's unions in one trip, otherwise one at a time); the same results either
    way."""
    return run_trips(plan.search_many(queries, k, mode, knobs, restriction, encode_ms, settings), trip)
