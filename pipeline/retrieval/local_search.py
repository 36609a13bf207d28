"""The response body of a search, the same in process and from the service: ranked documents
with their titles and text from the catalog, the mode, path, timings and how many partitions
answered (the body of ``POST /search``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mvr.pipeline.retrieval.plan import SearchResult

if TYPE_CHECKING:
    from mvr.storage.catalog import Catalog


def response_body(result: SearchResult, catalog: Catalog, version: int) -> dict[str, Any]:
    """``{"results": [{"doc_id", "score", "title", "text"}], "mode", "path", "candidates",
    "timings_ms": {"encode", "candidates", "rescore", "merge", "total"}, "partitions",
    "partitions_answered", "degraded", "version"}`` (``version``: the index version that
    answered); the catalog look-up counts in ``total``."""
    t0 = time.perf_counter()
    docs = catalog.documents(result.ranked.doc_ids)
    results = [
        {"doc_id": d, "score": float(s), "title": docs.get(d, {}).get("title") or "", "text": docs.get(d, {}).get("text") or ""}
        for d, s in zip(result.ranked.doc_ids, result.ranked.scores)
    ]
    timings = dict(result.timings_ms)
    timings["total"] = round(timings.get("total", 0.0) + (time.perf_counter() - t0) * 1e3, 3)
    return {
        "results": results,
        "mode": result.mode,
        "path": result.path,
        "candidates": result.candidates,
        "timings_ms": timings,
        "partitions": result.partitions,
        "partitions_answered": result.partitions_answered,
        "degraded": result.partitions_answered < result.partitions,
        "version": int(version),
    }
