"""Integrity of a committed index: every file the manifest lists, against its recorded size
and sha256.

What the manifest records (``storage/manifest.py``):

- ``shards[i]``: ``path``, ``bytes``, ``sha256`` and ``codes``, ``codes_bytes``,
  ``codes_sha256`` (its two files, written by ``storage.shards.write_shard``);
- ``codecs[group]``: ``path``, ``bytes``, ``sha256`` of each codec file (``storage.codec_file``);
- ``shard_list``: ``path``, ``bytes``, ``sha256`` of the shard list file the shard entries
  are read from (``storage.manifest``);
- ``ann[kind]["partitions"][j]["files"][name]`` = ``{bytes, sha256}``, ``name`` relative to
  the partition's ``path`` (``storage.partitions.write_files``);
- ``bm25["partitions"][j]["files"][name]`` likewise (``storage.bm25_partitions``);
- ``rejects`` and ``catalog``: names only (no size or checksum), so only their presence is
  checked.

Each file is checked as ``storage/integrity.py`` checks one (size first, then sha256).

``require_intact`` (``storage/integrity.py``) is the guard for jobs that read files (e.g. the ANN build before it
reads its shards): it raises ``IntegrityError`` (a ValueError) naming every bad file. Readers
raise it too (status ``unreadable`` for a file that cannot be decoded): search compares a
shard's or partition file's size with the manifest when it opens it, and the sha256 where it
reads the whole file anyway (``storage.shards.read_shard_checked``, the codec file).
Codes files are memory-mapped, not read whole: their size is compared when they are opened,
their sha256 by ``mvr verify``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from mvr.storage.integrity import ExpectedFile, FileCheck, check_files
from mvr.storage.manifest import Manifest, load_manifest, shard_lookup


@dataclass
class VerifyReport:
    """Every listed file's check, in manifest order (shards, ANN kinds, BM25, rejects, catalog)."""

    index_url: str
    manifest_version: int
    checks: list[FileCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[FileCheck]:
        return [c for c in self.checks if not c.ok]

    def summary(self) -> list[tuple[str, int, Optional[int], int]]:
        """Per kind of file ("shard", "ann tokens", "bm25", …): (what, files, listed bytes
        (None when the manifest records no sizes for them), bad files)."""
        out: dict[str, list] = {}
        for c in self.checks:
            row = out.setdefault(_summary_key(c.group), [0, None, 0])
            row[0] += 1
            if c.expected_bytes is not None:
                row[1] = (row[1] or 0) + c.expected_bytes
            row[2] += 0 if c.ok else 1
        return [(k, n, listed, bad) for k, (n, listed, bad) in out.items()]


def _summary_key(group: str) -> str:
    if group.startswith("ann "):
        return " ".join(group.split()[:2])  # "ann tokens part 3" → "ann tokens"
    if group.startswith("bm25"):
        return "bm25"
    return group


def expected_files(manifest: Manifest) -> list[ExpectedFile]:
    """Every file ``manifest`` lists, with its recorded size and sha256 when it has them."""
    out = shard_files(manifest)
    if manifest.shard_list:
        sl = manifest.shard_list
        out.append(ExpectedFile(sl["path"], "shard list", int(sl["bytes"]), str(sl["sha256"])))
    out.extend(codec_files(manifest))
    for kind, entry in manifest.ann.items():
        for j, part in enumerate(entry.get("partitions", [])):
            out.extend(_partition_files(part, f"ann {kind} part {j}"))
    for j, part in enumerate(manifest.bm25.get("partitions", []) if manifest.bm25 else []):
        out.extend(_partition_files(part, f"bm25 part {j}"))
    if manifest.tombstones:
        t = manifest.tombstones
        out.append(ExpectedFile(t["path"], "tombstones", int(t["bytes"]), str(t["sha256"])))
    for name, group in [(manifest.rejects, "rejects"), (manifest.catalog, "catalog")] + [(a.get("rejects"), "rejects") for a in manifest.adds]:
        if name:
            out.append(ExpectedFile(name, group, None, None))
    return out


def shard_files(manifest: Manifest, paths: Optional[Iterable[str]] = None, codes: bool = True) -> list[ExpectedFile]:
    """The manifest's shards (only those at ``paths``, relative to the index, when given) as
    expected files: each one's Parquet file and (with ``codes``) its codes file. ValueError
    for a path the manifest does not list."""
    entries = list(manifest.shards) if paths is None else []
    if paths is not None:
        unknown = []
        for p in dict.fromkeys(paths):
            try:
                entries.append(shard_lookup(manifest.shards, p))
            except KeyError:
                unknown.append(p)
        if unknown:
            raise ValueError(f"not shards of this index's manifest: {', '.join(unknown)}")
    out = []
    for s in entries:
        out.append(ExpectedFile(s.path, "shard", s.bytes, s.sha256))
        if codes:
            out.append(codes_file(s))
    return out


def codes_file(shard: Any) -> ExpectedFile:
    """The codes file of a manifest shard entry as an expected file."""
    return ExpectedFile(shard.codes, "shard codes", shard.codes_bytes, shard.codes_sha256)


def codec_files(manifest: Manifest) -> list[ExpectedFile]:
    """The index's codec files as expected files."""
    return [ExpectedFile(c["path"], "codec", int(c["bytes"]), str(c["sha256"])) for _, c in sorted(manifest.codecs.items())]


def _partition_files(part: dict, group: str) -> list[ExpectedFile]:
    rel = part["path"].rstrip("/")
    return [ExpectedFile(f"{rel}/{name}", group, int(f["bytes"]), str(f["sha256"])) for name, f in sorted(part.get("files", {}).items())]


def verify_index(index_url: str, workers: int = 4, progress: Optional[Callable[[FileCheck], None]] = None, manifest: Optional[Manifest] = None) -> VerifyReport:
    """Check every file the committed manifest of ``index_url`` lists (FileNotFoundError
    when there is no manifest)."""
    manifest = manifest or load_manifest(index_url)
    return VerifyReport(index_url, manifest.version, check_files(index_url, expected_files(manifest), workers, progress))
