"""``manifest.json``: the commit point of an index. Written last and atomically; a file the
manifest does not list does not exist as far as readers are concerned."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Optional

from pydantic import BaseModel, Field

from storage import fs
from storage.schema import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION

MANIFEST_FILE = "manifest.json"


class ShardEntry(BaseModel):
    """One shard: its Parquet file (``path``, ``bytes``, ``sha256``) and codes file
    (``codes``, ``codes_bytes``, ``codes_sha256``), passages (``rows``) and token vectors.
    Nothing per passage: the resume bookkeeping (sequence ranges) stays in the commit records."""

    path: str
    codes: str
    rows: int
    tokens: int
    bytes: int
    sha256: str
    codes_bytes: int
    codes_sha256: str
    block_id: str


class Manifest(BaseModel):
    format: str = "mvr-index"
    version: int = 1  # increases with every commit to the same index
    schema_version: int = SCHEMA_VERSION
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    config: dict[str, Any]
    model: dict[str, Any]  # name, path, format, fingerprint, dim
    input: dict[str, Any]  # url, fingerprint, blocks
    counts: dict[str, int]  # input_rows, indexed_documents, rejected, passages, tokens
    dim: int  # of the decoded token vectors (the tokens codec's output)
    codecs: dict[str, dict[str, Any]]  # group (tokens, pooled) → name, path, bytes, sha256, dim_in, dim_out, bytes_per_vector, …
    shards: list[ShardEntry]
    rejects: str = "rejects.parquet"
    catalog: str = "catalog.duckdb"
    ann: dict[str, Any] = Field(default_factory=dict)
    bm25: dict[str, Any] = Field(default_factory=dict)

    def shards_digest(self) -> str:
        """sha256 over the shards' checksums: which passages an ANN or BM25 build was made from."""
        return hashlib.sha256("".join(sh.sha256 + sh.codes_sha256 for sh in self.shards).encode()).hexdigest()


def manifest_url(index_url: str) -> str:
    return fs.join(index_url, MANIFEST_FILE)


class OldSchemaError(ValueError):
    """The index was written by a schema version this mvr no longer reads."""


def read_manifest(index_url: str) -> Optional[Manifest]:
    """The committed manifest (None when there is none). ``OldSchemaError`` for an index of
    a schema version this mvr no longer reads, saying how to rebuild it."""
    url = manifest_url(index_url)
    if not fs.exists(url):
        return None
    data = fs.read_bytes(url)
    try:
        return Manifest.model_validate_json(data)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        _refuse_old_schema(index_url, data)
        what = "; ".join(line.strip() for line in str(exc).strip().splitlines()[:3]) or type(exc).__name__
        raise ValueError(f"{url} is damaged ({what[:300]}); it cannot be read as an mvr manifest") from exc


def _refuse_old_schema(index_url: str, data: bytes) -> None:
    try:
        version = json.loads(data).get("schema_version")
    except (ValueError, AttributeError):
        return
    if isinstance(version, int) and version < OLDEST_READABLE_SCHEMA:
        raise OldSchemaError(
            f"{index_url} was written with index schema version {version} (float16 vectors inside the Parquet shards, "
            f"copied into every ANN partition); this mvr reads schema {OLDEST_READABLE_SCHEMA}-{SCHEMA_VERSION} "
            "(codec codes beside the shards, one copy). Rebuild it: mvr index CORPUS INDEX --overwrite, then mvr build-ann INDEX"
        )


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
