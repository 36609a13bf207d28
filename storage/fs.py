"""fsspec paths: every file the project reads or writes goes through here.

URLs are local paths or any fsspec URL (``memory://``; ``s3://`` and ``gs://`` with mvr's
``s3`` / ``gcs`` extra installed: ``StorageDriverMissing`` names the extra otherwise). Writes
are atomic: a local file is written to a temporary name and renamed; an object store's
single PUT is atomic already.
"""

from __future__ import annotations

import errno
import os
import posixpath
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

# URL protocols whose fsspec driver is an extra of mvr's: (the driver's package, the extra)
DRIVER_EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}


class StorageDriverMissing(ValueError):
    """A URL of a protocol whose fsspec driver (an extra of mvr's) is not installed."""


def resolve(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it) for a URL or local path; ``StorageDriverMissing`` naming
    the extra to install for an ``s3://`` or ``gs://`` URL without its driver."""
    protocol = fsspec.core.split_protocol(str(url))[0]
    try:
        # an object store's listings read fresh each time (s3fs and gcsfs keep them forever by
        # default): a long-lived reader (a service, its reloader) sees the versions committed since
        fs, path = fsspec.core.url_to_fs(str(url), **({"use_listings_cache": False} if protocol in DRIVER_EXTRAS else {}))
    except ImportError as exc:
        if protocol not in DRIVER_EXTRAS:
            raise
        package, extra = DRIVER_EXTRAS[protocol]
        raise StorageDriverMissing(f"{url}: {protocol}:// URLs need the {package} package: pip install 'mvr[{extra}]'") from exc
    return fs, path


def join(url: str, *parts: str) -> str:
    """Join path parts onto a URL, keeping its protocol."""
    base = str(url).rstrip("/")
    return posixpath.join(base, *parts) if parts else base


def is_local(url: str) -> bool:
    return isinstance(resolve(url)[0], LocalFileSystem)


def within(url: str, root: str) -> bool:
    """Whether ``url`` is ``root`` or lies below it (local paths with links resolved; other
    URLs compared on one file system as written)."""
    fs_u, u = resolve(url)
    fs_r, r = resolve(root)
    if type(fs_u) is not type(fs_r):
        return False
    if isinstance(fs_u, LocalFileSystem):
        u, r = os.path.realpath(u), os.path.realpath(r)
    u, r = u.rstrip("/"), r.rstrip("/")
    return u == r or u.startswith(r + "/")


def exists(url: str) -> bool:
    fs, path = resolve(url)
    return fs.exists(path)


def read_bytes(url: str) -> bytes:
    fs, path = resolve(url)
    return fs.cat_file(path)


def open_file(url: str, mode: str = "rb", **kwargs: Any):
    fs, path = resolve(url)
    return fs.open(path, mode, **kwargs)


def write_bytes_atomic(url: str, data: bytes) -> None:
    """Write ``data`` so that readers see either nothing or the whole file. A failed local
    write leaves no temporary file; a full disk's OSError names ``url``."""
    fs, path = _resolve_made_parent(url)
    if isinstance(fs, LocalFileSystem):
        tmp = _local_tmp_file(path, url, data, fsync=False)
        try:
            os.replace(tmp, path)  # atomic on one filesystem
        except OSError as exc:
            raise _write_failed(exc, tmp, url)  # noqa: B904 - the cause is set there (or the error is exc itself)
    else:
        fs.pipe_file(path, data)


