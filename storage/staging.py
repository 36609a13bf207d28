"""Staging state of an unfinished indexing job: the block plan, per-block validation results,
and duplicate ids. It lets a rerun resume, and is removed once the manifest is committed."""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from mvr.storage import fs
from mvr.storage.corpus import InputBlock
from mvr.storage.schema import arrow_to_codes, codes_to_arrow
from mvr.storage.shards import STAGING_DIR

SCAN_SCHEMA = pa.schema([("block_id", pa.string()), ("row_index", pa.int32()), ("doc_id", pa.string()), ("reason", pa.string())])


def _url(index_url: str, *parts: str) -> str:
    return fs.join(index_url, STAGING_DIR, *parts)


def save_plan(index_url: str, plan: dict) -> None:
    fs.write_bytes_atomic(_url(index_url, "plan.json"), json.dumps(plan).encode())


def load_plan(index_url: str) -> Optional[dict]:
    url = _url(index_url, "plan.json")
    return json.loads(fs.read_bytes(url)) if fs.exists(url) else None


def scan_url(index_url: str, block_id: str) -> str:
    return _url(index_url, "scan", f"{block_id}.parquet")


def write_scan(index_url: str, block: InputBlock, rows: list[tuple[int, Optional[str], Optional[str]]], raw_rows: int) -> None:
    """Validation result of one block: (row_index, doc_id, reject reason or None) per row;
    ``raw_rows``: lines/rows read (a skipped TSV header included) for global line numbers.
    An id or reason that UTF-8 cannot hold (a lone surrogate) is stored with it escaped."""
    columns: dict[str, list[Any]] = {
        "block_id": [block.block_id] * len(rows),
        "row_index": [r[0] for r in rows],
        "doc_id": [r[1] for r in rows],
        "reason": [r[2] for r in rows],
    }
    schema = SCAN_SCHEMA.with_metadata({"raw_rows": str(raw_rows)})
    try:
        table = pa.table(columns, schema=schema)
    except (UnicodeEncodeError, pa.ArrowException):
        columns["doc_id"] = [_escaped(v) for v in columns["doc_id"]]
        columns["reason"] = [_escaped(v) for v in columns["reason"]]
        table = pa.table(columns, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    fs.write_bytes_atomic(scan_url(index_url, block.block_id), buf.getvalue())


def _escaped(s: Optional[str]) -> Optional[str]:
    return None if s is None else s.encode("utf-8", "backslashreplace").decode("utf-8")


def scanned(index_url: str, block_id: str) -> bool:
    return fs.exists(scan_url(index_url, block_id))


def raw_rows(index_url: str, block_id: str) -> int:
    with fs.open_file(scan_url(index_url, block_id)) as f:
        return int(pq.read_schema(f).metadata[b"raw_rows"])


def duplicates_url(index_url: str) -> str:
    return _url(index_url, "duplicates.parquet")


def write_duplicates(index_url: str, table: pa.Table) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    fs.write_bytes_atomic(duplicates_url(index_url), buf.getvalue())


def duplicates_in_block(index_url: str, block_id: str) -> set[int]:
    """Row indexes of the block whose id already appeared earlier in the input."""
    with fs.open_file(duplicates_url(index_url)) as f:
        t = pq.read_table(f, columns=["block_id", "row_index"], filters=[("block_id", "=", block_id)])
    return set(t["row_index"].to_pylist())


def clear(index_url: str) -> None:
    fs.remove(_url(index_url), recursive=True)


def scan_urls(index_url: str, blocks: Sequence[InputBlock]) -> list[str]:
    return [scan_url(index_url, b.block_id) for b in blocks]


def _read_scan(index_url: str, block_id: str) -> pa.Table:
    with fs.open_file(scan_url(index_url, block_id)) as f:
        return pq.read_table(f)


def scan_rows(index_url: str, block_id: str) -> int:
    """Rows (documents and rejects, not a header) the scan found in the block."""
    with fs.open_file(scan_url(index_url, block_id)) as f:
        return pq.read_metadata(f).num_rows


def truncate_scan(index_url: str, block_id: str, rows: int) -> None:
    """Keep the block's first ``rows`` rows (``--limit`` ends the input inside it)."""
    table = _read_scan(index_url, block_id)
    if table.num_rows <= rows:
        return
    kept = table.slice(0, rows)
    last_line = kept["row_index"][-1].as_py() + 1 if rows else 0
    buf = io.BytesIO()
    pq.write_table(kept.replace_schema_metadata({"raw_rows": str(last_line)}), buf)
    fs.write_bytes_atomic(scan_url(index_url, block_id), buf.getvalue())


def reject_reasons(index_url: str, blocks: Sequence[InputBlock]) -> list[tuple[str, int]]:
    """(reason kind, rows) over the blocks' validation results, most frequent first; the
    kind is the reason up to its first ':' (as ``mvr stats`` groups them)."""
    counts: dict[str, int] = {}
    for b in blocks:
        for reason in _read_scan(index_url, b.block_id)["reason"].to_pylist():
            if reason is not None:
                kind = reason.split(":", 1)[0]
                counts[kind] = counts.get(kind, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


# ---- encoded passages kept by the sample pass (pipeline/indexing/corpus_job.py: a corpus it encodes whole) ----


def encoded_url(index_url: str) -> str:
    return _url(index_url, "encoded")


def write_encoded(index_url: str, meta: pa.Table, vectors: Sequence[np.ndarray], keep: Sequence[np.ndarray]) -> str:
    """Keep one encoded batch for the compress pass: ``meta`` (the passages' shard columns),
    each passage's (n_i, dim) float32 vectors as the encoder made them (projected, not yet
    normalised) and its (n_i,) bool mask of kept tokens. One uncompressed Arrow IPC file,
    named by the batch's (block, seq) keys; returns its URL."""
    lengths = np.fromiter((len(v) for v in vectors), dtype=np.int64, count=len(vectors))
    offsets = np.zeros(len(vectors) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    dim = vectors[0].shape[1] if len(vectors) else 0
    flat = np.concatenate(vectors).astype("<f4", copy=False) if len(vectors) else np.zeros((0, dim), "<f4")
    table = meta.append_column("vectors", codes_to_arrow(np.ascontiguousarray(flat).view(np.uint8), offsets))
    mask = np.concatenate(keep).astype(bool) if len(keep) else np.zeros(0, bool)
    table = table.append_column("keep", pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(mask)))
    key = hashlib.sha256("\n".join(meta["block_id"].to_pylist()).encode())
    key.update(np.asarray(meta["seq"].to_numpy(), dtype="<i8").tobytes())
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    url = fs.join(encoded_url(index_url), f"{key.hexdigest()[:24]}.arrow")
    fs.write_bytes_atomic(url, sink.getvalue().to_pybytes())
    return url


def read_encoded(url: str) -> tuple[pa.Table, list[np.ndarray], list[np.ndarray]]:
    """A ``write_encoded`` file → (meta, float32 vectors a passage, kept-token masks a passage)."""
    with fs.open_file(url) as f:
        table = ipc.open_file(pa.BufferReader(f.read())).read_all()
    codes, offsets = arrow_to_codes(table["vectors"])
    assert offsets is not None  # a list<code> column (write_encoded's)
    flat = np.array(codes, copy=True).view("<f4")  # writable: torch reads it
    keep = table["keep"].combine_chunks()
    mask = keep.flatten().to_numpy(zero_copy_only=False).astype(bool)
    mask_offsets = np.asarray(keep.offsets, dtype=np.int64) - keep.offsets[0].as_py()
    vectors = [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
    masks = [mask[mask_offsets[i] : mask_offsets[i + 1]] for i in range(len(mask_offsets) - 1)]
    return table.drop_columns(["vectors", "keep"]), vectors, masks


def encoded_files(index_url: str) -> list[str]:
    """The kept batches' URLs (none when the sample pass kept nothing)."""
    return fs.list_files(encoded_url(index_url), ".arrow")


def encoded_keys(urls: Sequence[str]) -> pa.Table:
    """(block_id, seq) of every passage the kept batches hold."""
    parts = []
    for url in urls:
        with fs.open_file(url) as f:
            parts.append(ipc.open_file(f).read_all().select(["block_id", "seq"]))
    return pa.concat_tables(parts) if parts else pa.table({"block_id": pa.array([], pa.string()), "seq": pa.array([], pa.int32())})


def clear_encoded(index_url: str) -> None:
    url = encoded_url(index_url)
    if fs.exists(url):
        fs.remove(url, recursive=True)
