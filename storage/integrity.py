"""Checked reads of the files a manifest lists: one file against its recorded size and
sha256 (``check_file``, ``read_listed``), many at once (``check_files``, ``require_intact``),
and the error naming every bad one (``IntegrityError``). ``storage/manifest.py`` reads its
shard list through it; ``storage/verify.py`` audits a whole index with it.

A file is ``ok``, ``missing``, ``truncated`` (shorter than listed), ``oversized`` (longer
than listed), ``corrupted`` (listed size, other sha256) or ``unreadable`` (a reader could not
decode it). Sizes are compared first, so only files of the right size are hashed; hashing
streams 1 MiB chunks and runs ``workers`` files at a time (hashlib releases the GIL, and
object stores answer in parallel)."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from mvr.storage import fs

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


def check_file(index_url: str, expected: ExpectedFile, sha256: bool = True) -> FileCheck:
    """Size, then (when the size matches, and with ``sha256``) sha256 of one listed file."""
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
    if not sha256:
        return result("ok", size, "size matches (sha256 not checked)")
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
    index_url: str, files: Sequence[ExpectedFile], workers: int = 4, progress: Optional[Callable[[FileCheck], None]] = None, sha256: bool = True
) -> list[FileCheck]:
    """``check_file`` on each of ``files``, ``workers`` at a time; results in the given order.
    ``progress`` is called with each result as it completes; without ``sha256``, sizes only."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")

    def one(e: ExpectedFile) -> FileCheck:
        c = check_file(index_url, e, sha256)
        if progress is not None:
            progress(c)
        return c

    if workers == 1 or len(files) <= 1:
        return [one(e) for e in files]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mvr-verify") as pool:
        return list(pool.map(one, files))


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
        problem = digest_check(expected, len(data), hashlib.sha256(data).hexdigest())
    if problem is not None:
        raise IntegrityError([problem], index_url)


def digest_check(expected: ExpectedFile, size: int, digest: str) -> Optional[FileCheck]:
    """The problem when a file of ``size`` bytes with sha256 ``digest`` (hex) is not the size or
    the checksum the manifest lists (None when it is both, or the manifest lists neither)."""
    problem = size_check(expected, size)
    if problem is None and expected.sha256 is not None and digest != expected.sha256:
        detail = f"sha256 {digest[:12]}…, the manifest lists {expected.sha256[:12]}…"
        problem = FileCheck(expected.path, expected.group, "corrupted", expected.bytes, size, detail)
    return problem


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


def require_intact(index_url: str, files: Sequence[ExpectedFile], workers: int = 1, sha256: bool = True) -> None:
    """Raise ``IntegrityError`` naming every one of ``files`` that is missing, truncated,
    oversized or (with ``sha256``) corrupted; return quietly when all match the manifest."""
    problems = [c for c in check_files(index_url, files, workers, sha256=sha256) if not c.ok]
    if problems:
        raise IntegrityError(problems, index_url)
