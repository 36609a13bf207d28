"""``manifest.json``: the commit point of an index. Written last and atomically; a file the
manifest does not list does not exist as far as readers are concerned.

The shard list (one row a shard: ``ShardEntry``) is not in the JSON: it is a Parquet table
``shard-lists/{sha256[:16]}.parquet`` beside it, named by its content (so a commit never
rewrites the list a reader of the previous manifest is reading), listed in the manifest's
``shard_list`` (path, bytes, sha256, count) and checked against it when read. At 10⁹
passages an index has about a million shards (docs/capacity.md): the JSON stays a few
kilobytes, and the list is read as columns, not parsed and validated object by object.
Files no retained version lists are collected by ``storage/retention.py``.

Versions. Every commit creates ``versions/{N:012d}.json`` (the whole manifest of version N)
with an exclusive create (``fs.create_exclusive``): that file is the commit point. Two
writers that both read version N−1 race for N; one wins, the other gets ``CommitConflict``
and re-applies its change on top of the winner (``commit_update``) or is refused. Then
``manifest.json`` is overwritten with the same bytes, a pointer for readers; a reader
follows ``versions/`` past it, so a writer killed between the two steps (or two writers
finishing out of order) never hides a committed version. A version file is never rewritten:
a reader of version N keeps reading N's files until it switches (``read_manifest(version=N)``)."""

from __future__ import annotations

import hashlib
import json
import random
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from mvr.storage import fs
from mvr.storage.schema import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION

MANIFEST_FILE = "manifest.json"
SHARD_LISTS_DIR = "shard-lists"
VERSIONS_DIR = "versions"
COMMIT_ATTEMPTS = 8  # commit_update: tries before a writer that keeps losing is refused


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


SHARD_LIST_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("codes", pa.string()),
        ("rows", pa.int64()),
        ("tokens", pa.int64()),
        ("bytes", pa.int64()),
        ("sha256", pa.string()),
        ("codes_bytes", pa.int64()),
        ("codes_sha256", pa.string()),
        ("block_id", pa.string()),
    ]
)


class ShardList(Sequence[ShardEntry]):
    """The shard list as columns (an int64 array or an Arrow string array a field, manifest
    order): what ``read_manifest`` returns for ``Manifest.shards``. A ``ShardEntry`` is made only for the
    shards asked for (indexing, iteration, ``by_path``); ``rows`` and the columns serve the
    whole-list computations (partition planning, totals) without a Python object a shard."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        self.columns: dict[str, Any] = {  # int64 arrays (np.ndarray) and Arrow string arrays
            f.name: (np.asarray(columns[f.name], np.int64) if pa.types.is_integer(f.type) else _strings(columns[f.name])) for f in SHARD_LIST_SCHEMA
        }
        self._by_path: Optional[dict[str, int]] = None

    @classmethod
    def from_entries(cls, entries: Sequence[ShardEntry]) -> "ShardList":
        return entries if isinstance(entries, ShardList) else cls({f.name: [getattr(e, f.name) for e in entries] for f in SHARD_LIST_SCHEMA})

    @classmethod
    def from_table(cls, table: pa.Table) -> "ShardList":
        return cls({f.name: (table[f.name].to_numpy() if pa.types.is_integer(f.type) else table[f.name]) for f in SHARD_LIST_SCHEMA})

    def to_table(self) -> pa.Table:
        return pa.table({n: self.columns[n] for n in SHARD_LIST_SCHEMA.names}, schema=SHARD_LIST_SCHEMA)

    def __len__(self) -> int:
        return len(self.columns["path"])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        c = self.columns
        return ShardEntry.model_construct(**{n: (int(c[n][i]) if isinstance(c[n], np.ndarray) else c[n][i].as_py()) for n in SHARD_LIST_SCHEMA.names})

    def __iter__(self) -> Iterator[ShardEntry]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    @property
    def rows(self) -> np.ndarray:
        """(shards,) int64 passages a shard."""
        return self.columns["rows"]

    def by_path(self, path: str) -> ShardEntry:
        """The shard at ``path`` (KeyError when there is none); the index is built once."""
        if self._by_path is None:
            self._by_path = {p: i for i, p in enumerate(self.columns["path"].to_pylist())}
        return self[self._by_path[path]]


def _strings(values: Any) -> pa.StringArray:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())


def shard_rows(shards: Sequence[ShardEntry]) -> np.ndarray:
    """(shards,) int64 passages a shard, from a ShardList's column or the entries."""
    return shards.rows if isinstance(shards, ShardList) else np.array([s.rows for s in shards], dtype=np.int64)


