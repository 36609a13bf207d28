"""The HTTP API and the ``Searcher`` ingress deployment (FastAPI through Serve).

A query: validate → encode (batched: here, ``BatchedQueryEncoder``, or in the ``QueryEncoder``
deployment with ``encoder.placement: deployment``) → first trip to every partition of the
mode at once (``first_trip``: hits, and each partition's likely share of the candidates
rescored; ``hits`` alone over more than ``one_trip_max_partitions`` partitions), rounds of
``operators.candidates.CandidateRounds`` → each partition's top-k from the first trip's
scores, or a second trip (``rank``) to a partition whose candidates were not all scored →
merge (``pipeline.retrieval.searcher``) → titles and text from the catalog
(``pipeline.retrieval.local_search.response_body``). The same answers as the in-process search core,
with the partitions behind handles (the trips of concurrent queries to one partition go as
one call, ``pipeline.serving.fanout``) or, with ``partition.placement: ingress``, held here and
called in place. ``bm25`` skips the encoder and
takes one trip (``bm25_rank``); ``hybrid`` takes ``hybrid`` as its second trip and fuses the
partitions' unions here (``operators.fusion.fuse``).

A partition that fails or does not answer a trip within ``partition_timeout_s`` is left out
of that query: the answer comes from the others, with ``"degraded": true`` and
``partitions_answered``. Serve restarts the dead replica meanwhile.

Nothing a client sends gets a 5xx: ``RequestGuard`` (token, body limit for every transfer
encoding) runs before parsing, the request models refuse what the search core cannot take
(422 naming the field), error answers echo at most an excerpt of the input, and a query the
encoder fails on fails alone (``QueryNotEncodable``).

A request's ``filter`` (an expression, docs/filters.md) and ``doc_ids`` are checked for
syntax by the request model (422), then against the catalog's columns and turned into the
allowed passages here (422 for an unknown column or a type mismatch; the last few kept);
each partition gets its share as allowed rows on both trips (``pipeline.retrieval.searcher.
filtered_search`` is the same logic in process)."""

import asyncio
from collections import OrderedDict
import hashlib
import hmac
import json
import logging
import math
import time
from typing import Any, Optional

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator
import ray
from ray import serve

from operators.bm25 import Analyzer
from operators.candidates import CandidateRounds, local_share
from operators.filter_expr import MAX_DOC_IDS, FilterError, parse as parse_filter
from operators.fusion import fuse
from operators.partition import Hits, PartitionResult, Scored
from operators.ranking import Ranked, merge
from operators.scoring import SEARCH_MODES, first_stage_vectors
from pipeline.config import BM25Config
from pipeline.config import ServeConfig
from pipeline.retrieval.local_search import response_body
from pipeline.retrieval.searcher import MAX_K, MAX_QUERY_CHARS, Restriction, filtered_exact, merge_partition_results, request_settings, resolve_restriction, validate_request
from pipeline.serving.query_encoder import BatchedQueryEncoder, QueryNotEncodable
from pipeline.serving.fanout import CoalescedHandle, LocalPartition
from pipeline.serving.layout import ServingLayout
from pipeline.serving.partition import PartitionHost
from storage.catalog import Catalog
from storage.manifest import Manifest

log = logging.getLogger("ray.serve")


def token_digest(token: str) -> str:
    """What the service keeps of its bearer token (the token itself never enters Serve's state)."""
    return hashlib.sha256(token.encode()).hexdigest()


app = FastAPI(
    title="mvr search",
    description=(
        "Multi-vector retrieval: ColBERT MaxSim, pseudo-query centroids, ME-BERT first-m, pooled; BM25; "
        "hybrid (a dense mode fused with BM25: weighted by λ or reciprocal rank fusion). "
        "When the service was started with a token, every request needs `Authorization: Bearer <token>`."
    ),
)


