"""The node-local disk cache of a remote index's files (``storage/local_cache.py``), over
fsspec's ``memory://`` (a filesystem that is not local, as a bucket is not):

- a listed file is fetched once, named by its sha256, and then used without reading the store;
  bytes that are not the manifest's (corrupted, truncated, missing) are refused and leave
  nothing behind; ``recheck`` fetches again a cached copy that rotted;
- a staged folder holds the files under their names, and what a library mapped from it stays
  readable after the folder is gone and the entry evicted;
- eviction keeps the bound, least recently used first, and sweeps killed writers' leftovers;
- an entry two fillers write at once is not there until it is whole;
- a remote shard's codes are a memory map of the cached file, not bytes read into RAM."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mvr.storage import fs, local_cache
from mvr.storage.integrity import ExpectedFile, IntegrityError
from mvr.storage.shards import open_codes


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(local_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(local_cache.BOUND_ENV, raising=False)
    return tmp_path / "cache"


def put(index: str, path: str, data: bytes) -> ExpectedFile:
    """Write ``data`` at ``path`` of the remote ``index``; its manifest entry."""
    fs.write_bytes_atomic(fs.join(index, path), data)
    return ExpectedFile(path, "codes", len(data), hashlib.sha256(data).hexdigest())


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / local_cache.FILES_DIR).iterdir() if local_cache.TMP_MARK in p.name)


def test_a_listed_file_is_fetched_once_checked_and_named_by_its_sha256(cache):
    index = "memory://lc-once/index"
    data = os.urandom(3000)
    expected = put(index, "shards/a.codes.arrow", data)
    path = Path(local_cache.listed_copy(index, expected))
    assert path == cache / local_cache.FILES_DIR / f"{expected.sha256}.arrow" and path.read_bytes() == data

    fs.remove(fs.join(index, expected.path))  # cached: the store is not read again
    assert local_cache.listed_copy(index, expected) == str(path)
    rotten = bytearray(data)
    rotten[7] ^= 1
    path.write_bytes(bytes(rotten))  # the same size: only a recheck sees it
    assert local_cache.listed_copy(index, expected) == str(path)
    with pytest.raises(IntegrityError, match=r"shards/a\.codes\.arrow: missing"):
        local_cache.listed_copy(index, expected, recheck=True)
    put(index, expected.path, data)
    assert Path(local_cache.listed_copy(index, expected, recheck=True)).read_bytes() == data

    # bytes that are not the listed ones are refused, and nothing of them is cached
    other = ExpectedFile("shards/b.codes.arrow", "codes", len(data), hashlib.sha256(b"b" + data[1:]).hexdigest())
    put(index, other.path, data)
    with pytest.raises(IntegrityError, match=r"shards/b\.codes\.arrow: corrupted \(sha256"):
        local_cache.listed_copy(index, other)
    put(index, other.path, data[:-1])
    with pytest.raises(IntegrityError, match=r"shards/b\.codes\.arrow: truncated \(2,999 bytes, the manifest lists 3,000\)"):
        local_cache.listed_copy(index, other)
    assert sorted(p.name for p in (cache / local_cache.FILES_DIR).iterdir()) == [path.name] and not leftovers(cache)


def test_a_staged_folder_names_the_files_and_what_was_mapped_outlives_it(cache, monkeypatch):
    index = "memory://lc-staged/index"
    lists = np.arange(1000, dtype=np.uint32)
    buf = io.BytesIO()
    np.save(buf, lists)
    files = [("lists.npy", put(index, "ann/p0/index/lists.npy", buf.getvalue())), ("params.json", put(index, "ann/p0/index/params.json", b"{}"))]
    with local_cache.staged(index, files) as folder:
        assert sorted(os.listdir(folder)) == ["lists.npy", "params.json"]
        mapped = np.load(os.path.join(folder, "lists.npy"), mmap_mode="r")
    assert not os.path.exists(folder) and not list((cache / local_cache.STAGING_DIR).iterdir())
    monkeypatch.setenv(local_cache.BOUND_ENV, "1")
    local_cache.evict()  # over the bound: every entry goes
    assert not list((cache / local_cache.FILES_DIR).iterdir())
    np.testing.assert_array_equal(mapped, lists)  # the mapping holds the file


def test_eviction_keeps_the_bound_least_recently_used_first(cache, monkeypatch):
    index = "memory://lc-evict/index"
    entries = [put(index, f"s{i}.codes.arrow", os.urandom(1000)) for i in range(3)]
    paths = [Path(local_cache.listed_copy(index, e)) for e in entries]
    now = time.time()
    for age, p in zip((300, 100, 200), paths):  # used 300, 100 and 200 s ago
        os.utime(p, (now - age, now - age))
    files = cache / local_cache.FILES_DIR
    stale, fresh = files / f"x{local_cache.TMP_MARK}1", files / f"y{local_cache.TMP_MARK}2"
    for p, age in ((stale, 2 * local_cache.STALE_TMP_S), (fresh, 0)):  # a killed writer's, and one being written
        p.write_bytes(b"")
        os.utime(p, (now - age, now - age))
    staged = cache / local_cache.STAGING_DIR / "killed"
    staged.mkdir(parents=True)
    os.utime(staged, (now - 2 * local_cache.STALE_TMP_S,) * 2)
    monkeypatch.setenv(local_cache.BOUND_ENV, "2000")
    assert local_cache.evict() == [stale, paths[0]]
    assert sorted(p.name for p in files.iterdir()) == sorted([paths[1].name, paths[2].name, fresh.name]) and not staged.exists()
    assert Path(local_cache.listed_copy(index, entries[0])) == paths[0]  # fetched again on its next use
    assert not paths[2].exists()  # now the least recently used of three over the bound


def test_remote_codes_are_a_memory_map_of_the_cached_file(cache):
    """Served from a bucket, a shard's codes take no more RAM than from a local disk: the
    table's buffers lie in a mapping of the node's cached copy."""
    index = "memory://lc-codes/index"
    codes = pa.table({"token_codes": pa.array(np.arange(4096, dtype=np.int64))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, codes.schema) as w:
        w.write_table(codes)
    expected = put(index, "shards/a.codes.arrow", sink.getvalue().to_pybytes())
    table = open_codes(index, expected)
    assert table.equals(codes)
    path = str(cache / local_cache.FILES_DIR / f"{expected.sha256}.arrow")
    address = table.column(0).chunks[0].buffers()[1].address
    maps = [line.split() for line in Path("/proc/self/maps").read_text().splitlines()]
    spans = [tuple(int(x, 16) for x in m[0].split("-")) for m in maps if len(m) >= 6 and m[5] == path]
    assert any(lo <= address < hi for lo, hi in spans), spans


def test_an_entry_being_filled_is_not_seen_until_whole_and_two_fillers_agree(cache, monkeypatch):
    """Two processes on a node fill one entry at once (here two threads, each fetch paused
    half-way): while they write, the entry's path does not exist, so no reader sees half a
    file; then both get the whole file at one path, and no temporary file is left."""
    index = "memory://lc-race/index"
    data = os.urandom(5000)
    expected = put(index, "shards/r.codes.arrow", data)
    path = cache / local_cache.FILES_DIR / f"{expected.sha256}.arrow"
    halfway, go = threading.Barrier(3), threading.Event()
    real_open = local_cache.fs.open_file

    class Paused(io.RawIOBase):
        """The remote file, read in two halves with a pause between them."""

        def __init__(self) -> None:
            self.parts = [data[:2500], data[2500:]]

        def read(self, size: int = -1) -> bytes:
            if len(self.parts) == 1 and not go.is_set():
                halfway.wait(timeout=30)
                go.wait(timeout=30)
            return self.parts.pop(0) if self.parts else b""

    def paused(url: str, mode: str = "rb", **kwargs: object) -> object:
        return Paused() if url.endswith(expected.path) else real_open(url, mode, **kwargs)

    monkeypatch.setattr(local_cache.fs, "open_file", paused)
    got: list[str] = []
    fillers = [threading.Thread(target=lambda: got.append(local_cache.listed_copy(index, expected))) for _ in range(2)]
    for t in fillers:
        t.start()
    halfway.wait(timeout=30)  # both fillers have written half the file
    assert not path.exists() and len(leftovers(cache)) == 2
    go.set()
    for t in fillers:
        t.join(timeout=30)
    assert got == [str(path)] * 2 and path.read_bytes() == data and not leftovers(cache)
