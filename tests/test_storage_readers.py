"""Corpus readers through fsspec (memory://): block planning covers every row exactly once."""

import io
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mvr.operators.encode.validation import Document, parse_rows
from mvr.storage import fs
from mvr.storage.corpus import CorpusError, find_files, parquet_fields, plan_blocks, read_block


@pytest.fixture
def mem():
    m = fsspec.filesystem("memory")
    m.store.clear()
    yield m
    m.store.clear()


def _rows(url, block_bytes=64, rows_per_block=3):
    blocks, _ = plan_blocks(url, block_bytes, rows_per_block)
    out = []
    for b in blocks:
        fields = parquet_fields(b.url) if b.format == "parquet" else None
        out.extend(parse_rows(read_block(b), b.format, b.start == 0, fields))
    return blocks, out


@pytest.mark.parametrize("block_bytes", [1, 7, 50, 64, 10_000])
def test_jsonl_byte_ranges_cover_each_line_once(mem, block_bytes):
    docs = [{"_id": f"d{i}", "text": "word " * (i % 13 + 1)} for i in range(40)]
    fs.write_bytes_atomic("memory://corpus/corpus.jsonl", "\n".join(json.dumps(d) for d in docs).encode() + b"\n")
    blocks, rows = _rows("memory://corpus", block_bytes)
    assert [r.doc_id for r in rows] == [d["_id"] for d in docs]
    assert len({b.block_id for b in blocks}) == len(blocks)


def test_tsv_and_parquet_and_directory(mem):
    fs.write_bytes_atomic("memory://dir/a.tsv", b"id\ttext\n1\tone\n2\ttwo\n")
    table = pa.table({"id": [f"p{i}" for i in range(10)], "text": [f"text {i}" for i in range(10)], "title": ["t"] * 10})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2)
    fs.write_bytes_atomic("memory://dir/b.parquet", buf.getvalue())
    assert [f[1] for f in find_files("memory://dir")] == ["tsv", "parquet"]
    blocks, rows = _rows("memory://dir", rows_per_block=3)
    assert all(isinstance(r, Document) for r in rows)
    assert [r.doc_id for r in rows] == ["1", "2"] + [f"p{i}" for i in range(10)]
    assert sum(b.format == "parquet" for b in blocks) == 3  # row groups of 2 rows joined to >= 3 rows: 2+2, 2+2, 2


def test_missing_corpus_is_a_clear_error(mem):
    with pytest.raises(CorpusError, match="not found"):
        find_files("memory://nothing-here")


def test_parquet_without_id_or_text_column_is_refused_when_planning(mem):
    """Checked on the driver while planning (no Ray task fails later), naming what is expected
    and what was found."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"key": ["a"], "passage_text": ["x"]}), buf)
    fs.write_bytes_atomic("memory://wrong/c.parquet", buf.getvalue())
    with pytest.raises(CorpusError) as err:
        plan_blocks("memory://wrong/c.parquet", 64, 3)
    msg = str(err.value)
    assert "c.parquet" in msg and "one of _id, id, doc_id, docid" in msg and "one of text, contents, body" in msg
    assert "found columns: key, passage_text (no id and text column)" in msg
    fs.write_bytes_atomic("memory://junk/c.parquet", b"this is not parquet at all")
    with pytest.raises(CorpusError, match="c.parquet: not a readable Parquet file"):
        plan_blocks("memory://junk/c.parquet", 64, 3)


def test_parquet_string_with_invalid_utf8_is_one_reject(mem):
    """A string column holding bytes that are not UTF-8 (pyarrow reads them; converting
    them to Python fails): that row is rejected, the block's other rows are documents."""
    raw = pa.array([b"good one", b"bad \xed\xa0\x80 surrogate", b"good two"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # unvalidated, as a foreign writer may leave it
    buf = io.BytesIO()
    pq.write_table(pa.table({"_id": ["a", "b", "c"], "text": text, "extra": [1, 2, 3]}), buf)
    fs.write_bytes_atomic("memory://bad/c.parquet", buf.getvalue())
    _, rows = _rows("memory://bad/c.parquet")
    assert [type(r).__name__ for r in rows] == ["Document", "Reject", "Document"]
    assert rows[1].doc_id is None and rows[1].reason.startswith("invalid UTF-8: byte 4 of the text")
    assert rows[2].text == "good two"