def shard_paths(shards: Sequence[ShardEntry], start: int = 0, stop: Optional[int] = None) -> list[str]:
    """The paths of shards[start:stop], from a ShardList's column or the entries."""
    stop = len(shards) if stop is None else stop
    if isinstance(shards, ShardList):
        return shards.columns["path"][start:stop].to_pylist()
    return [s.path for s in shards[start:stop]]


def shard_lookup(shards: Sequence[ShardEntry], path: str) -> ShardEntry:
    """The shard at ``path`` among ``shards`` (KeyError when it is not there)."""
    if isinstance(shards, ShardList):
        return shards.by_path(path)
    for s in shards:
        if s.path == path:
            return s
    raise KeyError(path)


class Manifest(BaseModel):
    format: str = "mvr-index"
    version: int = 0  # increases with every commit to the same index (0: not committed yet)
    schema_version: int = SCHEMA_VERSION
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    config: dict[str, Any]
    model: dict[str, Any]  # name, path, format, fingerprint, dim
    input: dict[str, Any]  # url, fingerprint, blocks
    counts: dict[str, int]  # input_rows, indexed_documents, rejected, passages, tokens
    dim: int  # of the decoded token vectors (the tokens codec's output)
    codecs: dict[
        str, dict[str, Any]
    ]  # group (tokens, pooled, first_m when first-m refines the token codes) → name, path, bytes, sha256, dim_in, dim_out, bytes_per_vector, …
    if TYPE_CHECKING:  # a list, or read_manifest's ShardList; validated as a list (the else branch) when given to the constructor
        shards: Sequence[ShardEntry] = Field(default_factory=list, exclude=True)
    else:
        shards: list[ShardEntry] = Field(default_factory=list, exclude=True)  # stored in the shard list file
    shard_list: dict[str, Any] = Field(default_factory=dict)  # path, bytes, sha256, count of that file
    rejects: str = "rejects.parquet"
    catalog: str = "catalog.duckdb"
    ann: dict[str, Any] = Field(default_factory=dict)
    bm25: dict[str, Any] = Field(default_factory=dict)
    tombstones: dict[str, Any] = Field(default_factory=dict)  # path, bytes, sha256, count of the deleted passages' file
    adds: list[dict[str, Any]] = Field(default_factory=list)  # one entry an `mvr add` committed since the last build or compaction
    history: list[dict[str, Any]] = Field(default_factory=list)  # version, operation, at, summary (most recent last, bounded)
    storage: dict[str, Any] = Field(default_factory=dict)  # how commits are kept from racing (``commit_guard``), decided at the first commit

    def shards_digest(self) -> str:
        """sha256 over the shards' checksums: which passages an ANN or BM25 build was made from."""
        s = ShardList.from_entries(self.shards).columns
        return hashlib.sha256("".join(a + b for a, b in zip(s["sha256"].to_pylist(), s["codes_sha256"].to_pylist())).encode()).hexdigest()


def manifest_url(index_url: str) -> str:
    return fs.join(index_url, MANIFEST_FILE)


class OldSchemaError(ValueError):
    """The index was written by a schema version this mvr no longer reads."""


def version_url(index_url: str, version: int) -> str:
    return fs.join(index_url, VERSIONS_DIR, f"{int(version):012d}.json")


def list_versions(index_url: str) -> list[int]:
    """The committed versions whose files are present, oldest first."""
    out = []
    for url in fs.list_files(fs.join(index_url, VERSIONS_DIR), ".json"):
        stem = url.rstrip("/").rsplit("/", 1)[-1][: -len(".json")]
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


@overload
def read_manifest(index_url: str, version: int) -> Manifest: ...
@overload
def read_manifest(index_url: str, version: Optional[int] = None) -> Optional[Manifest]: ...


