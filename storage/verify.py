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

A file is ``ok``, ``missing``, ``truncated`` (shorter than listed), ``oversized`` (longer
than listed) or ``corrupted`` (listed size, other sha256). Sizes are compared first, so
only files of the right size are hashed; hashing streams 1 MiB chunks and runs ``workers``
files at a time (hashlib releases the GIL, and object stores answer in parallel).

``require_intact`` is the guard for jobs that read files (e.g. the ANN build before it
reads its shards): it raises ``IntegrityError`` (a ValueError) naming every bad file. Readers
raise it too (status ``unreadable`` for a file that cannot be decoded): search compares a
shard's or partition file's size with the manifest when it opens it, and the sha256 where it
reads the whole file anyway (``storage.shards.read_shard_checked``, the codec file).
Codes files are memory-mapped, not read whole: their size is compared when they are opened,
their sha256 by ``mvr verify``."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from storage import fs
from storage.manifest import Manifest, load_manifest

CHUNK = 1 << 20  # bytes hashed at a time
STATUSES = ("ok", "missing", "truncated", "oversized", "corrupted", "unreadable")


class IntegrityError(ValueError):
    """Files of an index that are missing or do not match the manifest (or cannot be read);
    the message names each file and the ``mvr verify`` command that checks them all."""

    def __init__(self, problems: Sequence[FileCheck], index_url: Optional[str] = None) -> None:
        self.problems = list(problems)
        self.index_url = index_url
        names = "; ".join(f"{c.path}: {c.status} ({c.detail})" for c in self.problems)
        where = f" {index_url}" if index_url else ""
        super().__init__(
            f"{len(self.problems)} file(s) of the index{where} do not match the manifest: {names}; "
            f"run `mvr verify {index_url or 'INDEX'}` to check every file (rebuild the index, or its ANN / BM25 "
            "partitions with `mvr build-ann --force`, to repair it)"
        )

    def __reduce__(self):  # pickled as its problems, so it crosses Ray task boundaries
        return (type(self), (self.problems, self.index_url))


@dataclass(frozen=True)
class ExpectedFile:
    """A file the manifest lists: ``path`` relative to the index, what it is (``group``,
    e.g. "shard", "ann tokens part 0", "bm25 part 1"), its size in bytes and sha256 (hex),
    both None when the manifest records only the name."""

    path: str
    group: str
    bytes: Optional[int]
    sha256: Optional[str]


@dataclass(frozen=True)
class FileCheck:
    """The outcome for one listed file: ``status`` in STATUSES, ``actual_bytes`` (None when
    missing) and a human-readable ``detail``."""

    path: str
    group: str
    status: str
    expected_bytes: Optional[int]
    actual_bytes: Optional[int]
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


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
    from storage.manifest import shard_lookup

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


def check_file(index_url: str, expected: ExpectedFile) -> FileCheck:
    """Size, then (when the size matches) sha256 of one listed file."""
    url = fs.join(index_url, expected.path)

    def result(status: str, actual: Optional[int], detail: str) -> FileCheck:
        return FileCheck(expected.path, expected.group, status, expected.bytes, actual, detail)

    try:
        info = fs.info(url)
    except FileNotFoundError:
        return result("missing", None, "listed in the manifest, not found")
    if info.get("type", "file") != "file":
        return result("missing", None, f"a {info.get('type')} where a file is listed")
    size = int(info.get("size") or 0)
    if expected.bytes is None:
        return result("ok", size, "present (the manifest records no size or checksum)")
    if size < expected.bytes:
        return result("truncated", size, f"{size:,} bytes, the manifest lists {expected.bytes:,}")
    if size > expected.bytes:
        return result("oversized", size, f"{size:,} bytes, the manifest lists {expected.bytes:,}")
    try:
        digest = sha256_of(url)
    except FileNotFoundError:  # removed while we looked
        return result("missing", None, "disappeared while being checked")
    if digest != expected.sha256:
        return result("corrupted", size, f"sha256 {digest[:12]}…, the manifest lists {str(expected.sha256)[:12]}…")
    return result("ok", size, "size and sha256 match")


