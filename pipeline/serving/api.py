"""The ``Searcher`` ingress deployment (FastAPI through Serve): HTTP (and handle) requests
in, the query plan (``pipeline/retrieval/plan.py``) run over the partition deployments (or the
partitions held here), answers out. Only HTTP is adapted here: the guard
(``pipeline/serving/guard.py``), the wire models (``pipeline/serving/wire.py``) and the error
mapping (``pipeline/serving/errors.py``) are in files of their own, and every search step is
the plan's, the same as in-process search.

A query: validate (the request model) → encode (batched: here, ``BatchedQueryEncoder``, or in
the ``QueryEncoder`` deployment with ``encoder.placement: deployment``) → the plan's trips to
the partitions, each sent through a handle (the trips of concurrent queries to one partition
go as one call, ``pipeline.serving.fanout``) or, with ``partition.placement: ingress``, run in
place → titles and text from the catalog (``pipeline.retrieval.local_search.response_body``).

A partition that fails, or hangs (answers none of the calls waiting on it for their work ×
``partition_timeout_s``, a call's work being 1 a query at its mode's defaults:
``pipeline.serving.fanout``), is left out of that query: the answer comes from the others, with ``"degraded": true`` and
``partitions_answered``. Serve restarts the dead replica meanwhile.

Nothing a client sends gets a 5xx: ``RequestGuard`` (header size, token, body limit for every
transfer encoding, body deadline) runs before parsing, the request models refuse what the plan cannot take (422 naming
the field), error answers echo at most an excerpt of the input, and a query the encoder fails
on fails alone (``QueryNotEncodable``). A request's ``filter`` and ``doc_ids`` are checked for
syntax by the request model (422), then against the catalog's columns and turned into the
allowed passages here (422 for an unknown column or a type mismatch; the last few kept)."""

import asyncio
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Awaitable, Iterator, Optional

from fastapi import FastAPI, HTTPException
from ray import serve

from mvr.operators.encode.query import EncodedQuery
from mvr.operators.retrieval.filters import FilterError
from mvr.operators.retrieval.scoring import MODES, SEARCH_MODES
from mvr.pipeline.config import ServeConfig
from mvr.pipeline.retrieval.host import LocalPartition, PartitionHost
from mvr.pipeline.retrieval.layout import ServingLayout
from mvr.pipeline.retrieval.local_search import response_body
from mvr.pipeline.retrieval.plan import Calls, NoPartitionAnswered, QueryPlan, run_trips_async
from mvr.pipeline.retrieval.request import Restriction, RestrictionCache
from mvr.pipeline.serving import errors
from mvr.pipeline.serving.errors import GUARD_REFUSALS, MESSAGE_CHARS, QueryRefused, excerpt, responses
from mvr.pipeline.serving.fanout import CoalescedHandle
from mvr.pipeline.serving.guard import RequestGuard, setting
from mvr.pipeline.serving.query_encoder import BatchedQueryEncoder, QueryNotEncodable
from mvr.pipeline.serving.switchboard import Follower, served_layout
from mvr.pipeline.serving.wire import BatchRequest, BatchResponse, Health, Reload, SearchRequest, SearchResponse
from mvr.storage.catalog import Catalog
from mvr.storage.manifest import Manifest, read_manifest

log = logging.getLogger("ray.serve")

DRAIN_S = 120.0  # how long a version switched from in place may finish its requests before its catalog closes


class ServiceApp(FastAPI):
    """The ingress's FastAPI app, whose OpenAPI document is the contract of the service as
    configured (read from the state ``SearchService`` sets, as the guard reads it)."""

    def openapi(self) -> dict[str, Any]:
        """FastAPI's document with what this service takes: the modes it serves (and the dense
        modes its hybrid can fuse), a batch's ``maxItems`` (``max_batch_queries``) and, when it
        has a token, the bearer scheme every operation needs; built once."""
        if self.openapi_schema is None:
            schema = super().openapi()
            models = schema["components"]["schemas"]
            models["BatchRequest"]["properties"]["queries"]["maxItems"] = setting(self.state, "max_batch_queries")
            modes, dense = getattr(self.state, "modes", None), getattr(self.state, "hybrid_dense", None)
            for request in ("SearchRequest", "BatchRequest"):
                fields = models[request]["properties"]
                if modes is not None:
                    fields["mode"]["enum"] = modes
                if dense is not None:  # a knob of a served hybrid, or none (null) without one
                    fields["dense"]["anyOf"] = [{**fields["dense"]["anyOf"][0], "enum": dense}, {"type": "null"}] if dense else [{"type": "null"}]
            if getattr(self.state, "token_sha256", None) is not None:
                schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
        assert self.openapi_schema is not None  # set by FastAPI.openapi()
        return self.openapi_schema