class RequestGuard:
    """Pure ASGI middleware, before any parsing: 401 without the service's bearer token (when
    it has one); 413 for a body over ``max_body_bytes``, whether declared (Content-Length) or
    streamed (``Transfer-Encoding: chunked``: reading stops at the first byte over the limit).
    A body within the limit is read here and handed on whole."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        # the app being served (set by FastAPI before the middleware runs): in a Serve replica
        # that may be a copy of this module's ``app``, holding the state ``SearchService`` set
        state = scope["app"].state if "app" in scope else app.state
        expected = getattr(state, "token_sha256", None)
        if expected is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(token.strip()), expected):
                detail = "missing or wrong bearer token (Authorization: Bearer <token>)"
                await JSONResponse({"detail": detail}, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        limit = getattr(state, "max_body_bytes", None) or ServeConfig.model_fields["max_body_bytes"].default
        declared = headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, receive, send, f"request body of {declared} bytes; at most {limit} are accepted")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            if message["type"] != "http.request":
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, f"request body over {limit} bytes; at most {limit} are accepted")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
        # Connection: close: the rest of the body is not read, so the connection cannot be reused.
        await JSONResponse({"detail": detail}, 413, {"Connection": "close"})(scope, receive, send)


app.add_middleware(RequestGuard)

EXCERPT_CHARS = 100  # of any client-sent value echoed in an error
MESSAGE_CHARS = 300  # of an error message
ERRORS_SHOWN = 10  # validation errors listed in one answer


def excerpt(value: Any, chars: int = EXCERPT_CHARS) -> Any:
    """A client-sent value as an error may echo it: numbers and short strings as they are;
    anything else as text of at most ``chars`` characters ending with "…". Never NaN or a
    lone surrogate (neither can be written as JSON text)."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and abs(value) < 10**15):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        text = value[: chars * 4].decode("utf-8", "replace")
    elif isinstance(value, float):
        text = str(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except Exception:  # nested too deep, or not JSON at all
            text = f"<{type(value).__name__}>"
    text = text if len(text) <= chars else text[: chars - 1] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def short_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's errors as a 422 lists them, each with its input cut to an excerpt (never
    the whole body), at most ``ERRORS_SHOWN`` of them."""
    out = []
    for err in errors[:ERRORS_SHOWN]:
        loc = [p if isinstance(p, int) else excerpt(str(p), 40) for p in err.get("loc", ())]
        msg = str(err.get("msg", ""))
        if err.get("type") == "model_attributes_type" and loc == ["body"] and isinstance(err.get("input"), (str, bytes)):
            msg = "the body must be a JSON object, sent with content-type: application/json"
        item = {"type": err.get("type"), "loc": loc, "msg": excerpt(msg, MESSAGE_CHARS)}
        if "input" in err:
            item["input"] = excerpt(err["input"])
        ctx = {k: v for k, v in (err.get("ctx") or {}).items() if not (k == "error" and err.get("type") == "value_error")}  # msg says it
        if ctx:
            item["ctx"] = {str(k): excerpt(v if isinstance(v, (int, float, str)) else str(v)) for k, v in ctx.items()}
        out.append(item)
    if len(errors) > ERRORS_SHOWN:
        out.append({"type": "more_errors", "loc": ["body"], "msg": f"{len(errors) - ERRORS_SHOWN} more errors not shown"})
    return out


@app.exception_handler(RequestValidationError)
async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each bad field, echoing at most an excerpt of what was sent."""
    return JSONResponse({"detail": short_errors(list(exc.errors()))}, 422)


@app.exception_handler(StarletteHTTPException)
async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
    """FastAPI's answer, with what made the body unreadable (not UTF-8, nested too deep, a
    number too long) in place of its generic 400 message."""
    if exc.status_code == 400 and exc.__cause__ is not None and exc.detail == "There was an error parsing the body":
        exc = HTTPException(400, f"the body is not readable JSON: {excerpt(str(exc.__cause__), MESSAGE_CHARS)}")
    elif isinstance(exc.detail, str):
        exc = HTTPException(exc.status_code, excerpt(exc.detail, MESSAGE_CHARS), getattr(exc, "headers", None))
    return await http_exception_handler(request, exc)


# Upper bounds of the integer knobs a request may send (lower bounds and defaults are the
# config's): far above any useful setting, low enough that no request makes a partition
# allocate without bound or overflow a 64-bit integer.
MAX_KNOB = {"k_prime": 10_000, "candidate_cap": 100_000, "nprobe": 1 << 20, "leaves_to_search": 1 << 20, "reorder_k": 100_000, "rrf_k": 1_000_000, "n_best": 10_000}