def read_manifest(index_url: str, version: Optional[int] = None) -> Optional[Manifest]:
    """The latest committed manifest with its shard list (None when there is none), or
    ``version``'s (FileNotFoundError when that version is not kept). ``OldSchemaError`` for
    an index of a schema version this mvr no longer reads, saying how to rebuild it;
    ``IntegrityError`` when the shard list file does not match the manifest."""
    if version is not None:
        url = version_url(index_url, version)
        if not fs.exists(url):
            raise FileNotFoundError(f"{index_url} keeps no version {version} (kept: {list_versions(index_url) or 'none'})")
        m = _parse(index_url, url, fs.read_bytes(url))
    else:
        url = manifest_url(index_url)
        if not fs.exists(url):  # none, or a first commit whose pointer a full disk refused
            first = list_versions(index_url)[:1]
            if not first:
                return None
            url = version_url(index_url, first[0])
        m = _parse(index_url, url, fs.read_bytes(url))
        while fs.exists(version_url(index_url, m.version + 1)):  # committed after the pointer was written
            m = _parse(index_url, version_url(index_url, m.version + 1), fs.read_bytes(version_url(index_url, m.version + 1)))
    if m.shard_list:
        m.shards = read_shard_list(index_url, m.shard_list)
    return m


def _parse(index_url: str, url: str, data: bytes) -> Manifest:
    try:
        m = Manifest.model_validate_json(data)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        _refuse_old_schema(index_url, data)
        what = "; ".join(line.strip() for line in str(exc).strip().splitlines()[:3]) or type(exc).__name__
        raise ValueError(f"{url} is damaged ({what[:300]}); it cannot be read as an mvr manifest") from exc
    return m