# What every search route may answer besides 200: the guard's refusals, an unreadable body
# (400), a refused request (422), no encoder or partition answering (503).
SEARCH_ERRORS = {
    **GUARD_REFUSALS,
    400: "the body is not readable JSON: not UTF-8, nested too deep, or an integer of over 4,300 digits",
    422: "a refused request, each problem named (a field out of its bounds, a mode or filter column this service lacks, a query the encoder cannot take)",
    503: "the query encoder did not answer within `encode_timeout_s`, or no partition answered (each failed or took over `partition_timeout_s`)",
}

app = ServiceApp(
    title="mvr search",
    description=(
        "Multi-vector retrieval: ColBERT MaxSim, pseudo-query centroids, ME-BERT first-m, pooled; BM25; "
        "hybrid (a dense mode fused with BM25: weighted by λ or reciprocal rank fusion). "
        "When the service was started with a token, every request needs `Authorization: Bearer <token>`."
    ),
)
app.add_middleware(RequestGuard)
errors.install(app)


def replica_counts(deployments: list[tuple[str, Optional[str]]]) -> dict[str, dict[str, int]]:
    """Replica states (RUNNING, STARTING, …: count) of each (app, deployment) (None: every
    deployment of the app), from Serve's status."""
    try:
        apps = serve.status().applications
    except Exception:  # the controller is unreachable: report nothing rather than fail /stats
        return {}
    out: dict[str, dict[str, int]] = {}
    for app_name, name in deployments:
        status = apps.get(app_name)
        for dep_name, dep in status.deployments.items() if status else []:
            if name is None or dep_name == name:
                out[dep_name] = {str(getattr(s, "value", s)): int(n) for s, n in dep.replica_states.items()}
    return out


@dataclass
class Served:
    """One index version as an ingress replica serves it: its layout, the app of its partition
    deployments (None: held here), the way to each partition, its catalog and totals, its
    query plan, the filters resolved against its catalog, and the requests running on it."""

    layout: ServingLayout
    index_app: Optional[str]
    fanout: list[CoalescedHandle | LocalPartition]
    catalog: Catalog
    counts: dict[str, int]
    plan: QueryPlan
    restrictions: RestrictionCache
    running: int = 0


