"""Document metadata through validation (every row a Document carrying its metadata as JSON,
or one Reject naming why it cannot be stored) and into the catalog's typed ``documents``
table. No Ray: milliseconds."""

from __future__ import annotations

import datetime as dt
import json
import math

import duckdb
import pyarrow as pa
import pytest

from mvr.operators.encode.validation import MAX_METADATA_BYTES, MAX_METADATA_DEPTH, MAX_METADATA_KEYS, Document, Reject, parse_jsonl_line, parse_rows, tsv_value
from mvr.storage.catalog import build_documents


def _row(meta) -> bytes:
    return json.dumps({"_id": "d", "text": "some text", "metadata": meta}).encode()


def test_beir_metadata_is_carried_as_compact_json():
    r = parse_jsonl_line(_row({"year": 2010, "src": "wiki", "score": 0.5, "ok": True, "none": None, "tags": ["a", {"b": 1}]}), 0)
    assert isinstance(r, Document)
    assert json.loads(r.metadata) == {"year": 2010, "src": "wiki", "score": 0.5, "ok": True, "none": None, "tags": ["a", {"b": 1}]}
    assert " " not in r.metadata  # compact
    for empty in (None, {}):
        assert parse_jsonl_line(_row(empty), 0).metadata is None
    assert parse_jsonl_line(b'{"_id": "d", "text": "t"}', 0) == Document(0, "d", "", "t", None)


def _deep(levels: int):
    v: object = 1
    for _ in range(levels - 1):
        v = {"x": v}
    return v


@pytest.mark.parametrize(
    "meta, reason",
    [
        ([1, 2], "bad metadata: metadata is a list, not an object"),
        ("year=2010", "bad metadata: metadata is a str, not an object"),
        (5, "bad metadata: metadata is a int, not an object"),
        (_deep(MAX_METADATA_DEPTH + 1), f"nested more than {MAX_METADATA_DEPTH} levels"),
        ({"blob": "x" * (MAX_METADATA_BYTES + 1)}, f"at most {MAX_METADATA_BYTES} are accepted"),
        ({f"k{i}": i for i in range(MAX_METADATA_KEYS + 1)}, f"at most {MAX_METADATA_KEYS} are accepted"),
        ({"": 1}, "a metadata key is empty"),
        ({"k" * 300: 1}, "a metadata key has 300 characters"),
    ],
)
def test_metadata_that_cannot_be_stored_is_one_reject_with_its_reason(meta, reason):
    r = parse_jsonl_line(_row(meta), 7)
    assert isinstance(r, Reject) and r.index == 7 and r.doc_id == "d"
    assert r.reason.startswith("bad metadata: ") and reason in r.reason, r.reason


def test_metadata_at_the_limits_is_kept():
    assert isinstance(parse_jsonl_line(_row(_deep(MAX_METADATA_DEPTH)), 0), Document)
    assert isinstance(parse_jsonl_line(_row({f"k{i}": i for i in range(MAX_METADATA_KEYS)}), 0), Document)


