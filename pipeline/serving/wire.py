"""The service's wire format: request and response models of ``POST /search`` and
``/search/batch`` (FastAPI writes the OpenAPI schema from them). A request model refuses what
the query plan cannot take, with the same checks and words as in-process search
(``pipeline/retrieval/request.py``)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from mvr.operators.retrieval.filters import MAX_DOC_IDS, check_doc_ids, parse as parse_filter
from mvr.operators.retrieval.scoring import SEARCH_MODES
from mvr.pipeline.retrieval.request import MAX_K, MAX_QUERY_CHARS, validate_request


# Upper bounds of the integer knobs a request may send (lower bounds and defaults are the
# config's): far above any useful setting, low enough that no request makes a partition
# allocate without bound or overflow a 64-bit integer.
MAX_KNOB = {"k_prime": 10_000, "candidate_cap": 100_000, "nprobe": 1 << 20, "leaves_to_search": 1 << 20, "reorder_k": 100_000, "rrf_k": 1_000_000, "n_best": 10_000, "norm_depth": 10_000}


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
    norm_depth: Optional[StrictInt] = Field(None, le=MAX_KNOB["norm_depth"], description="hybrid, weighted: each side normalised over its best norm_depth passages")

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
        if self.doc_ids is not None:
            check_doc_ids(self.doc_ids)  # ids that are not text (a lone surrogate): 422 naming the id
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