@serve.deployment(name="Searcher", max_surge_percent=100)
@serve.ingress(app)
class SearchService:
    """The ingress: HTTP (and handle) requests in, fan-out over the partition deployments of
    ``layout`` in app ``index_app`` (or over the partitions held here), the encoder in
    ``encoder_app`` (or here). It follows the service's ``Switchboard``
    (``pipeline/serving/switchboard.py``): a new index version is switched to in place."""

    def __init__(
        self,
        layout: ServingLayout,
        config: ServeConfig,
        encoder_app: Optional[str],
        index_app: Optional[str],
        token_sha256: Optional[str],
        manifest: Optional[Manifest] = None,
        encoder_threads: Optional[int] = None,
        reloader: Optional[tuple[str, str]] = None,
        fixed: Optional[str] = None,
    ) -> None:
        """``encoder_app``: the app of the ``QueryEncoder`` deployment to call, or None to encode
        here with the model of ``manifest`` (``encoder_threads`` torch threads). ``index_app``:
        the app of the ``Partition{i}`` deployments, or None to hold the partitions here.
        ``reloader``: the (name, namespace) of the actor that switches versions
        (``POST /admin/reload``), handed over by whoever deploys this. ``fixed``: the digest of
        what a version switch keeps (``app.ingress_digest``); with it, this replica follows the
        service's switchboard, and starts on its target when that is for a replica like it."""
        self.config = config
        self.encoder_app, self.reloader = encoder_app, reloader
        if manifest is None and (encoder_app is None or index_app is None):
            raise ValueError("the ingress encodes the queries or holds the partitions itself only given the index's manifest")
        self.follower = Follower(config.app_name, fixed, serve.get_replica_context().replica_id.unique_id) if fixed else None
        target = self.follower.current() if self.follower else None
        if target is not None and target["version"] != layout.version:  # a replica started after switches in place
            manifest = read_manifest(layout.index_url, target["version"])
            layout, index_app = served_layout(layout.index_url, manifest, config), target["index_app"]
        if encoder_app is None:
            assert manifest is not None  # refused above without one
            e = config.encoder
            self.local_encoder: Optional[BatchedQueryEncoder] = BatchedQueryEncoder(
                layout.index_url, manifest, encoder_threads, e.max_batch_size, e.batch_wait_ms / 1e3
            )
            self.encoder = None
        else:
            self.local_encoder = None
            self.encoder = serve.get_deployment_handle("QueryEncoder", encoder_app)
        self._lock = threading.Lock()  # the swap of ``served`` against a request taking it
        self.served = self._build(layout, index_app, manifest)
        self.switches = 0  # versions switched to in place
        app.state.token_sha256 = token_sha256
        app.state.max_body_bytes = config.max_body_bytes
        app.state.max_batch_queries = config.max_batch_queries
        app.state.max_header_bytes, app.state.body_timeout_s = config.max_header_bytes, config.body_timeout_s
        self._publish()
        self.started = time.time()
        self.one_trip = {"queries": 0, "asked_again": 0}  # queries answered by the one-trip path, and those needing a second trip
        if self.follower is not None:
            self.follower.follow(layout.version, self._switch)

    def _build(self, layout: ServingLayout, index_app: Optional[str], manifest: Optional[Manifest]) -> Served:
        """The state of the version ``layout`` describes, its partitions in ``index_app`` (None:
        loaded here from ``manifest``)."""
        fanout: list[CoalescedHandle | LocalPartition]  # the trips of a query go through these
        if index_app is None:
            assert manifest is not None  # refused in __init__ without one
            # on this process's threads: a FAISS thread count set here would be the encoder's
            # too (one OpenMP runtime a process; measured, encoding took twice as long)
            fanout = [LocalPartition(PartitionHost(layout.index_url, s, manifest)) for s in layout.shards]
        else:
            fanout = [CoalescedHandle(serve.get_deployment_handle(f"Partition{s.index}", index_app), self.config.partition_timeout_s) for s in layout.shards]
        catalog = Catalog(layout.index_url, layout.catalog)
        # one trip (hits and the likely candidates' scores together) only behind a network hop
        plan = QueryPlan(layout, self.config.search, self.config.one_trip_max_partitions if index_app is not None else 0)
        return Served(layout, index_app, fanout, catalog, catalog.totals(), plan, RestrictionCache())

    def _publish(self) -> None:
        """The served version's contract: its modes (``ServiceApp.openapi``)."""
        app.state.modes = [m for m in SEARCH_MODES if self.takes(m, {})]
        app.state.hybrid_dense = [m for m in MODES if self.takes("hybrid", {"dense": m})]
        app.openapi_schema = None

    def _switch(self, target: dict[str, Any]) -> None:
        """Serve ``target``'s version (on the follower's thread): built beside the served one,
        swapped in, then the old one's requests drained (at most ``DRAIN_S``) and its catalog
        closed."""
        index_url = self.served.layout.index_url
        manifest = read_manifest(index_url, target["version"])
        new = self._build(served_layout(index_url, manifest, self.config), target["index_app"], manifest)
        with self._lock:
            old, self.served = self.served, new
        self._publish()
        self.switches += 1
        deadline = time.monotonic() + DRAIN_S
        while old.running and time.monotonic() < deadline:
            time.sleep(0.05)
        old.catalog.close()
        log.info("switched in place from index version %s to %s", old.layout.version, new.layout.version)

    @contextmanager
    def _serving(self) -> Iterator[Served]:
        """The served version, for one request: kept (and its catalog open) until it ends."""
        with self._lock:
            served = self.served
            served.running += 1
        try:
            yield served
        finally:
            served.running -= 1

    def takes(self, mode: str, knobs: dict[str, Any]) -> bool:
        """Whether this service answers ``mode`` with ``knobs`` (the plan's ``settings``)."""
        try:
            self.served.plan.settings(mode, knobs)
        except ValueError:
            return False
        return True

    async def restriction(self, served: Served, filter: Optional[str], doc_ids: Optional[list[str]]) -> Optional[Restriction]:
        """The passages a request's filter allows (None without one), from the catalog of the
        served version; 422 naming the problem for an invalid filter."""
        if filter is None and doc_ids is None:
            return None
        try:
            return await asyncio.to_thread(served.restrictions.resolve, served.catalog, filter, doc_ids)
        except FilterError as e:
            raise HTTPException(422, excerpt(str(e), MESSAGE_CHARS)) from None

    async def _trip(self, calls: dict[int, Any], timeout: Optional[float]) -> dict[int, Any]:
        """Await handle calls side by side; those failing or late (``timeout`` s; None: the
        handle times its calls out itself) are cancelled and left out."""

        async def one(i: int, response: Any) -> tuple[int, Any]:
            try:
                return i, await (asyncio.wait_for(response, timeout) if timeout is not None else response)
            except Exception as e:  # replica died, timed out, or failed: leave it out
                response.cancel()
                log.warning("partition %s left out of a query: %s", i, type(e).__name__ if isinstance(e, asyncio.TimeoutError) else e)
                return i, None

        done = await asyncio.gather(*(one(i, r) for i, r in calls.items()))
        return {i: r for i, r in done if r is not None}

    async def _plan_trip(self, served: Served, calls: Calls) -> dict[int, Any]:
        """One trip of the plan: each call through its partition's handle, side by side (the
        handle times it out: ``CoalescedHandle``)."""
        return await self._trip({i: served.fanout[i].call(c.method, *c.args, work=c.work) for i, c in calls.items()}, None)

    async def search_one(
        self, served: Served, query: str, k: int, mode: str, knobs: dict[str, Any], restriction: Optional[Restriction] = None
    ) -> dict[str, Any]:
        """One query on the ``served`` version, validated already except for the
        service-specific checks; among the passages ``restriction`` allows (None: all)."""
        try:
            settings = served.plan.settings(mode, knobs)
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        t0 = time.perf_counter()
        encoded: EncodedQuery | QueryNotEncodable
        if mode == "bm25":
            encoded = EncodedQuery.text_only(query)
        else:
            try:
                call: Awaitable[EncodedQuery | QueryNotEncodable]
                if self.local_encoder is not None:
                    call = self.local_encoder.encode(query)
                else:
                    assert self.encoder is not None  # no local encoder: the QueryEncoder deployment's handle
                    call = self.encoder.encode.remote(query)
                encoded = await asyncio.wait_for(call, self.config.encode_timeout_s)
            except Exception as e:
                raise HTTPException(503, f"the query encoder did not answer: {type(e).__name__}") from None
            if isinstance(encoded, QueryNotEncodable):  # this text alone: its batch-mates were encoded
                raise QueryRefused(422, str(encoded))
        encode_ms = (time.perf_counter() - t0) * 1e3
        try:
            result = await run_trips_async(
                served.plan.search(encoded, k, mode, knobs, restriction, encode_ms, settings=settings), lambda calls: self._plan_trip(served, calls)
            )
        except NoPartitionAnswered:
            raise HTTPException(503, f"no partition answered: each failed or took over {self.config.partition_timeout_s} s") from None
        if result.asked_again is not None:
            self.one_trip["queries"] += 1
            self.one_trip["asked_again"] += result.asked_again
        out = response_body(result, served.catalog, served.layout.version)
        out["allowed_passages"] = result.allowed_passages
        return out

    @app.post("/search", response_model=SearchResponse, responses=responses(SEARCH_ERRORS))
    async def search(self, body: SearchRequest) -> dict[str, Any]:
        """Top-k documents for one query (only documents passing ``filter`` and among
        ``doc_ids`` when given: docs/filters.md)."""
        with self._serving() as served:
            restriction = await self.restriction(served, body.filter, body.doc_ids)
            return await self.search_one(served, body.query, body.k, body.mode, body.knobs(), restriction)

    @app.post(
        "/search/batch",
        response_model=BatchResponse,
        responses=responses({**SEARCH_ERRORS, 413: "the body is over `max_body_bytes`, or more queries than `max_batch_queries`"}),
    )
    async def search_batch(self, body: BatchRequest) -> dict[str, Any]:
        """Many queries at once (encoded in batches, searched side by side), answers in order."""
        if len(body.queries) > self.config.max_batch_queries:
            raise HTTPException(413, f"{len(body.queries)} queries; at most {self.config.max_batch_queries} in one batch")
        t0 = time.perf_counter()
        knobs = body.knobs()
        with self._serving() as served:  # one version for the whole batch
            restriction = await self.restriction(served, body.filter, body.doc_ids)  # one filter for the whole batch

            async def one(i: int, query: str) -> dict[str, Any]:
                try:
                    return await self.search_one(served, query, body.k, body.mode, knobs, restriction)
                except QueryRefused as e:  # this query's fault, not the request's: name it
                    raise HTTPException(e.status_code, f"queries[{i}]: {e.detail}") from None

            bodies = await asyncio.gather(*(one(i, q) for i, q in enumerate(body.queries)))
        return {"responses": bodies, "timings_ms": {"total": round((time.perf_counter() - t0) * 1e3, 3)}}

    async def _ping(self, served: Served) -> dict[int, Any]:
        """Each partition's ``info`` (keys 0..P-1) and the encoder's (key -1), those answering."""
        calls = {i: f.info() for i, f in enumerate(served.fanout)}
        if self.encoder is not None:
            calls[-1] = self.encoder.info.remote()
        got = await self._trip(calls, self.config.partition_timeout_s)
        if self.local_encoder is not None:
            got[-1] = {**self.local_encoder.info(), "placement": "ingress"}
        return got

    @app.post(
        "/admin/reload",
        status_code=202,
        response_model=Reload,
        responses=responses(
            {**GUARD_REFUSALS, 403: "the service runs without a bearer token", 409: "the service has no reloader (deployed without mvr serve)"}
        ),
    )
    async def reload(self) -> dict[str, Any]:
        """Switch to the index's latest committed version, without refusing a query: the new
        version starts beside this one, then the ingress switches to it (poll ``GET /health``
        for its ``version``). Needs the service's bearer token."""
        if app.state.token_sha256 is None:
            raise HTTPException(
                403,
                "POST /admin/reload is allowed only when the service runs with a bearer token (mvr serve --token); "
                "or set reload_poll_s to follow the index's versions by polling",
            )
        import ray

        serving = self.served.layout
        latest = await asyncio.to_thread(read_manifest, serving.index_url)
        try:
            if self.reloader is None:
                raise ValueError("no reloader")
            reloader = ray.get_actor(self.reloader[0], namespace=self.reloader[1])
        except ValueError:
            raise HTTPException(409, "this service has no reloader (it was deployed without mvr serve); run mvr serve INDEX again to switch") from None
        reloader.reload.remote()  # not awaited: the switch waits for this replica's own switch
        newer = latest is not None and latest.version > serving.version
        return {"serving": serving.version, "latest": latest.version if latest else None, "status": "switching" if newer else "up to date"}

    @app.get("/health", response_model=Health, responses=responses({**GUARD_REFUSALS, 503: "the encoder or a partition does not answer (named)"}))
    async def health(self) -> dict[str, Any]:
        """200 when the encoder and every partition answer; 503 naming what does not."""
        served = self.served
        got = await self._ping(served)
        missing = ["QueryEncoder"] * (-1 not in got) + [f"Partition{i}" for i in range(len(served.fanout)) if i not in got]
        if missing:
            raise HTTPException(503, f"not answering: {', '.join(missing)}")
        return {"status": "ok", "version": served.layout.version, "partitions": len(served.fanout)}

    @app.get("/stats", responses=responses(GUARD_REFUSALS))
    async def stats(self) -> dict[str, Any]:
        """Index version, passages, documents, partitions, modes, replicas per deployment."""
        served = self.served
        got = await self._ping(served)
        return {
            "index": served.layout.index_url,
            "version": served.layout.version,
            "passages": served.counts["passages"],
            "documents": served.counts["documents"],
            "partitions": len(served.fanout),
            "modes": {m: {"path": s.path, "partitions": len(s.shards)} for m, s in served.layout.modes.items()},
            "replicas": replica_counts([(a, d) for a, d in ((self.encoder_app, "QueryEncoder"), (served.index_app, None)) if a]),
            "partitions_answering": sorted(i for i in got if i >= 0),
            "encoder": got.get(-1),
            "one_trip": dict(self.one_trip),
            "fanout": {"trips": sum(f.trips for f in served.fanout), "calls": sum(f.calls for f in served.fanout)},
            "uptime_s": round(time.time() - self.started, 1),
            "switches_in_place": self.switches,
            "auth": app.state.token_sha256 is not None,
            "config": self.config.model_dump(mode="json", by_alias=True),
        }