def shard_list_bytes(shards: Sequence[ShardEntry]) -> bytes:
    """The shard list as a Parquet file (zstd), one row a shard in manifest order."""
    sink = pa.BufferOutputStream()
    pq.write_table(ShardList.from_entries(shards).to_table(), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def read_shard_list(index_url: str, entry: dict[str, Any]) -> ShardList:
    """The shard list file ``entry`` describes, its size, sha256 and row count checked."""
    from mvr.storage.integrity import ExpectedFile, FileCheck, IntegrityError, read_listed, unreadable

    expected = ExpectedFile(entry["path"], "shard list", int(entry["bytes"]), str(entry["sha256"]))
    data = read_listed(index_url, expected)
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(index_url, expected, exc, len(data)) from exc
    if table.num_rows != int(entry["count"]):
        raise IntegrityError(
            [FileCheck(expected.path, "shard list", "corrupted", expected.bytes, len(data), f"{table.num_rows} shards, the manifest says {entry['count']}")],
            index_url,
        )
    if not table.schema.equals(SHARD_LIST_SCHEMA, check_metadata=False):
        raise unreadable(index_url, expected, ValueError(f"columns {table.schema.names}, not {SHARD_LIST_SCHEMA.names}"), len(data))
    return ShardList.from_table(table)


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


class ConditionalWritesUnsupported(RuntimeError):
    """The index's store does not refuse a second exclusive create of one object: two
    writers could both commit a version, and one's change would be lost without a word."""


SINGLE_WRITER_SETTING = "storage.single_writer"


def commit_guard(index_url: str, single_writer: bool = False) -> dict[str, Any]:
    """How commits to a new index at ``index_url`` are kept from racing, decided before its
    first commit and recorded in its manifest (``Manifest.storage``): ``{"commits":
    "exclusive-create"}`` on a local filesystem (a hard link), or on a store that refused the
    probe's second exclusive create (``fs.exclusive_create_holds``: a conditional PUT it
    honours); on a store that did not, ``ConditionalWritesUnsupported`` unless
    ``single_writer`` (``SINGLE_WRITER_SETTING``: the user's word that one writer at a time
    commits), then ``{"commits": "single-writer"}``."""
    local = fs.is_local(index_url)
    if local or fs.exclusive_create_holds(index_url):
        return {"commits": "exclusive-create", "probed": not local}
    if single_writer:
        return {"commits": "single-writer", "probed": True}
    raise ConditionalWritesUnsupported(
        f"{index_url}: the store accepted a second exclusive create of the same object (a conditional PUT such as "
        "If-None-Match: * was ignored), so two writers could both commit a version and one's change would be lost; "
        f"use a store with conditional writes, or set {SINGLE_WRITER_SETTING}: true if only one writer at a time will ever "
        "write to this index (at your own risk: concurrent writers then lose commits)"
    )


class CommitConflict(RuntimeError):
    """Another writer committed the version this one tried to create."""


HISTORY_KEPT = 100


def commit_manifest(index_url: str, manifest: Manifest, based_on: Optional[int] = -1, operation: str = "commit", summary: str = "") -> Manifest:
    """Publish ``manifest`` as the version after ``based_on`` (the version the writer read and
    changed; None for a new index; -1, the default, for ``manifest.version`` as read): its
    shard list file first (named by its content, so never rewritten), then the exclusive
    create of ``versions/{N}.json`` (the commit point: ``CommitConflict`` when another writer
    created it first, and nothing of this commit is visible), then ``manifest.json`` (a
    pointer only: a full disk that refuses it after the commit point fails nothing). A new
    index's first commit decides ``manifest.storage`` (``commit_guard``) unless its writer has."""
    base = manifest.version if based_on == -1 else based_on
    if not base and not manifest.storage:  # a new index whose writer decided nothing: conditional writes or nothing
        manifest.storage = commit_guard(index_url)
    manifest.version = (base or 0) + 1
    data = shard_list_bytes(manifest.shards)
    digest = hashlib.sha256(data).hexdigest()
    rel = f"{SHARD_LISTS_DIR}/{digest[:16]}.parquet"
    if not fs.exists(fs.join(index_url, rel)):
        fs.write_bytes_atomic(fs.join(index_url, rel), data)
    manifest.shard_list = {"path": rel, "bytes": len(data), "sha256": digest, "count": len(manifest.shards)}
    manifest.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest.history = (manifest.history + [{"version": manifest.version, "operation": operation, "at": manifest.created_at, "summary": summary}])[
        -HISTORY_KEPT:
    ]
    body = json.dumps(manifest.model_dump(mode="json"), indent=1).encode()
    url = version_url(index_url, manifest.version)
    try:
        fs.create_exclusive(url, body)
    except FileExistsError:
        raise CommitConflict(f"version {manifest.version} of {index_url} was committed by another writer") from None
    except fs.ExclusiveCreateUnsupported:  # a store without conditional writes: only on the user's word (commit_guard)
        if manifest.storage.get("commits") != "single-writer":
            raise
        if fs.exists(url):
            raise CommitConflict(f"version {manifest.version} of {index_url} was committed by another writer") from None
        fs.write_bytes_atomic(url, body)
    try:
        fs.write_bytes_atomic(manifest_url(index_url), body)
    except OSError as exc:  # committed all the same: readers follow the versions past a stale pointer
        if not fs.no_space(exc):
            raise
    return manifest


def commit_update(
    index_url: str,
    change: Callable[[Manifest], Manifest],
    operation: str,
    summary: Callable[[Manifest], str] = lambda m: "",
    attempts: int = COMMIT_ATTEMPTS,
    log: Callable[[str], None] = lambda s: None,
) -> Manifest:
    """Optimistic concurrency: read the latest version, ``change`` it (a function of the
    manifest it is given: it re-applies the writer's change on top of whatever is latest, or
    raises to refuse), commit; on ``CommitConflict`` start again from the new latest, up to
    ``attempts`` times, then refuse with ``CommitConflict``."""
    for attempt in range(attempts):
        current = load_manifest(index_url)
        shards, current.shards = current.shards, []
        copy = current.model_copy(deep=True)
        copy.shards = current.shards = shards
        new = change(copy)
        try:
            return commit_manifest(index_url, new, current.version, operation, summary(new))
        except CommitConflict as exc:
            log(f"{exc}; applying the change again on top of it (attempt {attempt + 2} of {attempts})")
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise CommitConflict(f"{index_url}: {attempts} commits in a row lost to other writers; nothing of this {operation} was committed, run it again")