def sha256_of(url: str) -> str:
    """Hex sha256 of a file at ``url``, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with fs.open_file(url) as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def check_files(
    index_url: str, files: Sequence[ExpectedFile], workers: int = 4, progress: Optional[Callable[[FileCheck], None]] = None
) -> list[FileCheck]:
    """``check_file`` on each of ``files``, ``workers`` at a time; results in the given order.
    ``progress`` is called with each result as it completes."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")

    def one(e: ExpectedFile) -> FileCheck:
        c = check_file(index_url, e)
        if progress is not None:
            progress(c)
        return c

    if workers == 1 or len(files) <= 1:
        return [one(e) for e in files]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mvr-verify") as pool:
        return list(pool.map(one, files))


def verify_index(
    index_url: str, workers: int = 4, progress: Optional[Callable[[FileCheck], None]] = None, manifest: Optional[Manifest] = None
) -> VerifyReport:
    """Check every file the committed manifest of ``index_url`` lists (FileNotFoundError
    when there is no manifest)."""
    manifest = manifest or load_manifest(index_url)
    return VerifyReport(index_url, manifest.version, check_files(index_url, expected_files(manifest), workers, progress))


def size_check(expected: ExpectedFile, actual: int) -> Optional[FileCheck]:
    """The problem when a file of ``actual`` bytes is not the size the manifest lists (None
    when it is, or when the manifest lists no size)."""
    if expected.bytes is None or actual == expected.bytes:
        return None
    status = "truncated" if actual < expected.bytes else "oversized"
    return FileCheck(expected.path, expected.group, status, expected.bytes, actual, f"{actual:,} bytes, the manifest lists {expected.bytes:,}")


def check_data(index_url: str, expected: ExpectedFile, data: bytes, sha256: bool = True) -> None:
    """Raise ``IntegrityError`` when ``data`` (the whole file just read) is not the size the
    manifest lists or, with ``sha256``, has another checksum."""
    problem = size_check(expected, len(data))
    if problem is None and sha256 and expected.sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected.sha256:
            detail = f"sha256 {digest[:12]}…, the manifest lists {expected.sha256[:12]}…"
            problem = FileCheck(expected.path, expected.group, "corrupted", expected.bytes, len(data), detail)
    if problem is not None:
        raise IntegrityError([problem], index_url)


def read_listed(index_url: str, expected: ExpectedFile, sha256: bool = True) -> bytes:
    """The whole file ``expected`` names: ``IntegrityError`` when it is missing or not the size
    the manifest lists, or (with ``sha256``) has another checksum."""
    try:
        data = fs.read_bytes(fs.join(index_url, expected.path))
    except FileNotFoundError:
        raise missing(index_url, expected) from None
    check_data(index_url, expected, data, sha256)
    return data


def missing(index_url: str, expected: ExpectedFile) -> IntegrityError:
    """The error for a listed file that is not there."""
    return IntegrityError([FileCheck(expected.path, expected.group, "missing", expected.bytes, None, "listed in the manifest, not found")], index_url)


def unreadable(index_url: str, expected: ExpectedFile, exc: BaseException, size: Optional[int] = None) -> IntegrityError:
    """The error for a listed file that cannot be decoded (``exc``: the reader's error)."""
    text = " ".join(str(exc).split())
    detail = f"cannot be read: {type(exc).__name__}: {text[:200]}"
    return IntegrityError([FileCheck(expected.path, expected.group, "unreadable", expected.bytes, size, detail)], index_url)


def require_intact(index_url: str, files: Sequence[ExpectedFile], workers: int = 1) -> None:
    """Raise ``IntegrityError`` naming every one of ``files`` that is missing, truncated,
    oversized or corrupted; return quietly when all match the manifest."""
    problems = [c for c in check_files(index_url, files, workers) if not c.ok]
    if problems:
        raise IntegrityError(problems, index_url)
