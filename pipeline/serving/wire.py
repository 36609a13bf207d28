"""The service's wire format: request and response models of ``POST /search``,
``/search/batch``, ``GET /health`` and ``POST /admin/reload`` (FastAPI writes the OpenAPI
schema from them: the service's contract, docs/serve.md). A request model refuses what the
query plan cannot take, with the same checks and words as in-process search
(``pipeline/retrieval/request.py``), and its schema states the same bounds, read from where
the checks keep them: the query's and k's in ``request.py``, each knob's in its config field
(``FirstStageConfig``, ``HybridConfig``) and ``MAX_KNOB``, the filter's in the filter language."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from mvr.operators.retrieval.filters import MAX_DOC_IDS, MAX_FILTER_CHARS, check_doc_ids
from mvr.operators.retrieval.filters import parse as parse_filter
from mvr.operators.retrieval.scoring import MODES, SEARCH_MODES
from mvr.pipeline.config import FirstStageConfig, HybridConfig
from mvr.pipeline.retrieval.request import HYBRID_KNOBS, KNOBS, MAX_K, MAX_QUERY_CHARS, validate_request

# Upper bounds of the integer knobs a request may send (lower bounds and defaults are the
# config's): far above any useful setting, low enough that no request makes a partition
# allocate without bound or overflow a 64-bit integer.
MAX_KNOB = {
    "k_prime": 10_000,
    "candidate_cap": 100_000,
    "nprobe": 1 << 20,
    "leaves_to_search": 1 << 20,
    "reorder_k": 100_000,
    "rrf_k": 1_000_000,
    "n_best": 10_000,
    "norm_depth": 10_000,
}

# The schema's names (JSON Schema ``format``) of the two string syntaxes a request holds that
# JSON Schema cannot state: a query text the tokenizer takes (``check_query_text``: at least
# one printable, non-space character, no lone surrogate) and a filter expression
# (docs/filters.md; its columns the served index's).
QUERY_FORMAT = "mvr-query"
FILTER_FORMAT = "mvr-filter"

QueryText = Annotated[StrictStr, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS, "format": QUERY_FORMAT})]
if TYPE_CHECKING:  # the types of the config's fields, for a type checker
    from mvr.operators.retrieval.fusion import Fusion
    from mvr.operators.retrieval.scoring import DenseMode
else:  # at run time read from the config: the one source of the values a request may send
    DenseMode = HybridConfig.model_fields["dense"].annotation
    Fusion = HybridConfig.model_fields["fusion"].annotation


def integral(value: Any) -> Any:
    """A float without a fraction (``3.0``) as the integer it is, as JSON Schema's ``integer``
    takes it; anything else as it is (``true``, ``"3"``, ``3.5``: refused as not integers)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def knob(config: type[BaseModel], name: str, description: Optional[str] = None) -> Any:
    """The request field overriding ``config``'s field ``name``: optional, strict (no ``"10"``
    for 10, no ``true`` for 1), finite, within the config field's bounds (the one source of a
    knob's range) and, for an integer knob, ``MAX_KNOB[name]``."""
    field = config.model_fields[name]
    bounds = {key: getattr(m, key) for m in field.metadata for key in ("ge", "gt", "le", "lt") if getattr(m, key, None) is not None}
    if name in MAX_KNOB:
        bounds["le"] = MAX_KNOB[name]
    types = get_args(field.annotation) or (field.annotation,)
    kind: dict[str, Any] = {} if get_origin(field.annotation) is Literal else {"strict": True, "allow_inf_nan": False} if float in types else {"strict": True}
    return Field(None, description=description or field.description, **bounds, **kind)


