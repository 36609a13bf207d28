"""ANN partitions on storage: which shard rows each partition holds, and the files of a built
partition.

Passages are numbered globally in manifest order (shard by shard, row by row); partition p of
P holds the contiguous range [p·N/P, (p+1)·N/P), so every vector kind is split the same way.
A built partition is a directory ``ann/{kind}/{build}/part-{p:05d}/`` holding

- ``passages.parquet``: one row a passage, in order: ``passage`` (int64 global number),
  ``doc_id`` and ``passage_idx`` (the id maps; no vectors);
- ``index/``: the ANN index (``ann.json`` + the backend's own files) over the passages'
  vectors in row order (vector r belongs to the passage whose rows hold r).

One copy: a partition stores no vectors. Its vectors are the codes in the shards' codes
files for its passage range (``partition_slices``), memory-mapped when it is loaded and
decoded only for the candidates a query rescores (``operators/retrieval/stored_vectors.py``).

The manifest's ``ann[kind]`` entry lists the partitions with each file's size and sha256;
a build directory the manifest does not list is garbage from an older or failed build."""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.operators.ann.base import AnnIndex
from mvr.operators.ann.factory import load_index
from mvr.operators.codecs import Codec
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.stored_vectors import JoinedVectors, StoredVectors
from mvr.storage import fs, local_cache
from mvr.storage.codec_file import codec_of, refines_first_m
from mvr.storage.integrity import ExpectedFile, FileCheck, IntegrityError, missing, read_listed, size_check, unreadable
from mvr.storage.manifest import Manifest, ShardEntry, shard_lookup, shard_paths, shard_rows
from mvr.storage.schema import arrow_to_codes
from mvr.storage.shards import open_codes, read_shard_checked
from mvr.storage.tombstones import live_mask
from mvr.storage.verify import codes_file

ANN_DIR = "ann"
PASSAGES_FILE = "passages.parquet"
INDEX_SUBDIR = "index"
# vector kind → shard column
KIND_COLUMN = {"tokens": "tokens", "centroids": "centroids", "first-m": "first_m", "pooled": "pooled"}


@dataclass
class ShardSlice:
    """Rows [start, stop) of the shard at ``path`` (relative to the index)."""

    path: str
    start: int
    stop: int


@dataclass
class PartitionPlan:
    """Partition ``number`` holds global passages [first_passage, first_passage + passages)."""

    number: int
    first_passage: int
    passages: int
    slices: list[ShardSlice]


