"""The node-local disk cache of files read from a remote index (object storage). The files a
process maps or opens by path are copied here once per node and shared by every process
there, then opened as a local index's are: the shards' codes (memory-mapped, so a replica
serving from a bucket holds no more in RAM than one serving from local disk), a partition's
ANN and BM25 files (``staged``: hard links under their own names, for the libraries that
load a folder), and ``catalog.duckdb`` (which DuckDB opens by path).

An entry is named by what the remote file is. A file the manifest lists with its sha256
(codes, partition files) is named by that sha256 (``listed_copy``): fetched once per node
whatever version or path lists it, so a version switch fetches only the files it changed,
and a cached file is used without asking the store anything. Its size and sha256 are
checked while it streams in, as ``mvr verify`` checks them, before it is renamed into place.
Another file (``local_copy``) is named by the sha256 of its URL, size and version tag (the
store's ETag, generation or modification time, as ``fs.info`` gives them), so a file
rewritten in place is a new entry. Entries are written to a temporary name and renamed into
place, so two processes filling one entry at once each write whole files and readers never
see half of one. Each use touches the entry; when the cache holds more than its bound, the
least recently used entries go (a process that has the file mapped or open keeps reading it;
its disk space is freed when it lets go, so size the bound above what a node serves).

Where: ``$MVR_CACHE_DIR``, else ``~/.cache/mvr``; the bound: ``$MVR_CACHE_BYTES`` (default
50 GB)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from mvr.storage import fs
from mvr.storage.integrity import CHUNK, ExpectedFile, IntegrityError, digest_check, missing

CACHE_ENV = "MVR_CACHE_DIR"
BOUND_ENV = "MVR_CACHE_BYTES"
DEFAULT_BOUND = 50 << 30
FILES_DIR = "files"
STAGING_DIR = "staging"  # ``staged`` folders: hard links to entries, under the names a library loads
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

    def check(got: int, _digest: str) -> None:
        if got != size:
            raise OSError(f"{url}: read {got} bytes, the store lists {size}; it changed while being read, try again")

    return _cached(url, name, size, check)


def listed_copy(index_url: str, expected: ExpectedFile, recheck: bool = False) -> str:
    """A local path holding the bytes of the file ``expected`` names (a manifest entry of the
    index at ``index_url``, with its size and sha256): the file itself in a local index, else
    this node's cache entry named by its sha256, streamed in when missing (size and sha256
    checked before it is renamed into place). ``recheck``: hash a cached entry again, and
    fetch it anew when it no longer matches. ``IntegrityError`` when the remote file is
    missing or does not match the manifest (nothing is cached then)."""
    url = fs.join(index_url, expected.path)
    if fs.is_local(url):
        return fs.resolve(url)[1]
    if expected.sha256 is None or expected.bytes is None:  # an entry without a checksum: cached by URL
        return local_copy(url)

    def check(size: int, digest: str) -> None:
        problem = digest_check(expected, size, digest)
        if problem is not None:
            raise IntegrityError([problem], index_url)

    try:
        return _cached(url, expected.sha256 + Path(expected.path).suffix, expected.bytes, check, expected.sha256 if recheck else None)
    except FileNotFoundError:
        raise missing(index_url, expected) from None


def _cached(url: str, name: str, size: int, check: Callable[[int, str], None], digest: Optional[str] = None) -> str:
    """The cache entry ``name`` of the remote file ``url``: used when it holds ``size`` bytes
    (and, given ``digest``, that sha256), else streamed in, ``check(size, sha256)`` raising
    for bytes that are not the file's, and renamed into place."""
    folder = cache_root() / FILES_DIR
    path = folder / name
    try:
        if path.stat().st_size == size and (digest is None or _sha256(path) == digest):
            os.utime(path)  # recently used
            return str(path)
    except FileNotFoundError:  # not cached, or another process's eviction removed it just now
        pass
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{name}{TMP_MARK}{uuid.uuid4().hex}"
    try:
        h, got = hashlib.sha256(), 0
        with fs.open_file(url) as src, open(tmp, "wb") as dst:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                h.update(chunk)
                dst.write(chunk)
                got += len(chunk)
        check(got, h.hexdigest())
        os.replace(tmp, path)  # a reader sees the whole file or none
    finally:
        tmp.unlink(missing_ok=True)
    evict(keep=path)
    return str(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def staged(index_url: str, files: Sequence[tuple[str, ExpectedFile]], recheck: bool = False) -> Iterator[str]:
    """A local folder holding ``files`` ((name in the folder, manifest entry) pairs) of the
    remote index at ``index_url`` under their names, for a library that loads a folder: hard
    links to this node's cache entries (``listed_copy``), so an eviction meanwhile cannot take
    a file from under the load, and whatever the load maps stays readable after the folder
    is removed on exit."""
    folder = cache_root() / STAGING_DIR / uuid.uuid4().hex
    folder.mkdir(parents=True)
    try:
        for name, expected in files:
            entry = listed_copy(index_url, expected, recheck)
            try:
                os.link(entry, folder / name)
            except OSError:  # a cache whose folders are on two filesystems: a copy
                shutil.copyfile(entry, folder / name)
        yield str(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def evict(keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries while the cache holds more than its bound
    (never ``keep``, the entry just used), and killed writers' temporary files and staged
    folders; the removed entries' paths."""
    staging = cache_root() / STAGING_DIR
    for d in staging.iterdir() if staging.exists() else ():  # a killed process's staged folder
        with contextlib.suppress(FileNotFoundError):
            if time.time() - d.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(d, ignore_errors=True)
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
