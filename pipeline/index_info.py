"""Facts about a committed index, from its manifest and catalog."""

from __future__ import annotations

from storage.catalog import Catalog
from storage.manifest import load_manifest


def index_stats(index_url: str) -> dict:
    """Counts from the manifest, checked against the catalog, and rejects grouped by reason."""
    m = load_manifest(index_url)
    cat = Catalog(index_url)
    try:
        totals = cat.totals()
        rejects = cat.rejects_by_reason()
    finally:
        cat.close()
    return {
        "manifest_version": m.version,
        "schema_version": m.schema_version,
        "model": m.model["name"],
        "model_format": m.model["format"],
        "input_rows": m.counts["input_rows"],
        "documents": totals["documents"],
        "passages": totals["passages"],
        "tokens": totals["tokens"],
        "dim": m.dim,
        "bytes_per_token_vector": m.dim * 2,  # float16
        "shards": len(m.shards),
        "shard_bytes": sum(s.bytes for s in m.shards),
        "rejected": m.counts["rejected"],
        "rejects_by_reason": rejects,
    }