def _resolve_made_parent(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """``resolve(url)``, the file's parent directory made first."""
    fs, path = resolve(url)
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    return fs, path


def _local_tmp_file(path: str, url: str, data: bytes, fsync: bool) -> str:
    """``data`` in a new temporary file beside the local ``path`` (flushed to the disk when
    ``fsync``): its path. A failed write leaves no temporary file (``_write_failed``)."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except OSError as exc:
        raise _write_failed(exc, tmp, url)  # noqa: B904 - the cause is set there (or the error is exc itself)
    return tmp


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a full quota


def _write_failed(exc: OSError, tmp: str, url: str) -> OSError:
    """The error to raise for a local write to ``url`` that failed with ``exc``, once its
    temporary file ``tmp`` is removed (a full disk keeps none of a failed write's bytes): a
    full disk's error that names no file (a write's) as one naming ``url``, else ``exc``."""
    try:
        os.unlink(tmp)
    except OSError:
        pass
    if no_space(exc) and exc.filename is None:
        assert exc.errno is not None  # no_space: the errno is ENOSPC or EDQUOT
        named = OSError(exc.errno, exc.strerror or os.strerror(exc.errno), url)
        named.__cause__ = exc
        return named
    return exc


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk's (or a full quota's) OSError."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


class ExclusiveCreateUnsupported(RuntimeError):
    """The filesystem cannot create a file only if it does not exist yet."""


def create_exclusive(url: str, data: bytes) -> None:
    """Create ``url`` holding ``data`` only if nothing is there yet, atomically: FileExistsError
    when another writer created it first (the loser writes nothing). Readers see nothing or
    the whole file. Local: the bytes go to a temporary file, hard-linked to the name (``link``
    fails if the name exists). Elsewhere: the filesystem's exclusive mode (``open(…, "xb")``:
    a conditional PUT such as S3's ``If-None-Match: *`` or GCS's ``ifGenerationMatch=0``);
    ``ExclusiveCreateUnsupported`` when it has none, rather than a commit that could race."""
    fs, path = _resolve_made_parent(url)
    if isinstance(fs, LocalFileSystem):
        tmp = _local_tmp_file(path, url, data, fsync=True)
        try:
            os.link(tmp, path)
        finally:
            os.unlink(tmp)
        return
    try:
        f = fs.open(path, "xb")
    except FileExistsError:
        raise
    except (ValueError, NotImplementedError, TypeError) as exc:
        raise ExclusiveCreateUnsupported(
            f"{type(fs).__name__} cannot create {url} only if it is absent ({exc}); commits to this index could race: "
            "use a filesystem with conditional writes (local, S3 with If-None-Match, GCS)"
        ) from exc
    with f:
        f.write(data)


PROBE_PREFIX = ".mvr-write-probe-"  # + 32 hex digits: a probe object's name (``storage/index_dir.py`` knows it as its own)


def exclusive_create_holds(url: str) -> bool:
    """Whether the store under the directory ``url`` refuses a second exclusive create of one
    name, as concurrent commits need (``create_exclusive``): a probe object created there
    twice, then removed. Some S3-compatible stores and gateways accept ``If-None-Match: *``
    and ignore it, and fsspec's drivers accept ``"xb"`` whatever the store does: only the
    store's answer tells. A local filesystem (``link``) holds."""
    if is_local(url):
        return True
    probe = join(url, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        create_exclusive(probe, b"1")
        try:
            create_exclusive(probe, b"2")
        except FileExistsError:
            return True
        return False
    except ExclusiveCreateUnsupported:
        return False
    finally:
        remove(probe)


def list_files(url: str, suffix: str = "", include_tmp: bool = False) -> list[str]:
    """Full URLs of the files directly under ``url`` ending in ``suffix`` (sorted); [] if absent.
    Atomic writes' temporary files (``.tmp-`` in the file's own name, not in a folder above
    it) are left out unless ``include_tmp``."""
    fs, path = resolve(url)
    if not fs.exists(path):
        return []
    out = []
    for entry in fs.ls(path, detail=True):
        name = entry["name"]
        if entry.get("type") == "file" and name.endswith(suffix) and (include_tmp or ".tmp-" not in name.rstrip("/").rsplit("/", 1)[-1]):
            out.append(unstrip(fs, name))
    return sorted(out)


def remove(url: str, recursive: bool = False) -> None:
    fs, path = resolve(url)
    if fs.exists(path):
        fs.rm(path, recursive=recursive)


def info(url: str) -> dict:
    fs, path = resolve(url)
    return fs.info(path)


def unstrip(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """Turn a filesystem-internal path back into a URL usable with ``resolve``."""
    if isinstance(fs, LocalFileSystem) or "://" in path:
        return path
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return f"{protocol}://{path}"


def local_path(url: str) -> str | None:
    """The OS path of a local URL, None for any other filesystem."""
    fs, path = resolve(url)
    return path if isinstance(fs, LocalFileSystem) else None


def list_dirs(url: str) -> list[str]:
    """Full URLs of the directories directly under ``url`` (sorted); [] if absent."""
    fs, path = resolve(url)
    if not fs.exists(path):
        return []
    return sorted(unstrip(fs, e["name"]) for e in fs.ls(path, detail=True) if e.get("type") == "directory")