class Knobs(BaseModel):
    """Optional first-stage knobs of one request (``SearchConfig`` holds the defaults)."""

    model_config = ConfigDict(extra="forbid")
    k_prime: Optional[StrictInt] = Field(None, le=MAX_KNOB["k_prime"], description="nearest indexed vectors per query vector")
    candidate_cap: Optional[StrictInt] = Field(None, le=MAX_KNOB["candidate_cap"], description="passages rescored at most")
    probe_fraction: Optional[float] = Field(None, allow_inf_nan=False, description="share of coarse cells visited")
    nprobe: Optional[StrictInt] = Field(None, le=MAX_KNOB["nprobe"], description="FAISS cells visited")
    leaves_to_search: Optional[StrictInt] = Field(None, le=MAX_KNOB["leaves_to_search"], description="ScaNN leaves visited")
    reorder_k: Optional[StrictInt] = Field(None, le=MAX_KNOB["reorder_k"], description="ScaNN built with a reorder stage (reorder_k > 0; not the default): candidates re-ranked in float")
    dense: Optional[StrictStr] = Field(None, description="hybrid: the dense mode fused with BM25")
    fusion: Optional[StrictStr] = Field(None, description="hybrid: weighted (λ) or rrf")
    lam: Optional[float] = Field(None, ge=0, le=1, allow_inf_nan=False, description="hybrid: λ, the dense side's weight in [0, 1]")
    rrf_k: Optional[StrictInt] = Field(None, le=MAX_KNOB["rrf_k"], description="hybrid: reciprocal rank fusion offset")
    n_best: Optional[StrictInt] = Field(None, le=MAX_KNOB["n_best"], description="hybrid: passages each side contributes")

    def knobs(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(include=set(Knobs.model_fields)).items() if v is not None}


class Filtered(BaseModel):
    """A request's metadata filter (docs/filters.md): its syntax checked here (422), its
    columns and types against the catalog by the ingress (422)."""

    filter: Optional[StrictStr] = Field(None, description="filter expression over metadata columns and doc_id, e.g. \"year >= 2010 AND lang IN ('en', 'de')\"")
    doc_ids: Optional[list[StrictStr]] = Field(None, max_length=MAX_DOC_IDS, description="only these documents (with filter: both hold)")

    @model_validator(mode="after")
    def _filter_syntax(self) -> "Filtered":
        if self.filter is not None:
            parse_filter(self.filter)  # FilterError, a ValueError: 422 naming the problem
        return self


class SearchRequest(Knobs, Filtered):
    query: StrictStr = Field(description=f"query text, 1..{MAX_QUERY_CHARS} characters")
    k: StrictInt = Field(10, description=f"documents to return, 1..{MAX_K}")
    mode: StrictStr = Field("maxsim", description=f"one of {', '.join(SEARCH_MODES)}")

    @model_validator(mode="after")
    def _valid(self) -> "SearchRequest":  # noqa: F821 - the class being defined
        validate_request(self.query, self.k, self.mode)
        return self


class BatchRequest(Knobs, Filtered):
    queries: list[StrictStr] = Field(min_length=1, description="query texts, each as in /search")
    k: StrictInt = 10
    mode: StrictStr = "maxsim"

    @model_validator(mode="after")
    def _valid(self) -> "BatchRequest":
        for i, q in enumerate(self.queries):
            try:
                validate_request(q, self.k, self.mode)
            except ValueError as e:
                raise ValueError(f"queries[{i}]: {e}") from None
        return self


class Result(BaseModel):
    doc_id: str
    score: float
    title: str
    text: str


class SearchResponse(BaseModel):
    results: list[Result]
    mode: str
    path: str = Field(description='"ann" (ANN partitions, exact rescoring) or "exact" (brute force)')
    candidates: int = Field(description="passages rescored exactly")
    timings_ms: dict[str, float] = Field(description="encode, candidates, rescore, merge, total")
    partitions: int
    partitions_answered: int
    degraded: bool = Field(description="true when some partition did not answer: results come from the others")
    allowed_passages: Optional[int] = Field(None, description="with a filter: the passages it allows (docs/filters.md)")
    version: int = Field(description="the index version that answered (docs/updates.md)")


