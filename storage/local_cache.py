"""The node-local disk cache of files read from a remote index (object storage): a file a
process must open as a local file (``catalog.duckdb``, which DuckDB opens by path) is copied
here once per node and shared by every process there, instead of a temporary copy each.

An entry is named by what the remote file is: the sha256 of its URL, size and version tag
(the store's ETag, generation or modification time, as ``fs.info`` gives them), so a file
rewritten in place is a new entry and an unchanged one is never fetched again (a version
switch fetches only what changed). Entries are written to a temporary name and renamed into
place, so two processes filling one entry at once each write whole files and readers never
see half of one; the size is checked before the rename. Each use touches the entry; when the
cache holds more than its bound, the least recently used entries go (a reader that has the
file open keeps reading it).

Where: ``$MVR_CACHE_DIR``, else ``~/.cache/mvr``; the bound: ``$MVR_CACHE_BYTES`` (default
50 GB)."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

from mvr.storage import fs

CACHE_ENV = "MVR_CACHE_DIR"
BOUND_ENV = "MVR_CACHE_BYTES"
DEFAULT_BOUND = 50 << 30
FILES_DIR = "files"
TMP_MARK = ".tmp-"
STALE_TMP_S = 3600.0  # a temporary file this old is a killed writer's: removed by ``evict``


def cache_root() -> Path:
    """The cache's folder: ``$MVR_CACHE_DIR``, else ``~/.cache/mvr``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "mvr")


def _bound() -> int:
    return int(os.environ.get(BOUND_ENV) or DEFAULT_BOUND)


def entry_key(url: str) -> tuple[str, int]:
    """(the cache entry's name for the remote file ``url`` as it is now, its size in bytes)."""
    info = fs.info(url)
    size = int(info.get("size") or 0)
    tag = next((str(info[k]) for k in ("ETag", "etag", "generation", "md5Hash", "LastModified", "mtime", "updated") if info.get(k) is not None), "")
    digest = hashlib.sha256(json.dumps([url, size, tag]).encode()).hexdigest()[:32]
    suffix = Path(url.rstrip("/")).suffix
    return digest + suffix, size


def local_copy(url: str) -> str:
    """A local path holding the bytes of ``url``: the path itself for a local file, else this
    node's cache entry for it (fetched when missing, written atomically, size-checked)."""
    if fs.is_local(url):
        return fs.resolve(url)[1]
    name, size = entry_key(url)
    folder = cache_root() / FILES_DIR
    path = folder / name
    try:
        if path.stat().st_size == size:
            os.utime(path)  # recently used
            return str(path)
    except FileNotFoundError:  # not cached, or another process's eviction removed it just now: fetch it
        pass
    folder.mkdir(parents=True, exist_ok=True)
    data = fs.read_bytes(url)
    if len(data) != size:
        raise OSError(f"{url}: read {len(data)} bytes, the store lists {size}; it changed while being read, try again")
    tmp = folder / f"{name}{TMP_MARK}{uuid.uuid4().hex}"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)  # a reader sees the whole file or none
    finally:
        tmp.unlink(missing_ok=True)
    evict(keep=path)
    return str(path)


def evict(keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries while the cache holds more than its bound
    (never ``keep``, the entry just used), and killed writers' temporary files; the removed
    paths."""
    folder = cache_root() / FILES_DIR
    entries = []
    for p in folder.iterdir() if folder.exists() else ():
        try:
            st = p.stat()
        except FileNotFoundError:  # another process removed it meanwhile
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total, bound, removed, now = sum(e[1] for e in entries), _bound(), [], time.time()
    for mtime, size, p in sorted(entries):
        writing = TMP_MARK in p.name
        if p == keep or (writing and now - mtime < STALE_TMP_S) or (not writing and total <= bound):
            continue  # in use, another process's entry being written, or room enough
        p.unlink(missing_ok=True)
        total -= size
        removed.append(p)
    return removed
