"""Staging state of an unfinished indexing job: the block plan, per-block validation results,
and duplicate ids. It lets a rerun resume, and is removed once the manifest is committed."""

from __future__ import annotations

import io
import json
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from storage import fs
from storage.corpus import InputBlock
from storage.shards import STAGING_DIR

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
    columns = {
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