def equal_bounds(passages: int, partitions: int) -> list[int]:
    """(partitions + 1,) global passage boundaries of ``partitions`` contiguous ranges of
    near-equal size over ``passages`` passages (``mvr build-ann --partitions P``'s split)."""
    return [p * passages // partitions for p in range(partitions + 1)]


def plan_partitions(manifest: Manifest, partitions: int) -> list[PartitionPlan]:
    """Split the index's passages into ``partitions`` contiguous ranges of near-equal size."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be a positive integer, got {partitions!r}")
    total = int(shard_rows(manifest.shards).sum())
    if partitions > max(total, 1):
        raise ValueError(f"{partitions} partitions for {total} passages: each partition needs at least one passage")
    bounds = equal_bounds(total, partitions)
    return [PartitionPlan(p, bounds[p], bounds[p + 1] - bounds[p], partition_slices(manifest, bounds[p], bounds[p + 1] - bounds[p])) for p in range(partitions)]


def plan_ranges(manifest: Manifest, bounds: Sequence[int]) -> list[PartitionPlan]:
    """Partitions over explicit boundaries: partition p holds global passages [bounds[p],
    bounds[p + 1]) (``bounds`` increasing, from 0 to the index's passages)."""
    b = [int(x) for x in bounds]
    if len(b) < 2 or b[0] != 0 or any(x >= y for x, y in zip(b, b[1:])):
        raise ValueError(f"partition boundaries must increase from 0, got {b[:8]}")
    return [PartitionPlan(p, b[p], b[p + 1] - b[p], partition_slices(manifest, b[p], b[p + 1] - b[p])) for p in range(len(b) - 1)]


def partition_slices(manifest: Manifest, first_passage: int, passages: int) -> list[ShardSlice]:
    """The shard rows holding global passages [first_passage, first_passage + passages): a
    binary search over the shards' cumulative rows, then one slice a shard in the range."""
    lo, hi = int(first_passage), int(first_passage) + int(passages)
    starts = np.zeros(len(manifest.shards) + 1, dtype=np.int64)
    np.cumsum(shard_rows(manifest.shards), out=starts[1:])
    first, last = int(np.searchsorted(starts, lo, side="right")) - 1, int(np.searchsorted(starts, hi, side="left"))
    first, last = max(first, 0), min(last, len(manifest.shards))
    slices = []
    for i, path in zip(range(first, last), shard_paths(manifest.shards, first, last)):
        a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
        if a < b:
            slices.append(ShardSlice(path, a - int(starts[i]), b - int(starts[i])))
    return slices


@dataclass
class PassageVectors:
    """Passages in global order: ``doc_ids`` (n,), ``passage_idx`` (n,) int32 and one kind's
    stored ``vectors`` (codes mapped from the shards; decoded on demand)."""

    doc_ids: list[str]
    passage_idx: np.ndarray
    vectors: StoredVectors


def read_passages(
    index_url: str, shards: Sequence[ShardEntry], slices: Sequence[ShardSlice], kind: str, codecs: Mapping[str, Codec], ids: bool = True, sha256: bool = False
) -> PassageVectors:
    """One kind's stored vectors of the passages in ``slices`` (each shard's codes file
    memory-mapped, its size compared with ``shards``, the manifest's entries of at least
    the slices' shards) and, with ``ids``, their doc ids and
    passage numbers (each shard's Parquet file size-checked, and with ``sha256`` its checksum
    too); ``codecs``: the index's ({group: Codec}, ``storage.codec_file.load_codecs``).
    First-m with a refinement is its first_m column joined to the tokens column's codes
    (``JoinedVectors``). ``IntegrityError`` for a shard that does not match the manifest."""
    doc_ids: list[str] = []
    passage_idx = []
    if ids:
        for sl in slices:
            shard = shard_lookup(shards, sl.path)
            t = read_shard_checked(index_url, ExpectedFile(shard.path, "shard", shard.bytes, shard.sha256), ["doc_id", "passage_idx"], sha256)
            _check_rows(index_url, sl, t.num_rows)
            t = t.slice(sl.start, sl.stop - sl.start)
            doc_ids.extend(t["doc_id"].to_pylist())
            passage_idx.append(t["passage_idx"].to_numpy())
    pidx = np.concatenate(passage_idx).astype(np.int32) if passage_idx else np.zeros(0, np.int32)
    codec = codec_of(codecs, kind)
    if kind == "first-m" and refines_first_m(codecs):
        anchor = StoredVectors(*_column_codes(index_url, shards, slices, "tokens", codecs["tokens"].bytes_per_vector), codecs["tokens"])
        vectors: StoredVectors = JoinedVectors(*_column_codes(index_url, shards, slices, "first_m", codecs["first_m"].bytes_per_vector), codec, anchor)
    else:
        vectors = StoredVectors(*_column_codes(index_url, shards, slices, KIND_COLUMN[kind], codec.bytes_per_vector), codec, single=kind == "pooled")
    return PassageVectors(doc_ids, pidx, vectors)


def _column_codes(index_url: str, shards: Sequence[ShardEntry], slices: Sequence[ShardSlice], column: str, width: int) -> tuple[list[np.ndarray], np.ndarray]:
    """(segments, offsets) of codes ``column`` for the passages in ``slices``: each shard's
    rows of it mapped from its codes file (one segment a shard; ``width`` bytes a code for an
    empty run), and the (n + 1,) passage → row offsets (0..n for a one-vector column)."""
    segments, offsets = [], [np.zeros(1, np.int64)]
    for sl in slices:
        shard = shard_lookup(shards, sl.path)
        codes_table = open_codes(index_url, codes_file(shard))
        if column not in codes_table.column_names:
            raise ValueError(f"{shard.codes} holds no {column} vectors (the index was built without them)")
        _check_rows(index_url, sl, codes_table.num_rows, shard.codes)
        codes, offs = arrow_to_codes(codes_table[column])
        if offs is None:  # one vector a passage
            segments.append(codes[sl.start : sl.stop])
            offs_slice = np.arange(sl.stop - sl.start + 1, dtype=np.int64)
        else:
            segments.append(codes[offs[sl.start] : offs[sl.stop]])
            offs_slice = offs[sl.start : sl.stop + 1] - offs[sl.start]
        offsets.append(offs_slice[1:] + offsets[-1][-1])
    return segments or [np.zeros((0, width), np.uint8)], np.concatenate(offsets)


def _check_rows(index_url: str, sl: ShardSlice, rows: int, path: Optional[str] = None) -> None:
    if rows < sl.stop:
        detail = f"holds {rows} passages, the manifest places {sl.stop} in it"
        raise IntegrityError([FileCheck(path or sl.path, "shard", "corrupted", None, None, detail)], index_url)


def build_dir(kind: str, build: str) -> str:
    """Relative directory of one build of a kind's partitions."""
    return posixpath.join(ANN_DIR, kind, build)


def _file_entry(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def passages_parquet(first_passage: int, doc_ids: Sequence[str], passage_idx: np.ndarray) -> bytes:
    """A partition's ``PASSAGES_FILE`` (ANN and BM25 alike): its passages' index-wide numbers
    from ``first_passage``, doc ids and passage_idx, as zstd Parquet bytes."""
    n = len(doc_ids)
    table = pa.table(
        {
            "passage": pa.array(np.arange(first_passage, first_passage + n, dtype=np.int64)),
            "doc_id": pa.array(doc_ids, pa.string()),
            "passage_idx": pa.array(passage_idx, pa.int32()),
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def write_partition(index_url: str, rel_dir: str, first_passage: int, passages: PassageVectors, ann: AnnIndex) -> dict[str, Any]:
    """Write a partition's id maps and ANN index under ``rel_dir`` (no vectors: they stay in
    the shards); its manifest entry (path, passages, vectors, first_passage, files with bytes
    and sha256, ANN params)."""
    n = len(passages.doc_ids)
    files = {PASSAGES_FILE: passages_parquet(first_passage, passages.doc_ids, passages.passage_idx), **saved_files(ann.save, INDEX_SUBDIR)}
    return {
        "path": rel_dir,
        "first_passage": int(first_passage),
        "passages": n,
        "vectors": int(ann.ntotal),
        "files": write_files(index_url, rel_dir, files),
        "params": ann.params,
    }


def saved_files(save: Callable[[str], None], subdir: str) -> dict[str, bytes]:
    """{``subdir``/name: bytes} of the files ``save(directory)`` writes (a library's own
    save format, written to a local temporary directory first)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="mvr-part-") as tmp:
        save(tmp)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as f:
                out[posixpath.join(subdir, name)] = f.read()
    return out


def write_files(index_url: str, rel_dir: str, files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """Write ``files`` under ``rel_dir`` of the index; their manifest entries (bytes, sha256)."""
    for name, data in files.items():
        fs.write_bytes_atomic(fs.join(index_url, rel_dir, name), data)
    return {name: _file_entry(data) for name, data in files.items()}


def local_copy(index_url: str, entry: dict[str, Any], subdir: str, load: Callable[[str], Any], verify: bool) -> Any:
    """``load(directory)`` on the files of ``entry`` under ``subdir``: in place when the index
    is local (and not verified), else from this node's cached copies (``storage.local_cache``:
    fetched once per node with their sha256 checked, mapped by whatever the library maps;
    with ``verify``, cached copies are hashed again), or from a temporary copy of a local
    index's files being verified."""
    rel = entry["path"]
    names = [n for n in entry["files"] if n.startswith(subdir + "/")]
    local = fs.local_path(fs.join(index_url, rel, subdir))
    if local is not None and not verify:
        for name in names:  # sizes only: the library reads the files itself
            expected = _expected(rel, name, entry)
            try:
                problem = size_check(expected, os.path.getsize(os.path.join(local, name[len(subdir) + 1 :])))
            except FileNotFoundError:
                raise missing(index_url, expected) from None
            if problem is not None:
                raise IntegrityError([problem], index_url)
        return _load(index_url, rel, subdir, load, local)
    if local is None:
        with local_cache.staged(index_url, [(name[len(subdir) + 1 :], _expected(rel, name, entry)) for name in names], recheck=verify) as folder:
            return _load(index_url, rel, subdir, load, folder)
    with tempfile.TemporaryDirectory(prefix="mvr-part-") as tmp:
        for name in names:
            with open(os.path.join(tmp, name[len(subdir) + 1 :]), "wb") as f:
                f.write(read_checked(index_url, rel, name, entry, verify))
        return _load(index_url, rel, subdir, load, tmp)


def _load(index_url: str, rel: str, subdir: str, load: Callable[[str], Any], directory: str) -> Any:
    """``load(directory)``; a library's error reading files of the listed size becomes an
    ``IntegrityError`` naming the partition's directory (a file changed in place)."""
    try:
        return load(directory)
    except Exception as exc:
        raise unreadable(index_url, ExpectedFile(f"{rel}/{subdir}", "partition", None, None), exc) from exc


def _expected(rel: str, name: str, entry: dict[str, Any]) -> ExpectedFile:
    f = entry["files"][name]
    return ExpectedFile(f"{rel}/{name}", "partition", int(f["bytes"]), str(f["sha256"]))


def load_partition(index_url: str, kind: str, entry: dict[str, Any], manifest: Manifest, codecs: Mapping[str, Codec], verify: bool = False) -> Partition:
    """Open a built partition: its id maps, its ANN index, and its passages' codes mapped from
    the shards (nothing decoded). With ``verify`` every partition file's sha256 is checked
    against the manifest entry first."""
    table = read_partition_passages(index_url, entry, verify)
    slices = partition_slices(manifest, entry["first_passage"], entry["passages"])
    vectors = read_passages(index_url, manifest.shards, slices, kind, codecs, ids=False).vectors
    ann = local_copy(index_url, entry, INDEX_SUBDIR, load_index, verify)
    live = live_mask(index_url, manifest.tombstones, entry["first_passage"], entry["passages"])
    return Partition(kind, vectors, table["doc_id"].to_pylist(), table["passage_idx"].to_numpy(), ann, live)


def read_partition_passages(index_url: str, entry: dict[str, Any], verify: bool = False) -> pa.Table:
    """A built partition's ``passages.parquet`` (row count checked against the manifest)."""
    rel = entry["path"]
    data = read_checked(index_url, rel, PASSAGES_FILE, entry, verify)
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(index_url, _expected(rel, PASSAGES_FILE, entry), exc, len(data)) from exc
    if table.num_rows != entry["passages"]:
        raise ValueError(f"{rel}/{PASSAGES_FILE} holds {table.num_rows} passages, the manifest says {entry['passages']}")
    return table


def read_checked(index_url: str, rel: str, name: str, entry: dict[str, Any], verify: bool) -> bytes:
    """The bytes of a partition's file ``name``: ``IntegrityError`` when it is missing or not
    the size the manifest lists, or (with ``verify``) has another sha256."""
    if name not in entry["files"]:
        raise ValueError(f"{rel}/{name} is not listed in the manifest")
    return read_listed(index_url, _expected(rel, name, entry), sha256=verify)


def exact_partition(index_url: str, manifest: Manifest, kind: str, codecs: Mapping[str, Codec]) -> Partition:
    """All passages of the index as one exact (brute-force) partition: every shard's codes
    mapped (size compared with the manifest), decoded a block at a time when scored; every
    shard's Parquet file read whole for the ids and its sha256 compared."""
    (plan,) = plan_partitions(manifest, 1) if manifest.shards else [PartitionPlan(0, 0, 0, [])]
    pv = read_passages(index_url, manifest.shards, plan.slices, kind, codecs, sha256=True)
    return Partition(kind, pv.vectors, pv.doc_ids, pv.passage_idx, live=live_mask(index_url, manifest.tombstones, 0, plan.passages))
