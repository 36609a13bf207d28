"""One query answered in-process by the search core, with the documents' titles and text:
the body of ``POST /search`` (results, mode, path, timings)."""

from __future__ import annotations

import time
from typing import Any

from pipeline.search import SearchResult, Searcher
from storage.catalog import Catalog


def response_body(result: SearchResult, catalog: Catalog) -> dict[str, Any]:
    """``{"results": [{"doc_id", "score", "title", "text"}], "mode", "path", "candidates",
    "timings_ms": {"encode", "candidates", "rescore", "merge", "total"}}``."""
    docs = catalog.documents(result.ranked.doc_ids)
    results = [
        {
            "doc_id": d,
            "score": float(s),
            "title": docs.get(d, {}).get("title") or "",
            "text": docs.get(d, {}).get("text") or "",
        }
        for d, s in zip(result.ranked.doc_ids, result.ranked.scores)
    ]
    return {"results": results, "mode": result.mode, "path": result.path, "candidates": result.candidates, "timings_ms": dict(result.timings_ms)}


def answer(searcher: Searcher, catalog: Catalog, query: str, k: int = 10, mode: str = "maxsim", **knobs: Any) -> dict[str, Any]:
    """One query through ``searcher`` (ValueError for a bad request), shaped as ``response_body``."""
    (result,) = searcher.search([query], k, mode, **knobs)
    t0 = time.perf_counter()
    body = response_body(result, catalog)
    body["timings_ms"]["total"] = round(body["timings_ms"]["total"] + (time.perf_counter() - t0) * 1e3, 3)
    return body
