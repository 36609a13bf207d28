"""The shard schema (versioned) and conversions between numpy vectors and Arrow columns.

Schema version 2. A shard is two files, one row a passage in the same order in both:

``{name}.parquet`` (zstd), what a passage is and says:

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
| metadata | string, nullable | the document's metadata object as compact JSON (null: none), the same on each of its passages (docs/filters.md) |
| n_tokens | int32 | number of stored token vectors |

``metadata`` came after the codes files (2026-11-24) without a schema bump: it is nullable,
and a shard written before it is read as if every row held null.

``{name}.codes.arrow`` (Arrow IPC file format, uncompressed, so that it is memory-mapped
without a copy), the passage's vectors as codes of the index's codecs (``codecs/*.mvrc``,
``operators/codecs``; ``float16`` codes are the IEEE half floats themselves):

| column | type | meaning |
| --- | --- | --- |
| tokens | list<code> | L2-normalised token vectors |
| pooled | code | L2-normalised pooled vector |
| first_m | list<code> | first m normalised token vectors; with a ``first_m`` codec, the refinement codes of the first m stored token vectors (read beside their token codes) |
| centroids | list<code> | k-means centroids of the raw vectors |

``code`` is ``fixed_size_binary(bytes_per_vector)``; numpy views a column's codes as a
(vectors, bytes_per_vector) uint8 matrix without a copy. The codes file's schema metadata
holds ``mvr.codec.tokens`` and ``mvr.codec.pooled`` (the codecs' names: ``tokens`` is in
the first, the other columns in the second, ``storage/codec_file.py``), ``mvr.codec.first_m``
when ``first_m`` holds refinement codes (``operators/codecs/refinement.py``), and ``mvr.dim`` (the
decoded token vectors' dimension). These are the only copy of the vectors in an index: ANN and BM25
partitions refer to shard rows (docs/indexing.md).

Version 1 (before 2026-11-23) kept float16 vectors inside the Parquet shard and a second
copy in every ANN partition; it is refused with a message saying how to rebuild.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from mvr.operators.codecs import Codec
from mvr.operators.packed import Packed

SCHEMA_VERSION = 2
OLDEST_READABLE_SCHEMA = 2
CODE_COLUMNS = ["tokens", "pooled", "first_m", "centroids"]  # columns of a shard's codes file
VECTOR_COLUMNS = CODE_COLUMNS
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
    pa.field("metadata", pa.string()),  # nullable: compact JSON of the document's metadata
]


def vector_type(dim: int) -> pa.DataType:
    """One float16 vector of ``dim`` values."""
    return pa.binary(2 * dim)


def code_type(bytes_per_vector: int) -> pa.DataType:
    """One vector's codes."""
    return pa.binary(bytes_per_vector)


def codes_schema(codec_set: Mapping[str, Codec]) -> pa.Schema:
    """Schema of a shard's codes file (``{name}.codes.arrow``): ``tokens`` in the codes of
    ``codec_set["tokens"]``, ``first_m`` in those of ``codec_set["first_m"]`` when there is
    one (a refinement), the other columns in those of ``codec_set["pooled"]``."""
    tokens, pooled = codec_set["tokens"], codec_set["pooled"]
    first_m = codec_set.get("first_m", pooled)
    code = code_type(pooled.bytes_per_vector)
    metadata = {"mvr.schema_version": str(SCHEMA_VERSION), "mvr.codec.tokens": tokens.name, "mvr.codec.pooled": pooled.name, "mvr.dim": str(tokens.dim_out)}
    if "first_m" in codec_set:
        metadata["mvr.codec.first_m"] = first_m.name
    return pa.schema(
        [
            pa.field("tokens", pa.list_(code_type(tokens.bytes_per_vector))),
            pa.field("pooled", code),
            pa.field("first_m", pa.list_(code_type(first_m.bytes_per_vector))),
            pa.field("centroids", pa.list_(code)),
        ],
        metadata=metadata,
    )


def shard_schema(codec_set: Mapping[str, Codec]) -> pa.Schema:
    """Schema of the rows the encode stage hands to the shard writer: the passage fields,
    ``n_tokens`` and the codes columns (split into the two files by ``write_shard``)."""
    codes = codes_schema(codec_set)
    return pa.schema(PASSAGE_FIELDS + [pa.field("n_tokens", pa.int32())] + list(codes), metadata=codes.metadata)


def codes_to_arrow(codes: np.ndarray, offsets: Optional[np.ndarray] = None) -> pa.Array:
    """(vectors, bytes_per_vector) uint8 codes → a code column (``offsets`` None) or a
    list<code> column with ``offsets`` (n + 1,) passage → rows."""
    c = np.ascontiguousarray(codes, dtype=np.uint8)
    values = pa.FixedSizeBinaryArray.from_buffers(code_type(c.shape[1]), len(c), [None, pa.py_buffer(c)])
    if offsets is None:
        return values
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)), values)


def arrow_to_codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """A code or list<code> column → ((vectors, bytes_per_vector) uint8 view of its values, no
    copy; (n + 1,) int64 offsets, or None for a code column)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    offsets = None
    if pa.types.is_list(column.type):
        offsets = np.asarray(column.offsets, dtype=np.int64)
        column = column.values.slice(offsets[0], offsets[-1] - offsets[0])
        offsets = offsets - offsets[0]
    width = column.type.byte_width
    data = np.frombuffer(column.buffers()[1], dtype=np.uint8, count=(column.offset + len(column)) * width)
    return data[column.offset * width :].reshape(len(column), width), offsets


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


def arrow_to_packed(column: pa.ChunkedArray | pa.Array) -> Packed:
    """list<vector> column → Packed with (total, dim) float16 vectors (a view, no copy)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = column.values.slice(offsets[0], offsets[-1] - offsets[0])
    return Packed(_matrix(values), offsets - offsets[0])
