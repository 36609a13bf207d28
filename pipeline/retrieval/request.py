"""What a search request may ask, checked in one place before anything runs: the query text,
k, the mode, the search knobs (first stage and fusion) and the metadata filter, turned into
the settings the query plan (``pipeline/retrieval/plan.py``) runs with. In-process search, the
command line and the service's request models all call these, so a request is refused for the
same reason, in the same words, wherever it comes from."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
from pydantic import ValidationError

from mvr.operators.encode.validation import lone_surrogate
from mvr.operators.retrieval.candidates import FirstStage
from mvr.operators.retrieval.fusion import HybridParams
from mvr.operators.retrieval.partition import allowed_rows
from mvr.operators.retrieval.scoring import check_search_mode
from mvr.pipeline.config import FirstStageConfig, HybridConfig, SearchConfig

if TYPE_CHECKING:
    from mvr.storage.catalog import Catalog  # duckdb: imported where a catalog is opened

MAX_K = 1000
MAX_QUERY_CHARS = 4096
KNOBS = ("k_prime", "candidate_cap", "probe_fraction", "nprobe", "leaves_to_search", "reorder_k")
HYBRID_KNOBS = ("dense", "fusion", "lam", "rrf_k", "n_best", "norm_depth")


@dataclass(frozen=True)
class Restriction:
    """What a filter allows: ``passages``, the sorted global numbers of the passages of the
    documents that pass it (the catalog's answer, ``Catalog.allowed_passages``)."""

    passages: np.ndarray
    filter: Optional[str] = None
    doc_ids: Optional[tuple[str, ...]] = None

    def __len__(self) -> int:
        return len(self.passages)

    def rows(self, first_passage: int, count: int) -> np.ndarray:
        """The allowed rows of a partition of passages [first_passage, first_passage + count)."""
        return allowed_rows(self.passages, first_passage, count)


def resolve_restriction(catalog: Catalog, filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> Optional[Restriction]:
    """The passages a request's ``filter`` and ``doc_ids`` allow (None when it has neither);
    ``FilterError`` (a ValueError) for an invalid filter."""
    if filter is None and doc_ids is None:
        return None
    return Restriction(catalog.allowed_passages(filter, doc_ids), filter, tuple(doc_ids) if doc_ids is not None else None)


class RestrictionCache:
    """The ``Restriction``s of the last ``kept`` filters over one catalog (a run of queries
    usually repeats one), least recently used dropped first. Thread-safe: the service
    resolves its requests' filters in threads."""

    def __init__(self, kept: int = 16) -> None:
        self.kept = kept
        self._held: "OrderedDict[tuple[Optional[str], Optional[tuple[str, ...]]], Restriction]" = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, catalog: Catalog, filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> Optional[Restriction]:
        """``resolve_restriction(catalog, filter, doc_ids)``, remembered (its ``FilterError``
        raised, not remembered)."""
        if filter is None and doc_ids is None:
            return None
        key = (filter, tuple(doc_ids) if doc_ids is not None else None)
        with self._lock:
            hit = self._held.get(key)
            if hit is not None:
                self._held.move_to_end(key)
                return hit
        made = resolve_restriction(catalog, filter, doc_ids)
        if made is None:
            return None
        with self._lock:
            self._held[key] = made
            while len(self._held) > self.kept:
                self._held.popitem(last=False)
        return made


def filtered_exact(n_allowed: int, fs: FirstStage, k: int) -> bool:
    """Whether a filter allowing ``n_allowed`` passages goes straight to exact scoring of
    them: when they are no more than the passages the ANN path would rescore anyway
    (``candidate_cap`` for a top-``k`` search, ``FirstStage.budget``)."""
    return n_allowed <= fs.budget(k)[1]


def validate_request(query: Any, k: Any, mode: Any = "maxsim") -> None:
    """ValueError naming the problem: empty or over-long query, query that is not text
    (``check_query_text``), k outside 1..MAX_K, unknown mode."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query has {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    check_query_text(query)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    check_search_mode(mode)


def check_query_text(query: str) -> None:
    """ValueError unless ``query`` is text the tokenizer takes: no lone surrogate (JSON's
    ``"\\ud800"`` escape decodes to one; it is not encodable as UTF-8 and the tokenizer raises)
    and at least one printable character (control and format characters alone, which the
    tokenizer drops, leave an empty query)."""
    where = lone_surrogate(query)
    if where is not None:
        raise ValueError(f"the query is not valid Unicode text: a lone surrogate {where}")
    if not any(ch.isprintable() and not ch.isspace() for ch in query):
        raise ValueError("the query is empty: it has no printable character")


def first_stage(defaults: FirstStageConfig, knobs: dict[str, Any]) -> FirstStage:
    """A mode's first-stage settings with a request's knob overrides (validated)."""
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown search knob(s) {unknown}; accepted: {', '.join(KNOBS)}")
    try:
        cfg = FirstStageConfig.model_validate({**defaults.model_dump(), **{k: v for k, v in knobs.items() if v is not None}})
    except ValidationError as e:
        raise ValueError(validation_message(e)) from None
    return cfg.first_stage()


def validation_message(e: ValidationError) -> str:
    """Pydantic's errors in one line: ``field: message; …``."""
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())


def request_settings(config: SearchConfig, mode: str, knobs: dict[str, Any]) -> tuple[Optional[FirstStage], Optional[HybridParams]]:
    """A request's validated settings: the first stage of its dense mode (None for ``bm25``)
    and, for ``hybrid``, the fusion settings (the config's, with the request's overrides)."""
    if check_search_mode(mode) == "bm25":
        if any(v is not None for v in knobs.values()):
            raise ValueError(f"mode bm25 takes no search knobs, got {sorted(knobs)}")
        return None, None
    if mode != "hybrid":
        return first_stage(config.for_mode(mode), knobs), None
    overrides = {k: v for k, v in knobs.items() if k in HYBRID_KNOBS and v is not None}
    try:
        params = HybridConfig.model_validate({**config.hybrid.model_dump(), **overrides}).params()
    except ValidationError as e:
        raise ValueError(validation_message(e)) from None
    rest = {k: v for k, v in knobs.items() if k not in HYBRID_KNOBS}
    return first_stage(config.for_mode(params.dense), rest), params
