"""``mvr train``'s files: the pairs it trains on (one Parquet file, written once a run), the
trainer state beside a checkpoint's model files, and a checkpoint's model files copied out
(the model format itself: ``operators/encode/checkpoint.py``, ``write_checkpoint``)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.storage import fs

PAIR_SCHEMA = pa.schema(
    [
        pa.field("query", pa.string()),
        pa.field("positive", pa.string()),
        pa.field("positive_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("negatives", pa.list_(pa.string())),
        pa.field("tokens", pa.int32()),  # the pair's longest passage in tokens (null: counted by the workers)
    ]
)
TRAINER_STATE = "trainer_state.pt"  # optimiser, schedule and step: in a checkpoint, not in OUT


def pairs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The pairs (dicts of ``PAIR_SCHEMA``'s fields; a missing ``tokens`` is null) as a table."""
    return pa.Table.from_pylist(rows, schema=PAIR_SCHEMA)


def with_tokens(table: pa.Table, tokens: np.ndarray) -> pa.Table:
    """``table`` with its ``tokens`` column set to ``tokens`` ((n_pairs,) ints)."""
    i = PAIR_SCHEMA.get_field_index("tokens")
    return table.set_column(i, PAIR_SCHEMA.field(i), pa.array(np.asarray(tokens, np.int32)))


def write_pairs(url: str, table: pa.Table) -> int:
    """Write the pairs (a ``pairs_table``) atomically; returns their number."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    fs.write_bytes_atomic(url, buf.getvalue())
    return table.num_rows


def read_pairs(url: str) -> pa.Table:
    with fs.open_file(url) as f:
        return pq.read_table(f, schema=PAIR_SCHEMA)


def copy_model_dir(checkpoint_dir: str, out: str) -> None:
    """The model files of a training checkpoint copied into ``out`` (its trainer state left)."""
    src, dst = Path(checkpoint_dir), Path(out)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.rglob("*"):
        if f.is_file() and f.name != TRAINER_STATE:
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
