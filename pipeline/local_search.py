"""One query answered in-process: exact search plus the documents' titles and text, shaped
like the body of ``POST /search`` (results, mode, timings)."""

from __future__ import annotations

import time

from pipeline.exact_search import MAX_K, ExactSearcher, top_documents
from storage.catalog import Catalog


def validate_request(query: str, k: int) -> None:
    """Raise ``ValueError`` for an empty query or a ``k`` outside 1..MAX_K."""
    if not query or not query.strip():
        raise ValueError("the query is empty")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def answer(searcher: ExactSearcher, catalog: Catalog, query: str, k: int = 10, mode: str = "maxsim") -> dict:
    """``{"results": [{"doc_id", "score", "title", "text"}], "mode", "timings_ms": {"encode",
    "rescore", "total"}}`` for one query; ``rescore`` covers scoring every passage and ranking."""
    validate_request(query, k)
    if mode not in searcher.modes:
        raise ValueError(f"mode {mode!r} not loaded; this searcher has {', '.join(searcher.modes)}")
    t0 = time.perf_counter()
    (encoded,) = searcher.query_encoder([query])
    t1 = time.perf_counter()
    scores = searcher.passage_scores(encoded, mode)
    hits = top_documents(scores, searcher.doc_ids, searcher.passage_idx, k)
    t2 = time.perf_counter()
    docs = catalog.documents([h.doc_id for h in hits])
    results = [
        {
            "doc_id": h.doc_id,
            "score": h.score,
            "title": docs.get(h.doc_id, {}).get("title") or "",
            "text": docs.get(h.doc_id, {}).get("text") or "",
        }
        for h in hits
    ]
    t3 = time.perf_counter()
    return {"results": results, "mode": mode, "timings_ms": {"encode": _ms(t1 - t0), "rescore": _ms(t2 - t1), "total": _ms(t3 - t0)}}
