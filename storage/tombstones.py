"""Tombstones: the passages a version has deleted, by global passage number.

A delete (``mvr delete``) or an update (``mvr add`` of an id the index holds) does not touch
a shard, a partition or any file a reader may have mapped: it commits a new version whose
``tombstones`` entry names a Parquet file ``tombstones/{sha256[:16]}.parquet`` with one
column, ``passage`` (int64, sorted, unique): every deleted passage of the index so far.
The file is named by its content and written before the version that lists it, so it is
never rewritten. A partition reads only its own range (row-group statistics on the sorted
column skip the rest) and turns it into a live mask (``operators/retrieval/partition.py``).
``mvr compact`` rewrites the shards without the dead rows and starts an empty list.

At 10⁹ passages with 10 % deleted the list is 10⁸ numbers: sorted int64 with Parquet's
delta encoding, about a byte each."""

from __future__ import annotations

import hashlib
import io
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.storage import fs
from mvr.storage.integrity import ExpectedFile, read_listed, unreadable

TOMBSTONES_DIR = "tombstones"
ROW_GROUP = 1 << 20


def write_tombstones(index_url: str, dead: np.ndarray) -> dict[str, Any]:
    """Write the sorted unique ``dead`` passage numbers; the manifest entry (path, bytes,
    sha256, count), or {} when there are none."""
    dead = np.unique(np.asarray(dead, np.int64))
    if not len(dead):
        return {}
    sink = io.BytesIO()
    pq.write_table(
        pa.table({"passage": dead}),
        sink,
        compression="zstd",
        row_group_size=ROW_GROUP,
        use_dictionary=False,
        column_encoding={"passage": "DELTA_BINARY_PACKED"},
    )
    data = sink.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    rel = f"{TOMBSTONES_DIR}/{digest[:16]}.parquet"
    if not fs.exists(fs.join(index_url, rel)):
        fs.write_bytes_atomic(fs.join(index_url, rel), data)
    return {"path": rel, "bytes": len(data), "sha256": digest, "count": int(len(dead))}


def read_tombstones(index_url: str, entry: dict[str, Any], first: int = 0, stop: Optional[int] = None) -> np.ndarray:
    """Deleted passage numbers in [first, stop) (sorted int64); empty when ``entry`` is {}.
    The file's size and sha256 are checked against the entry (``IntegrityError``)."""
    if not entry:
        return np.zeros(0, np.int64)
    expected = ExpectedFile(entry["path"], "tombstones", int(entry["bytes"]), str(entry["sha256"]))
    data = read_listed(index_url, expected, sha256=True)
    try:
        filters = [("passage", ">=", int(first))] + ([("passage", "<", int(stop))] if stop is not None else [])
        table = pq.read_table(pa.BufferReader(data), filters=filters)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(index_url, expected, exc, len(data)) from exc
    return table["passage"].to_numpy().astype(np.int64, copy=False)


def live_mask(index_url: str, entry: dict[str, Any], first: int, count: int) -> Optional[np.ndarray]:
    """(count,) bool, False for the deleted passages among [first, first + count); None when
    none of them is deleted."""
    dead = read_tombstones(index_url, entry, first, first + count)
    if not len(dead):
        return None
    mask = np.ones(count, bool)
    mask[dead - first] = False
    return mask
