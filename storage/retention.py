"""Retention: which files of an index may be deleted, and deleting them.

A live index accumulates files: every add, delete, compaction and build commits a version
that lists its own files (shards, shard list, tombstones, catalog, ANN and BM25 partitions,
codecs, rejects) and refers to most of its predecessor's. Nothing is ever rewritten in place,
so a reader of version N keeps reading N's files while newer versions are committed. Files
are deleted here only when

- no **retained** version lists them: the latest ``keep_versions`` versions (at least the
  latest; 2 by default, so a replica still serving the previous version keeps working until
  it switches), and
- they are older than ``grace_s`` seconds: a file no version lists yet may belong to a
  writer still at work (an ``mvr add`` workspace under ``adds/``, a build directory, a
  compaction's shards), or to one that was killed (collected once the grace has passed).

The version files of versions no longer retained are deleted too; ``read_manifest(version=N)``
then says the version is not kept."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional

from mvr.storage import fs
from mvr.storage.manifest import MANIFEST_FILE, SHARD_LISTS_DIR, VERSIONS_DIR, Manifest, list_versions, read_manifest, version_url

KEEP_VERSIONS = 2
GRACE_S = 3600.0
# directories under INDEX whose files belong to versions (everything an index writes except
# manifest.json and the staging directory of an unfinished `mvr index`)
MANAGED = ("shards", "adds", "compacted", SHARD_LISTS_DIR, "tombstones", "catalogs", "ann", "bm25", "codecs", VERSIONS_DIR)
TOP_FILES = ("catalog.duckdb", "rejects.parquet")


@dataclass
class Collected:
    """What ``collect`` did: files deleted (relative paths), bytes freed, versions dropped."""

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    versions: list[int] = field(default_factory=list)

    @property
    def summary(self) -> str:
        return f"removed {len(self.files)} unreferenced file(s) ({self.bytes / 1e6:.1f} MB) and {len(self.versions)} old version(s)"


def referenced(m: Manifest) -> tuple[set[str], tuple[str, ...]]:
    """(files, directory prefixes) version ``m`` lists, relative to the index."""
    files: set[str] = {m.catalog, m.rejects, version_url("", m.version).lstrip("/")}
    if m.shard_list:
        files.add(m.shard_list["path"])
    if m.tombstones:
        files.add(m.tombstones["path"])
    for entry in m.codecs.values():
        files.add(entry["path"])
    for add in m.adds:
        if add.get("rejects"):
            files.add(add["rejects"])
    cols = m.shards.columns if hasattr(m.shards, "columns") else None
    if cols is not None:
        files.update(cols["path"].to_pylist())
        files.update(cols["codes"].to_pylist())
    else:
        for s in m.shards:
            files.update((s.path, s.codes))
    dirs = [p["path"] for entry in m.ann.values() for p in entry.get("partitions", [])]
    dirs += [p["path"] for p in m.bm25.get("partitions", [])] if m.bm25 else []
    return files, tuple(d.rstrip("/") + "/" for d in dirs)


def _walk(index_url: str) -> Iterable[tuple[str, int, float]]:
    """(relative path, bytes, modification time) of every file under the managed directories
    and of the top-level files an index writes."""
    filesystem, root = fs.resolve(index_url)
    root = root.rstrip("/")
    for name in MANAGED:
        base = f"{root}/{name}"
        if not filesystem.exists(base):
            continue
        for path, info in filesystem.find(base, detail=True).items():
            yield path[len(root) + 1 :], int(info.get("size") or 0), _mtime(info)
    for name in TOP_FILES:
        if filesystem.exists(f"{root}/{name}"):
            info = filesystem.info(f"{root}/{name}")
            yield name, int(info.get("size") or 0), _mtime(info)


def _mtime(info: dict) -> float:
    for key in ("mtime", "LastModified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return 0.0  # unknown: treated as old


def collect(index_url: str, keep_versions: int = KEEP_VERSIONS, grace_s: float = GRACE_S, now: Optional[float] = None) -> Collected:
    """Delete the files no retained version lists (module docstring), the version files of
    versions no longer retained, and (local indexes) the directories left empty."""
    if keep_versions < 1:
        raise ValueError(f"keep_versions must be at least 1, got {keep_versions}")
    latest = read_manifest(index_url)
    if latest is None:
        return Collected()
    kept = [v for v in list_versions(index_url) if v > latest.version - keep_versions]
    manifests = [latest] + [read_manifest(index_url, v) for v in kept if v != latest.version]
    files: set[str] = {MANIFEST_FILE}
    dirs: tuple[str, ...] = ()
    for m in manifests:
        f, d = referenced(m)
        files |= f
        dirs += d
    now = time.time() if now is None else now
    out = Collected()
    for rel, size, mtime in _walk(index_url):
        if rel in files or rel.startswith(dirs) or now - mtime < grace_s:
            continue
        fs.remove(fs.join(index_url, rel))
        out.files.append(rel)
        out.bytes += size
        if rel.startswith(VERSIONS_DIR + "/"):
            stem = rel.rsplit("/", 1)[-1].split(".")[0]
            if stem.isdigit():
                out.versions.append(int(stem))
    _remove_empty_dirs(index_url)
    return out


def _remove_empty_dirs(index_url: str) -> None:
    local = fs.local_path(index_url)
    if local is None:
        return  # object stores have no directories
    for name in MANAGED:
        base = os.path.join(local, name)
        for dirpath, _, _ in sorted(os.walk(base), key=lambda t: -len(t[0])):
            if dirpath != base and not os.listdir(dirpath):
                os.rmdir(dirpath)
