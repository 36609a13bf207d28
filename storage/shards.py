"""Shard files and their commit records.

A shard is two files (``storage/schema.py``): ``{name}.parquet`` (what each passage is and
says) and ``{name}.codes.arrow`` (its vectors as codes, memory-mapped by readers). It holds passages of one input block, identified by their sequence numbers in that
block, and is named by the block and its smallest sequence number
(``{block_id}-{first:07d}.parquet``). A shard counts as written once its commit record
``_staging/committed/{block_id}/{name}.json`` exists (written after the shard, atomically);
the record lists the shard's sequence numbers as ranges, and a rerun skips those passages.
The ranges stay in the commit records (removed with the staging directory at commit): the
manifest lists shards, not passages.
Since the passages of shards are disjoint, no two shards of a block share a smallest
sequence number: a name is never reused except by an orphan (a shard without a record,
left by a killed run), which is overwritten or removed at commit."""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.storage import fs, local_cache
from mvr.storage.integrity import ExpectedFile, IntegrityError, check_data, missing, size_check, unreadable
from mvr.storage.schema import CODE_COLUMNS

SHARDS_DIR = "shards"
STAGING_DIR = "_staging"


CODES_SUFFIX = ".codes.arrow"


def shard_name(block_id: str, first_seq: int) -> str:
    return f"{block_id}-{first_seq:07d}.parquet"


def codes_path(rel_path: str) -> str:
    """The codes file of the shard at ``rel_path`` (``x.parquet`` → ``x.codes.arrow``)."""
    return rel_path[: -len(".parquet")] + CODES_SUFFIX


def seq_ranges(seqs: np.ndarray) -> list[list[int]]:
    """Sorted sequence numbers as inclusive ranges, e.g. [0, 1, 2, 5] → [[0, 2], [5, 5]]."""
    if len(seqs) == 0:
        return []
    s = np.sort(np.asarray(seqs, dtype=np.int64))
    breaks = np.flatnonzero(np.diff(s) != 1)
    starts = np.r_[s[0], s[breaks + 1]]
    ends = np.r_[s[breaks], s[-1]]
    return [[int(a), int(b)] for a, b in zip(starts, ends)]


def covered_seqs(records: Sequence[dict]) -> np.ndarray:
    """Sorted sequence numbers the commit records cover."""
    parts = [np.arange(a, b + 1) for r in records for a, b in r["seq_ranges"]]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _record_url(index_url: str, block_id: str, name: str) -> str:
    return fs.join(index_url, STAGING_DIR, "committed", block_id, f"{name}.json")


def write_shard(index_url: str, table: pa.Table, block_id: str) -> dict:
    """Write the passages of ``table`` (all from ``block_id``, ordered by ``seq``; the encode
    stage's schema, ``storage.schema.shard_schema``) as one shard: its codes file, its
    Parquet file, then its commit record. Returns the record: path, codes (path of the codes
    file), rows, tokens, bytes, sha256, codes_bytes, codes_sha256, block_id, seq_ranges."""
    seqs = table["seq"].to_numpy()
    name = shard_name(block_id, int(seqs.min()))
    rel = posixpath.join(SHARDS_DIR, name)
    # one record batch: a column in one chunk is what readers map without a copy
    codes = pa.table({c: table[c] for c in CODE_COLUMNS}).replace_schema_metadata(table.schema.metadata).combine_chunks()
    record = {**_write_files(index_url, rel, codes, table.drop_columns(CODE_COLUMNS), block_id), "seq_ranges": seq_ranges(seqs)}
    fs.write_bytes_atomic(_record_url(index_url, block_id, name), json.dumps(record).encode())
    return record


def open_codes(index_url: str, expected: ExpectedFile) -> pa.Table:
    """A shard's codes file (``expected``: its path, size and sha256 from the manifest) as an
    Arrow table whose buffers are a memory map of the file (the OS pages in what is touched;
    nothing is read here): the file itself when the index is local, else this node's copy
    (``storage.local_cache``, fetched once per node, its sha256 checked as it came in).
    ``IntegrityError`` when it is missing, not the listed size (or sha256), or not an Arrow
    IPC file."""
    url = fs.join(index_url, expected.path)
    local = fs.local_path(url)
    try:
        if local is not None:
            problem = size_check(expected, os.path.getsize(local))
            if problem is not None:
                raise IntegrityError([problem], index_url)
        else:
            local = local_cache.listed_copy(index_url, expected)
        source = pa.memory_map(local, "r")
    except FileNotFoundError:
        raise missing(index_url, expected) from None
    try:
        return pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(index_url, expected, exc) from exc


