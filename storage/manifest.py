"""``manifest.json``: the commit point of an index. Written last and atomically; a file the
manifest does not list does not exist as far as readers are concerned."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Optional

from pydantic import BaseModel, Field

from storage import fs
from storage.schema import SCHEMA_VERSION

MANIFEST_FILE = "manifest.json"


class ShardEntry(BaseModel):
    path: str
    rows: int
    tokens: int
    bytes: int
    sha256: str
    block_id: str
    seq_ranges: list[list[int]]  # passage sequence numbers in the block, inclusive ranges


class Manifest(BaseModel):
    format: str = "mvr-index"
    version: int = 1  # increases with every commit to the same index
    schema_version: int = SCHEMA_VERSION
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    config: dict[str, Any]
    model: dict[str, Any]  # name, path, format, fingerprint, dim
    input: dict[str, Any]  # url, fingerprint, blocks
    counts: dict[str, int]  # input_rows, indexed_documents, rejected, passages, tokens
    dim: int
    shards: list[ShardEntry]
    rejects: str = "rejects.parquet"
    catalog: str = "catalog.duckdb"
    ann: dict[str, Any] = Field(default_factory=dict)
    bm25: dict[str, Any] = Field(default_factory=dict)

    def shards_digest(self) -> str:
        """sha256 over the shards' checksums: which passages an ANN or BM25 build was made from."""
        return hashlib.sha256("".join(sh.sha256 for sh in self.shards).encode()).hexdigest()


def manifest_url(index_url: str) -> str:
    return fs.join(index_url, MANIFEST_FILE)


def read_manifest(index_url: str) -> Optional[Manifest]:
    url = manifest_url(index_url)
    if not fs.exists(url):
        return None
    try:
        return Manifest.model_validate_json(fs.read_bytes(url))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        what = "; ".join(line.strip() for line in str(exc).strip().splitlines()[:3]) or type(exc).__name__
        raise ValueError(f"{url} is damaged ({what[:300]}); it cannot be read as an mvr manifest") from exc


def load_manifest(index_url: str) -> Manifest:
    m = read_manifest(index_url)
    if m is None:
        raise FileNotFoundError(f"{index_url} holds no committed index (no {MANIFEST_FILE})")
    if m.schema_version > SCHEMA_VERSION:
        raise ValueError(f"index schema version {m.schema_version} is newer than this mvr ({SCHEMA_VERSION})")
    return m


def commit_manifest(index_url: str, manifest: Manifest) -> None:
    """Atomically publish ``manifest`` (its version one above the current one, if any)."""
    current = read_manifest(index_url)
    manifest.version = (current.version + 1) if current else 1
    fs.write_bytes_atomic(manifest_url(index_url), json.dumps(manifest.model_dump(mode="json"), indent=1).encode())