def test_lone_surrogate_and_deep_json_in_metadata_are_rejects_not_tracebacks():
    r = parse_jsonl_line(b'{"_id": "d", "text": "t", "metadata": {"a": "\\ud800"}}', 0)
    assert isinstance(r, Reject) and r.reason.startswith("bad metadata: lone surrogate U+D800")
    r = parse_jsonl_line(b'{"_id": "d", "text": "t", "metadata": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, 0)
    assert isinstance(r, Reject)  # the JSON parser's own limit, or ours
    r = parse_jsonl_line(b'{"_id": "d", "text": "t", "metadata": {"a": "caf\xe9"}}', 0)
    assert isinstance(r, Reject) and r.reason.startswith("invalid UTF-8")


def test_tsv_with_a_header_carries_its_extra_columns_typed():
    rows = [
        (0, b"id\ttext\ttitle\tyear\tscore\tdraft\tcode"),
        (1, b"a\tfirst\tT\t2010\t0.5\ttrue\t007"),
        (2, b"b\tsecond\t\t\t-1e3\tfalse\tx y"),
        (3, b"c\tshort\tT"),
    ]
    out = parse_rows(rows, "tsv", first_block_of_file=True)
    assert [type(r).__name__ for r in out] == ["Document", "Document", "Reject"]
    assert out[0].title == "T" and json.loads(out[0].metadata) == {"year": 2010, "score": 0.5, "draft": True, "code": "007"}
    assert json.loads(out[1].metadata) == {"year": None, "score": -1000.0, "draft": False, "code": "x y"}
    assert out[2].reason == "malformed TSV: 3 fields, the header has 7"
    # a later block of the same file: the header comes from the file's first line
    from mvr.operators.encode.validation import tsv_header

    later = parse_rows([(0, b"d\tfourth\tT\t1999\t1\tfalse\tz")], "tsv", False, header=tsv_header(rows[0][1]))
    assert json.loads(later[0].metadata) == {"year": 1999, "score": 1, "draft": False, "code": "z"}
    # the old two- and three-column files are unchanged: no metadata
    old = parse_rows([(0, b"id\ttext\ttitle"), (1, b"a\tone\tT"), (2, b"b\ttwo")], "tsv", True)
    assert old == [Document(1, "a", "T", "one"), Document(2, "b", "", "two")]
    assert [tsv_value(v) for v in ("", "1", "-2", "1.5", "1e3", "01", "true", "True", "x")] == [None, 1, -2, 1.5, 1000.0, "01", True, "True", "x"]


def test_parquet_extra_columns_are_metadata(tmp_path):
    table = pa.table(
        {
            "id": ["a", "b", "c", "d"],
            "text": ["one", "two", "three", "four"],
            "year": [2010, None, 1999, 2001],
            "score": [0.5, float("nan"), 1.0, 2.0],
            "day": [dt.date(2020, 1, 2), None, dt.date(2021, 3, 4), None],
            "tags": [["x"], [], None, ["y", "z"]],
            "raw": pa.array([b"ok", b"fine", b"\xff\xfe", b"also"], pa.binary()),
        }
    )
    rows = [(i, r) for i, r in enumerate(table.to_pylist())]
    out = parse_rows(rows, "parquet", True, ("id", "text", None))
    assert [type(r).__name__ for r in out] == ["Document", "Document", "Reject", "Document"]
    assert json.loads(out[0].metadata) == {"year": 2010, "score": 0.5, "day": "2020-01-02", "tags": ["x"], "raw": "ok"}
    assert json.loads(out[1].metadata) == {"year": None, "score": None, "day": None, "tags": [], "raw": "fine"}  # NaN: null
    assert out[2].reason.startswith("bad metadata: invalid UTF-8 (byte 0) in metadata.raw")
    assert not math.isnan(json.loads(out[3].metadata)["score"])


def _catalog_con(docs: list[tuple[str, int, object]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register(
        "p",
        pa.table(
            {
                "doc_id": [d for d, _, _ in docs],
                "passage": pa.array([n for _, n, _ in docs], pa.int64()),
                "metadata": [None if m is None else json.dumps(m) for _, _, m in docs],
            }
        ),
    )
    con.execute("CREATE TABLE passages AS SELECT * FROM p")
    return con


def test_documents_table_types_its_columns_across_documents():
    con = _catalog_con(
        [
            (
                "a",
                0,
                {"year": 2001, "src": "wiki", "pub": "2020-01-02", "score": 1, "tags": [1], "draft": True, "doc_id": "shadowed", "mixed": "x", "nothing": None},
            ),
            ("a", 1, {"year": 2001}),  # a later passage: the document's metadata is its first passage's
            ("b", 2, None),
            ("c", 3, {"year": -5, "score": 2.5, "pub": "2021-12-31", "mixed": 3, "obj": {"k": "v"}}),
            ("d", 4, {"pub": "not a date"}),
        ]
    )
    types = build_documents(con)
    assert types == {
        "doc_id": "string",
        "draft": "boolean",
        "mixed": "json",
        "nothing": "json",
        "obj": "json",
        "pub": "string",
        "score": "float",
        "src": "string",
        "tags": "json",
        "year": "integer",
    }
    rows = {r[0]: r for r in con.execute("SELECT doc_id, year, score, src, draft, pub FROM documents").fetchall()}
    assert rows["a"] == ("a", 2001, 1.0, "wiki", True, "2020-01-02") and rows["b"] == ("b", None, None, None, None, None)
    assert rows["c"][1:3] == (-5, 2.5)
    con2 = _catalog_con([("a", 0, {"pub": "2020-01-02"}), ("b", 1, {"pub": None}), ("c", 2, {"pub": "2021-12-31"})])
    assert build_documents(con2)["pub"] == "date"
    assert con2.execute("SELECT doc_id FROM documents WHERE pub > ?", [dt.date(2021, 1, 1)]).fetchall() == [("c",)]
    con3 = _catalog_con([("a", 0, None)])
    assert build_documents(con3) == {"doc_id": "string"}