def rewrite_shard(index_url: str, shard: dict, keep: np.ndarray, rel_dir: str) -> Optional[dict]:
    """A copy of the shard ``shard`` (a manifest ``ShardEntry`` as a dict) holding only the rows
    ``keep`` (sorted row numbers), both files written under ``rel_dir`` of the index (new
    names: the originals stay for readers of older versions); the new entry, or None when no
    row is kept (``mvr compact``). The files are checked against the entry first."""
    expected = ExpectedFile(shard["path"], "shard", shard["bytes"], shard["sha256"])
    keep = np.asarray(keep, np.int64)
    if not len(keep):
        return None
    table = read_shard_checked(index_url, expected).take(pa.array(keep))
    codes = open_codes(index_url, ExpectedFile(shard["codes"], "codes", shard["codes_bytes"], shard["codes_sha256"]))
    codes = codes.take(pa.array(keep)).combine_chunks()
    return _write_files(index_url, posixpath.join(rel_dir, posixpath.basename(shard["path"])), codes, table, shard["block_id"])


def _write_files(index_url: str, rel: str, codes: pa.Table, rows: pa.Table, block_id: str) -> dict:
    """A shard's two files at ``rel`` of the index: ``codes`` (one record batch) as an
    uncompressed Arrow IPC file that readers map, then ``rows`` (the other columns) as
    Parquet; returns their manifest entry (path, codes, rows, tokens, sizes, sha256s,
    block_id)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, codes.schema) as writer:
        writer.write_table(codes)
    codes_data = sink.getvalue().to_pybytes()
    buf = io.BytesIO()
    pq.write_table(rows, buf, compression="zstd", row_group_size=1024)
    data = buf.getvalue()
    fs.write_bytes_atomic(fs.join(index_url, codes_path(rel)), codes_data)
    fs.write_bytes_atomic(fs.join(index_url, rel), data)
    return {
        "path": rel,
        "codes": codes_path(rel),
        "rows": rows.num_rows,
        "tokens": int(pa.compute.sum(rows["n_tokens"]).as_py() or 0),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "codes_bytes": len(codes_data),
        "codes_sha256": hashlib.sha256(codes_data).hexdigest(),
        "block_id": block_id,
    }


def committed_in_block(index_url: str, block_id: str) -> list[dict]:
    """Commit records of the shards already written for one block."""
    return [json.loads(fs.read_bytes(u)) for u in fs.list_files(fs.join(index_url, STAGING_DIR, "committed", block_id), ".json")]


def committed_records(index_url: str, block_ids: Sequence[str]) -> list[dict]:
    """Commit records of all written shards of the given blocks, in block and sequence order."""
    out = []
    for b in block_ids:
        out.extend(sorted(committed_in_block(index_url, b), key=lambda r: r["seq_ranges"][0][0]))
    return out


def read_shard(index_url: str, rel_path: str, columns: Optional[list[str]] = None) -> pa.Table:
    """The shard at ``rel_path`` (``columns`` of it). KeyError naming a column it lacks;
    ``IntegrityError`` when it is missing or cannot be decoded as Parquet."""
    expected = ExpectedFile(rel_path, "shard", None, None)
    url = fs.join(index_url, rel_path)
    try:
        with fs.open_file(url) as f:
            return pq.read_table(f, columns=columns)
    except FileNotFoundError:
        raise missing(index_url, expected) from None
    except (pa.ArrowException, OSError) as exc:
        _raise_missing_columns(url, columns)
        raise unreadable(index_url, expected, exc) from exc


def read_shard_checked(index_url: str, expected: ExpectedFile, columns: Optional[list[str]] = None, sha256: bool = True) -> pa.Table:
    """Like ``read_shard`` for a shard the manifest lists (``expected``: its size and sha256):
    ``IntegrityError`` when it is missing, not the listed size, or not decodable. With
    ``sha256`` the whole file is read once, its checksum compared from those bytes, and
    ``columns`` decoded from them (worth it when the columns are most of the file, as the
    token vectors are); without, only ``columns`` are read after the size is compared."""
    url = fs.join(index_url, expected.path)
    if not sha256:
        try:
            size = int(fs.info(url).get("size") or 0)
        except FileNotFoundError:
            raise missing(index_url, expected) from None
        problem = size_check(expected, size)
        if problem is not None:
            raise IntegrityError([problem], index_url)
        return read_shard(index_url, expected.path, columns)
    try:
        data = fs.read_bytes(url)
    except FileNotFoundError:
        raise missing(index_url, expected) from None
    check_data(index_url, expected, data, sha256)
    try:
        return pq.read_table(pa.BufferReader(data), columns=columns)
    except (pa.ArrowException, OSError) as exc:
        _raise_missing_columns(url, columns)
        raise unreadable(index_url, expected, exc, len(data)) from exc


def _raise_missing_columns(url: str, columns: Optional[list[str]]) -> None:
    """KeyError when the (readable) schema of the shard at ``url`` lacks some of ``columns``."""
    if not columns:
        return
    try:
        with fs.open_file(url) as f:
            names = pq.read_schema(f).names
    except (pa.ArrowException, OSError):
        return
    lacking = [c for c in columns if c not in names]
    if lacking:
        raise KeyError(f"no column {', '.join(lacking)} in {url}")


def sha256_of(index_url: str, rel_path: str) -> str:
    h = hashlib.sha256()
    with fs.open_file(fs.join(index_url, rel_path)) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