class Knobs(BaseModel):
    """Optional first-stage and fusion knobs of one request (``SearchConfig`` holds the
    defaults); ``bm25`` takes none, and only ``hybrid`` the fusion ones (``null`` is as if not
    sent): the schema says so (``knobs_follow_the_mode``)."""

    model_config = ConfigDict(extra="forbid")
    k_prime: Optional[int] = knob(FirstStageConfig, "k_prime")
    candidate_cap: Optional[int] = knob(FirstStageConfig, "candidate_cap")
    probe_fraction: Optional[float] = knob(FirstStageConfig, "probe_fraction", "share of coarse cells visited")
    nprobe: Optional[int] = knob(FirstStageConfig, "nprobe")
    leaves_to_search: Optional[int] = knob(FirstStageConfig, "leaves_to_search")
    reorder_k: Optional[int] = knob(FirstStageConfig, "reorder_k")
    dense: Optional[DenseMode] = knob(HybridConfig, "dense", "hybrid: the dense mode fused with BM25 (one this service serves)")
    fusion: Optional[Fusion] = knob(HybridConfig, "fusion", "hybrid: weighted (λ) or rrf")
    lam: Optional[float] = knob(HybridConfig, "lam", "hybrid: λ, the dense side's weight in [0, 1]")
    rrf_k: Optional[int] = knob(HybridConfig, "rrf_k", "hybrid: reciprocal rank fusion offset")
    n_best: Optional[int] = knob(HybridConfig, "n_best", "hybrid: passages each side contributes")
    norm_depth: Optional[int] = knob(HybridConfig, "norm_depth", "hybrid, weighted: each side normalised over its best norm_depth passages")

    _integral_knobs = field_validator(*MAX_KNOB, mode="before")(integral)

    def knobs(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(include=set(Knobs.model_fields)).items() if v is not None}


def knobs_follow_the_mode(schema: dict[str, Any]) -> None:
    """Add to a request's JSON Schema what ``request_settings`` refuses: knobs with ``bm25``,
    fusion knobs with a dense mode (a request without ``mode`` is ``maxsim``)."""
    unset = lambda names: {"properties": {n: {"type": "null"} for n in names}}  # noqa: E731
    schema["allOf"] = [
        {"if": {"properties": {"mode": {"const": "bm25"}}, "required": ["mode"]}, "then": unset(KNOBS + HYBRID_KNOBS)},
        {"if": {"properties": {"mode": {"enum": list(MODES)}}}, "then": unset(HYBRID_KNOBS)},
    ]


class Filtered(BaseModel):
    """A request's metadata filter (docs/filters.md): its syntax checked here (422), its
    columns and types against the catalog by the ingress (422)."""

    filter: Optional[Annotated[StrictStr, Field(json_schema_extra={"maxLength": MAX_FILTER_CHARS, "format": FILTER_FORMAT})]] = Field(
        None, description="filter expression over metadata columns and doc_id, e.g. \"year >= 2010 AND lang IN ('en', 'de')\""
    )
    doc_ids: Optional[list[StrictStr]] = Field(None, max_length=MAX_DOC_IDS, description="only these documents (with filter: both hold)")

    @model_validator(mode="after")
    def _filter_syntax(self) -> "Filtered":
        if self.filter is not None:
            parse_filter(self.filter)  # FilterError, a ValueError: 422 naming the problem
        if self.doc_ids is not None:
            check_doc_ids(self.doc_ids)  # ids that are not text (a lone surrogate): 422 naming the id
        return self


class Asked(BaseModel):
    """How many documents, by which mode (checked by ``validate_request``, in its words; the
    schema states its bounds)."""

    k: StrictInt = Field(10, description=f"documents to return, 1..{MAX_K}", json_schema_extra={"minimum": 1, "maximum": MAX_K})
    mode: StrictStr = Field("maxsim", description=f"one of {', '.join(SEARCH_MODES)} (one this service serves)", json_schema_extra={"enum": list(SEARCH_MODES)})

    _integral_k = field_validator("k", mode="before")(integral)


class SearchRequest(Asked, Knobs, Filtered):
    model_config = ConfigDict(json_schema_extra=knobs_follow_the_mode)
    query: QueryText = Field(description=f"query text, 1..{MAX_QUERY_CHARS} characters, at least one of them printable and not a space")

    @model_validator(mode="after")
    def _valid(self) -> "SearchRequest":
        validate_request(self.query, self.k, self.mode)
        return self


class BatchRequest(Asked, Knobs, Filtered):
    model_config = ConfigDict(json_schema_extra=knobs_follow_the_mode)
    queries: list[QueryText] = Field(min_length=1, description="query texts, each as in /search (at most the service's max_batch_queries)")

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


class Health(BaseModel):
    status: Literal["ok"]
    version: int = Field(description="the index version served")
    partitions: int


class Reload(BaseModel):
    serving: int = Field(description="the index version served now")
    latest: Optional[int] = Field(description="the index's latest committed version")
    status: Literal["switching", "up to date"]
