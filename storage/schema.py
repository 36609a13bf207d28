"""The shard schema (versioned) and conversions between numpy vectors and Arrow columns.

Schema version 1, one row per passage:

| column | type | meaning |
| --- | --- | --- |
| doc_id | string | document id from the input |
| passage_idx | int32 | window number inside the document (0-based) |
| block_id | string | input block the document came from |
| row_index | int32 | line / row of the document inside that block |
| seq | int32 | passage number inside the block (resume key: block_id, seq) |
| title | string | document title ("" if none) |
| text | string | the passage's text (a span of title + separator + text) |
| char_start, char_end | int32 | that span in the document string |
| n_tokens | int32 | number of stored token vectors |
| tokens | list<vector> | L2-normalised token vectors |
| pooled | vector | L2-normalised pooled vector |
| first_m | list<vector> | first m normalised token vectors |
| centroids | list<vector> | k-means centroids of the raw vectors |

``vector`` is ``fixed_size_binary(2 * dim)``: dim IEEE float16 values, little-endian, i.e. a
fixed-size float16 vector that numpy views without a copy. (Parquet's FLOAT16 logical type,
``fixed_size_list<float16>``, decodes about 20x slower in pyarrow: ``benchmarks/shard_read.py``.)
The dimension is in the schema metadata ``mvr.dim``.
Vector columns are stored uncompressed (zstd saves < 10% on float16), the rest zstd.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from operators.packed import Packed

SCHEMA_VERSION = 1
VECTOR_COLUMNS = ["tokens", "pooled", "first_m", "centroids"]
# Where a passage comes from and what it says: shared by the shards and the tokenized
# passages flowing through the indexing graph.
PASSAGE_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("passage_idx", pa.int32()),
    pa.field("block_id", pa.string()),
    pa.field("row_index", pa.int32()),
    pa.field("seq", pa.int32()),
    pa.field("title", pa.string()),
    pa.field("text", pa.string()),
    pa.field("char_start", pa.int32()),
    pa.field("char_end", pa.int32()),
]


def vector_type(dim: int) -> pa.DataType:
    """One float16 vector of ``dim`` values."""
    return pa.binary(2 * dim)


def shard_schema(dim: int) -> pa.Schema:
    vec = vector_type(dim)
    return pa.schema(
        PASSAGE_FIELDS
        + [
            pa.field("n_tokens", pa.int32()),
            pa.field("tokens", pa.list_(vec)),
            pa.field("pooled", vec),
            pa.field("first_m", pa.list_(vec)),
            pa.field("centroids", pa.list_(vec)),
        ],
        metadata={"mvr.schema_version": str(SCHEMA_VERSION), "mvr.dim": str(dim)},
    )


def _vectors(matrix: np.ndarray) -> pa.FixedSizeBinaryArray:
    m = np.ascontiguousarray(matrix, dtype="<f2")
    dim = m.shape[1]
    return pa.FixedSizeBinaryArray.from_buffers(vector_type(dim), len(m), [None, pa.py_buffer(m.tobytes())])


def _matrix(arr: pa.FixedSizeBinaryArray) -> np.ndarray:
    width = arr.type.byte_width
    data = np.frombuffer(arr.buffers()[1], dtype="<f2", count=(arr.offset + len(arr)) * width // 2)
    return data[arr.offset * width // 2 :].reshape(len(arr), width // 2)


def packed_to_arrow(arrays: Sequence[np.ndarray], dim: int) -> pa.Array:
    """List of (n_i, dim) float arrays → list<vector> (float16)."""
    return packed_column(Packed.from_list(arrays, dim, dtype=np.float16))


def packed_column(packed: Packed) -> pa.Array:
    """Packed vectors → list<vector> column (float16), one list a passage."""
    return pa.ListArray.from_arrays(pa.array(packed.offsets.astype(np.int32)), _vectors(packed.vectors))


def matrix_to_arrow(matrix: np.ndarray) -> pa.Array:
    """(n, dim) float array → vector column (float16)."""
    return _vectors(matrix)


def arrow_to_packed(column: pa.ChunkedArray | pa.Array) -> Packed:
    """list<vector> column → Packed with (total, dim) float16 vectors (a view, no copy)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = column.values.slice(offsets[0], offsets[-1] - offsets[0])
    return Packed(_matrix(values), offsets - offsets[0])


def arrow_to_matrix(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """vector column → (n, dim) float16 (a view, no copy)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return _matrix(column)