class BatchResponse(BaseModel):
    responses: list[SearchResponse]
    timings_ms: dict[str, float]


class QueryRefused(HTTPException):
    """A 4xx for one query's text (not for the request's settings): ``/search/batch`` names
    the query."""


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
        for dep_name, dep in (status.deployments.items() if status else []):
            if name is None or dep_name == name:
                out[dep_name] = {str(getattr(s, "value", s)): int(n) for s, n in dep.replica_states.items()}
    return out


@serve.deployment(name="Searcher", max_surge_percent=100)
@serve.ingress(app)
class SearchService:
    """The ingress: HTTP (and handle) requests in, fan-out over the partition deployments of
    ``layout`` in app ``index_app`` (or over the partitions held here), the encoder in
    ``encoder_app`` (or here)."""

    def __init__(
        self, layout: ServingLayout, config: ServeConfig, encoder_app: Optional[str], index_app: Optional[str], token_sha256: Optional[str],
        manifest: Optional[Manifest] = None, encoder_threads: Optional[int] = None,
    ) -> None:
        """``encoder_app``: the app of the ``QueryEncoder`` deployment to call, or None to encode
        here with the model of ``manifest`` (``encoder_threads`` torch threads). ``index_app``:
        the app of the ``Partition{i}`` deployments, or None to hold the partitions here."""
        self.layout, self.config = layout, config
        self.encoder_app, self.index_app = encoder_app, index_app
        if manifest is None and (encoder_app is None or index_app is None):
            raise ValueError("the ingress encodes the queries or holds the partitions itself only given the index's manifest")
        if encoder_app is None:
            e = config.encoder
            self.local_encoder: Optional[BatchedQueryEncoder] = BatchedQueryEncoder(layout.index_url, manifest, encoder_threads, e.max_batch_size, e.batch_wait_ms / 1e3)
            self.encoder = None
        else:
            self.local_encoder = None
            self.encoder = serve.get_deployment_handle("QueryEncoder", encoder_app)
        self.fanout: list[CoalescedHandle | LocalPartition]  # the trips of a query go through these
        if index_app is None:
            # on this process's threads: a FAISS thread count set here would be the encoder's
            # too (one OpenMP runtime a process; measured, encoding took twice as long)
            self.fanout = [LocalPartition(PartitionHost(layout.index_url, s, manifest, None)) for s in layout.shards]
        else:
            self.fanout = [CoalescedHandle(serve.get_deployment_handle(f"Partition{s.index}", index_app)) for s in layout.shards]
        self.catalog = Catalog(layout.index_url, layout.catalog)
        self.counts = self.catalog.totals()
        bm25 = BM25Config.model_validate(layout.bm25_config) if layout.bm25_config else None
        self.analyzer = Analyzer(bm25.stopwords, bm25.stemmer) if bm25 else None
        app.state.token_sha256 = token_sha256
        app.state.max_body_bytes = config.max_body_bytes
        self.started = time.time()
        self.one_trip = {"queries": 0, "asked_again": 0}  # queries answered by the one-trip path, and those needing a second trip
        self._restrictions: "OrderedDict[tuple, Restriction]" = OrderedDict()

    RESTRICTIONS_KEPT = 16

    async def restriction(self, filter: Optional[str], doc_ids: Optional[list[str]]) -> Optional[Restriction]:
        """The passages a request's filter allows (None without one), from the catalog of the
        served version; 422 naming the problem for an invalid filter."""
        if filter is None and doc_ids is None:
            return None
        key = (filter, tuple(doc_ids) if doc_ids is not None else None)
        hit = self._restrictions.get(key)
        if hit is None:
            try:
                hit = await asyncio.to_thread(resolve_restriction, self.catalog, filter, doc_ids)
            except FilterError as e:
                raise HTTPException(422, excerpt(str(e), MESSAGE_CHARS)) from None
            self._restrictions[key] = hit
            while len(self._restrictions) > self.RESTRICTIONS_KEPT:
                self._restrictions.popitem(last=False)
        return hit

    def _range(self, served: Any, i: int) -> tuple[int, int]:
        """(first passage, passages) of deployment ``i``'s slice of ``served``."""
        spec = self.layout.shards[i]
        if served.mode == "bm25":
            e = spec.bm25[spec.bm25_own]
        else:
            e = spec.kinds.get(served.kind)
            if e is None:
                return 0, served.passages
        return int(e["first_passage"]), int(e["passages"])

    async def _trip(self, calls: dict[int, Any], timeout: float) -> dict[int, Any]:
        """Await handle calls side by side; those failing or late are cancelled and left out."""

        async def one(i: int, response: Any) -> tuple[int, Any]:
            try:
                return i, await asyncio.wait_for(response, timeout)
            except Exception as e:  # replica died, timed out, or failed: leave it out
                response.cancel()
                log.warning("partition %s left out of a query: %s", i, type(e).__name__ if isinstance(e, asyncio.TimeoutError) else e)
                return i, None

        done = await asyncio.gather(*(one(i, r) for i, r in calls.items()))
        return {i: r for i, r in done if r is not None}

    async def search_one(self, query: str, k: int, mode: str, knobs: dict[str, Any], restriction: Optional[Restriction] = None) -> dict[str, Any]:
        """One query, validated already except for the service-specific checks; among the
        passages ``restriction`` allows (None: all)."""
        served = self.layout.modes.get(mode)
        if served is None:
            raise HTTPException(422, f"mode {mode!r} is not served here (served: {', '.join(self.layout.modes)})")
        try:
            fs, hybrid = request_settings(self.config.search, mode, knobs)
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        if hybrid is not None:
            served = self.layout.modes.get(hybrid.dense)
            if served is None or not all(served.kind in self.layout.shards[i].sparse for i in served.shards):
                raise HTTPException(422, f"hybrid's dense mode {hybrid.dense!r} is not served with a BM25 side here")
        t0 = time.perf_counter()
        if mode == "bm25":
            encoded, terms = None, self.analyzer([query])[0]
        else:
            try:
                call = self.local_encoder.encode(query) if self.local_encoder is not None else self.encoder.encode.remote(query)
                encoded = await asyncio.wait_for(call, self.config.encode_timeout_s)
            except Exception as e:
                raise HTTPException(503, f"the query encoder did not answer: {type(e).__name__}") from None
            if isinstance(encoded, QueryNotEncodable):  # this text alone: its batch-mates were encoded
                raise QueryRefused(422, str(encoded))
            terms = self.analyzer([query])[0] if hybrid is not None else None
        t1 = time.perf_counter()
        handles = [self.fanout[i] for i in served.shards]
        alive = list(range(len(handles)))
        timeout = self.config.partition_timeout_s
        dense_mode = hybrid.dense if hybrid is not None else mode
        need = hybrid.n_best if hybrid is not None else k
        # a filter: each deployment's allowed rows (the same logic as pipeline.retrieval.searcher.filtered_search)
        allowed: list = [None] * len(handles)
        n_allowed = len(restriction) if restriction is not None else None
        if restriction is not None:
            allowed = [restriction.rows(*self._range(served, j)) for j in served.shards]
        path = served.path
        scored: dict[int, Scored] = {}  # the first trip's rescored passages (one trip)
        if served.path in ("exact", "bm25"):
            rows: list = [None] * len(handles)
        elif restriction is not None and filtered_exact(len(restriction), fs, need):
            rows, path = [None] * len(handles), "exact"  # few allowed passages: score them all
        else:
            qv = first_stage_vectors(dense_mode, encoded)
            rounds = CandidateRounds(fs, need, served.passages, served.vectors, n_allowed)
            if hybrid is None and self.index_app is not None and len(handles) <= self.config.one_trip_max_partitions:
                # one trip: hits, and each partition's likely share of the candidates rescored
                # (partitions held here take two: a second trip costs no hop, the margin's
                # rescoring would)
                share = [local_share(rounds.k_prime, rounds.cap, self._range(served, j)[1] / max(1, served.passages)) for j in served.shards]
                got = await self._trip({i: handles[i].call("first_trip", mode, served.kind, encoded, rounds.k_prime, fs.ann, share[i], allowed[i]) for i in alive}, timeout)
                scored = {i: g[1] for i, g in got.items()}
                got = {i: g[0] for i, g in got.items()}
            else:
                got = await self._trip({i: handles[i].call("hits", served.kind, qv, rounds.k_prime, fs.ann, allowed[i]) for i in alive}, timeout)
            while True:
                alive = [i for i in alive if i in got]
                rows = rounds.offer([got.get(i, Hits.empty()) for i in range(len(handles))])
                if rows is not None:
                    break
                scored = {}  # k' grew: the candidates are not those the first trip rescored for
                got = await self._trip({i: handles[i].call("hits", served.kind, qv, rounds.k_prime, fs.ann, allowed[i]) for i in alive}, timeout)
        t2 = time.perf_counter()

        def worth_asking(i: int) -> bool:  # a partition with no candidate or no allowed row answers nothing
            return (rows[i] is None or len(rows[i]) > 0) and (allowed[i] is None or len(allowed[i]) > 0)

        ready: dict[int, PartitionResult] = {}  # ranked from the first trip's scores: no second trip
        if mode == "bm25":
            asked = {i: handles[i].call("bm25_rank", terms, k, allowed[i]) for i in alive if allowed[i] is None or len(allowed[i])}
        elif hybrid is not None:
            asked = {i: handles[i].call("hybrid", dense_mode, served.kind, encoded, terms, rows[i], hybrid.n_best, allowed[i]) for i in alive}
        else:
            for i in alive:
                if i in scored and worth_asking(i) and (r := scored[i].result(rows[i], k)) is not None:
                    ready[i] = r
            asked = {i: handles[i].call("rank", mode, served.kind, encoded, rows[i], k, allowed[i]) for i in alive if worth_asking(i) and i not in ready}
            if scored:
                self.one_trip["queries"] += 1
                self.one_trip["asked_again"] += bool(asked)
        got = {**await self._trip(asked, timeout), **ready}
        if restriction is not None and hybrid is None and mode != "bm25" and path == "ann":
            ranked_so_far = [got[i].ranked for i in got]
            if len(merge(ranked_so_far, k)) < k and sum(got[i].candidates for i in got) < len(restriction):
                # fewer than k documents among the candidates: score the allowed passages exactly
                asked = {i: handles[i].call("rank", mode, served.kind, encoded, None, k, allowed[i]) for i in alive if len(allowed[i])}
                got = await self._trip(asked, timeout)
                path = "exact"
        if hybrid is not None:
            answered = [got[i] for i in alive if i in got]
            if not answered:
                raise HTTPException(503, f"no partition answered within {timeout} s")
            ranked, n = fuse(answered, hybrid, k)
            results = [PartitionResult(ranked, n, 0.0)]
            n_answered = len(answered)
        else:
            results = []
            for i in alive:
                if i in got:
                    results.append(got[i])
                elif i not in asked:  # no candidates here: it answered (the first trip) with nothing to rank
                    results.append(PartitionResult(Ranked(), 0, 0.0))
            if not results:
                raise HTTPException(503, f"no partition answered within {timeout} s")
            n_answered = len(results)
        timings = {"encode": (t1 - t0) * 1e3, "candidates": (t2 - t1) * 1e3, "rescore": (time.perf_counter() - t2) * 1e3}
        result = merge_partition_results(query, mode, path, k, results, len(handles), timings)
        result.partitions_answered = n_answered
        out = response_body(result, self.catalog, self.layout.version)
        out["allowed_passages"] = n_allowed
        return out

    @app.post("/search", response_model=SearchResponse)
    async def search(self, body: SearchRequest) -> dict[str, Any]:
        """Top-k documents for one query (only documents passing ``filter`` and among
        ``doc_ids`` when given: docs/filters.md)."""
        restriction = await self.restriction(body.filter, body.doc_ids)
        return await self.search_one(body.query, body.k, body.mode, body.knobs(), restriction)

    @app.post("/search/batch", response_model=BatchResponse)
    async def search_batch(self, body: BatchRequest) -> dict[str, Any]:
        """Many queries at once (encoded in batches, searched side by side), answers in order."""
        if len(body.queries) > self.config.max_batch_queries:
            raise HTTPException(413, f"{len(body.queries)} queries; at most {self.config.max_batch_queries} in one batch")
        t0 = time.perf_counter()
        knobs = body.knobs()
        restriction = await self.restriction(body.filter, body.doc_ids)  # one filter for the whole batch

        async def one(i: int, query: str) -> dict[str, Any]:
            try:
                return await self.search_one(query, body.k, body.mode, knobs, restriction)
            except QueryRefused as e:  # this query's fault, not the request's: name it
                raise HTTPException(e.status_code, f"queries[{i}]: {e.detail}") from None

        bodies = await asyncio.gather(*(one(i, q) for i, q in enumerate(body.queries)))
        return {"responses": bodies, "timings_ms": {"total": round((time.perf_counter() - t0) * 1e3, 3)}}

    async def _ping(self) -> dict[str, Any]:
        """Each partition's ``info`` (keys 0..P-1) and the encoder's (key -1), those answering."""
        calls = {i: f.info() for i, f in enumerate(self.fanout)}
        if self.encoder is not None:
            calls[-1] = self.encoder.info.remote()
        got = await self._trip(calls, self.config.partition_timeout_s)
        if self.local_encoder is not None:
            got[-1] = {**self.local_encoder.info(), "placement": "ingress"}
        return got

    @app.post("/admin/reload", status_code=202)
    async def reload(self) -> dict[str, Any]:
        """Switch to the index's latest committed version, without refusing a query: the new
        version starts beside this one, then the ingress rolls over (poll ``GET /health`` for
        its ``version``). Needs the service's bearer token."""
        if app.state.token_sha256 is None:
            raise HTTPException(403, "POST /admin/reload is allowed only when the service runs with a bearer token (mvr serve --token); "
                                "or set reload_poll_s to follow the index's versions by polling")
        from pipeline.serving.app import RELOADER_NAMESPACE, reloader_name
        from storage.manifest import read_manifest

        latest = await asyncio.to_thread(read_manifest, self.layout.index_url)
        try:
            reloader = ray.get_actor(reloader_name(self.config.app_name), namespace=RELOADER_NAMESPACE)
        except ValueError:
            raise HTTPException(409, "this service has no reloader (it was deployed without mvr serve); run mvr serve INDEX again to switch") from None
        reloader.reload.remote()  # not awaited: the switch replaces this replica
        newer = latest is not None and latest.version > self.layout.version
        return {"serving": self.layout.version, "latest": latest.version if latest else None, "status": "switching" if newer else "up to date"}

    @app.get("/health")
    async def health(self) -> dict[str, Any]:
        """200 when the encoder and every partition answer; 503 naming what does not."""
        got = await self._ping()
        missing = ["QueryEncoder"] * (-1 not in got) + [f"Partition{i}" for i in range(len(self.fanout)) if i not in got]
        if missing:
            raise HTTPException(503, f"not answering: {', '.join(missing)}")
        return {"status": "ok", "version": self.layout.version, "partitions": len(self.fanout)}

    @app.get("/stats")
    async def stats(self) -> dict[str, Any]:
        """Index version, passages, documents, partitions, modes, replicas per deployment."""
        got = await self._ping()
        return {
            "index": self.layout.index_url,
            "version": self.layout.version,
            "passages": self.counts["passages"],
            "documents": self.counts["documents"],
            "partitions": len(self.fanout),
            "modes": {m: {"path": s.path, "partitions": len(s.shards)} for m, s in self.layout.modes.items()},
            "replicas": replica_counts([(a, d) for a, d in ((self.encoder_app, "QueryEncoder"), (self.index_app, None)) if a]),
            "partitions_answering": sorted(i for i in got if i >= 0),
            "encoder": got.get(-1),
            "one_trip": dict(self.one_trip),
            "fanout": {"trips": sum(f.trips for f in self.fanout), "calls": sum(f.calls for f in self.fanout)},
            "uptime_s": round(time.time() - self.started, 1),
            "auth": app.state.token_sha256 is not None,
            "config": self.config.model_dump(mode="json", by_alias=True),
        }

