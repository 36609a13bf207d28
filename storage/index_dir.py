"""Whole-index housekeeping: checking a target directory before any work, clearing what an
index wrote (``mvr index --overwrite``), removing orphan shards.

An index directory holds only the entries in ``INDEX_ENTRIES`` (and the temporary names of
their atomic writes, ``{name}.tmp-{32 hex}``, and of the write probe). Anything else under it is the user's: it is
never deleted, and an existing directory holding such files but no index is refused unless
``--overwrite`` says to index into it anyway."""

from __future__ import annotations

import os
import posixpath
import re
import uuid

from fsspec.implementations.local import LocalFileSystem

from mvr.storage import fs
from mvr.storage.shards import SHARDS_DIR, STAGING_DIR, codes_path

# What indexing, build-ann, build-bm25 and the live updates (add, delete, compact) write directly under INDEX (the constants live in
# storage/manifest.py, catalog.py, partitions.py and bm25_partitions.py; a test checks they
# match, without importing the ANN and BM25 libraries here).
MANIFEST_FILE = "manifest.json"
REJECTS_FILE = "rejects.parquet"
CATALOG_FILE = "catalog.duckdb"
CODECS_DIR = "codecs"
SHARD_LISTS_DIR = "shard-lists"
ANN_DIR = "ann"
BM25_DIR = "bm25"
VERSIONS_DIR = "versions"
ADDS_DIR = "adds"
TOMBSTONES_DIR = "tombstones"
CATALOGS_DIR = "catalogs"
COMPACTED_DIR = "compacted"
INDEX_FILES = (MANIFEST_FILE, REJECTS_FILE, CATALOG_FILE)
INDEX_DIRS = (SHARDS_DIR, STAGING_DIR, ANN_DIR, BM25_DIR, CODECS_DIR, SHARD_LISTS_DIR, VERSIONS_DIR, ADDS_DIR, TOMBSTONES_DIR, CATALOGS_DIR, COMPACTED_DIR)
INDEX_ENTRIES = INDEX_FILES + INDEX_DIRS
PROBE_PREFIX = fs.PROBE_PREFIX
_TMP = re.compile(r"(%s)\.tmp-[0-9a-f]{32}|%s[0-9a-f]{32}" % ("|".join(re.escape(n) for n in INDEX_FILES), re.escape(PROBE_PREFIX)))


class IndexTargetError(ValueError):
    """INDEX cannot be used: it overlaps the corpus, is a file, is not writable, or holds
    files that are not an index's."""


def is_index_entry(name: str) -> bool:
    """True for a name directly under INDEX that an index wrote (see ``INDEX_ENTRIES``)."""
    return name in INDEX_ENTRIES or _TMP.fullmatch(name) is not None


def entries(index_url: str) -> list[str]:
    """Names directly under ``index_url`` (sorted); [] when it does not exist."""
    filesystem, path = fs.resolve(index_url)
    if not filesystem.exists(path) or not filesystem.isdir(path):
        return []
    return sorted(posixpath.basename(e.rstrip("/")) for e in filesystem.ls(path, detail=False))


def foreign_entries(index_url: str) -> list[str]:
    """Names under ``index_url`` that no index wrote (the user's files)."""
    return [n for n in entries(index_url) if not is_index_entry(n)]


def check_target(corpus_url: str, index_url: str) -> None:
    """Refuse, before anything is read or deleted, an INDEX that is the corpus, holds it or
    lies inside the corpus directory, that is a regular file, or whose nearest existing
    ancestor is a file."""
    corpus_inside, index_inside = fs.within(corpus_url, index_url), fs.within(index_url, corpus_url)
    if corpus_inside and index_inside:
        raise IndexTargetError(f"the corpus and the index are the same path ({index_url}): give the index its own directory")
    if corpus_inside:
        raise IndexTargetError(
            f"the corpus {corpus_url} lies inside the index directory {index_url}: indexing there (or --overwrite) "
            "could delete or change it; move the corpus or give the index another directory"
        )
    if index_inside:
        raise IndexTargetError(
            f"the index directory {index_url} lies inside the corpus directory {corpus_url}: the index's files "
            "would be read as corpus files; give the index a directory outside the corpus"
        )
    filesystem, path = fs.resolve(index_url)
    if filesystem.exists(path) and not filesystem.isdir(path):
        raise IndexTargetError(f"{index_url} is a file, not a directory: give the index a new or existing directory")
    if isinstance(filesystem, LocalFileSystem):
        parent = os.path.realpath(path)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise IndexTargetError(f"cannot create the index directory {index_url}: {parent} is a file")


def check_corpus_outside(corpus_url: str, index_url: str) -> None:
    """Refuse documents to add (``mvr add INDEX CORPUS``) that are the index itself or lie
    inside it: its shards or rejects would be read as documents."""
    if fs.within(corpus_url, index_url):
        raise IndexTargetError(f"the corpus {corpus_url} is the index {index_url} or lies inside it: give the documents to add (mvr add INDEX CORPUS)")


def check_writable(index_url: str) -> None:
    """Create ``index_url`` if needed and write (then remove) a probe file in it:
    IndexTargetError with the system's reason when that fails (before any Ray work)."""
    try:
        filesystem, path = fs.resolve(index_url)
        filesystem.makedirs(path, exist_ok=True)
        probe = posixpath.join(path, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
        filesystem.pipe_file(probe, b"")
        filesystem.rm(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise IndexTargetError(f"cannot write to the index directory {index_url}: {reason}") from None


def clear(index_url: str, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove what an index wrote under ``index_url`` (``INDEX_ENTRIES`` and their
    temporary files), except the names in ``keep``; every other file stays (``mvr index
    --overwrite``). Returns the names removed."""
    removed = []
    for name in entries(index_url):
        if is_index_entry(name) and name not in keep:
            fs.remove(fs.join(index_url, name), recursive=True)
            removed.append(name)
    return removed


def remove_if_empty(index_url: str) -> bool:
    """Remove the directory ``index_url`` when it holds nothing (a failed first run's)."""
    filesystem, path = fs.resolve(index_url)
    if filesystem.exists(path) and filesystem.isdir(path) and not entries(index_url):
        if isinstance(filesystem, LocalFileSystem):
            filesystem.rmdir(path)
        else:
            filesystem.rm(path, recursive=True)
        return True
    return False


def remove_orphan_shards(index_url: str, keep: set[str]) -> int:
    """Delete shard files (Parquet and codes) no commit record lists (left by a killed run),
    and the temporary files of atomic writes a killed writer left half done (a writer still
    finishing one then fails its rename instead of leaving an orphan after the commit);
    ``keep``: the recorded shards' paths. Returns the count."""
    keep = keep | {codes_path(p) for p in keep}
    removed = 0
    for url in fs.list_files(fs.join(index_url, SHARDS_DIR), include_tmp=True):
        rel = f"{SHARDS_DIR}/{url.rstrip('/').rsplit('/', 1)[-1]}"
        if rel not in keep:
            fs.remove(url)
            removed += 1
    return removed
