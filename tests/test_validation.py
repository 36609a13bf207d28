"""Row parsing and validation: every raw row becomes exactly one Document or Reject."""

import json

from mvr.operators.encode.validation import Document, Reject, parse_jsonl_line, parse_rows, parse_tsv_line, tsv_header


def test_jsonl_valid_and_int_id():
    r = parse_jsonl_line(json.dumps({"_id": 7, "title": "T", "text": "hello"}).encode(), 3)
    assert r == Document(3, "7", "T", "hello")


def test_jsonl_rejects_carry_reasons():
    cases = {
        b'{"_id": "a", "text": ': "malformed JSON",
        b'["not", "an", "object"]': "malformed JSON",
        b'{"text": "no id"}': "missing id",
        b'{"_id": "  ", "text": "blank id"}': "missing id",
        b'{"_id": "b"}': "missing text",
        b'{"_id": "c", "text": "   "}': "empty text",
        b'{"_id": "d", "text": 5}': "wrong field type",
        b'{"_id": "e", "text": "caf\xe9 latin-1"}': "invalid UTF-8",
    }
    for raw, kind in cases.items():
        r = parse_jsonl_line(raw, 0)
        assert isinstance(r, Reject) and r.reason.startswith(kind), (raw, r)


def test_tsv_rows_header_and_blank_lines():
    rows = [(0, b"id\ttext"), (1, b"d1\tfirst passage"), (2, b""), (3, b"d2\tsecond\tTitle"), (4, b"only-one-field")]
    out = parse_rows(rows, "tsv", first_block_of_file=True)
    assert [type(r).__name__ for r in out] == ["Document", "Reject", "Document", "Reject"]
    assert out[2] == Document(3, "d2", "Title", "second")
    assert out[1].reason.startswith("empty line") and out[3].reason.startswith("malformed TSV")
    # a header-looking line in a later block is data, not a header
    assert isinstance(parse_rows([(0, b"id\ttext")], "tsv", first_block_of_file=False)[0], Document)
    assert isinstance(parse_tsv_line(b"x\ty", 0), Document)


def test_lone_surrogates_are_rejects_with_an_escaped_id():
    """JSON ``"\\ud800"`` escapes parse to lone surrogates, which UTF-8 (and so Arrow and
    Parquet) cannot hold: the row is a reject, and the reject's id is written escaped."""
    cases = {
        rb'{"_id": "bad\ud800id", "text": "fine"}': ("bad\\ud800id", "the id"),
        rb'{"_id": "t", "text": "half \udfff a pair"}': ("t", "the text"),
        rb'{"_id": "h", "title": "\ud83d", "text": "fine"}': ("h", "the title"),
    }
    for raw, (doc_id, where) in cases.items():
        r = parse_jsonl_line(raw, 4)
        assert isinstance(r, Reject) and r.reason.startswith("invalid unicode: lone surrogate") and r.reason.endswith(where), r
        assert r.doc_id == doc_id and r.doc_id.encode("utf-8")  # encodable: the reject record can be written
    pair = parse_jsonl_line(rb'{"_id": "ok", "text": "a pair \ud83d\ude00 is fine"}', 0)
    assert pair == Document(0, "ok", "", "a pair \U0001f600 is fine")


def test_deeply_nested_json_and_huge_integers_are_rejects():
    nested = parse_jsonl_line(b'{"_id": "n", "text": "t", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 0)
    assert isinstance(nested, Reject) and nested.reason.startswith("JSON nested too deeply")
    bare = parse_jsonl_line(b"[" * 100_000, 0)
    assert isinstance(bare, Reject) and bare.reason.startswith("JSON nested too deeply")
    huge = parse_jsonl_line(b'{"_id": ' + b"7" * 5000 + b', "text": "t"}', 0)
    assert isinstance(huge, Reject) and huge.reason.startswith("malformed JSON") and "4300 digits" in huge.reason


def test_byte_order_mark_and_tsv_headers():
    bom = b"\xef\xbb\xbf"
    # a BOM before a TSV header: header skipped, not a row
    out = parse_rows([(0, bom + b"_id\ttext\ttitle\r"), (1, b"d1\tone\tT\r")], "tsv", first_block_of_file=True)
    assert out == [Document(1, "d1", "T", "one")]
    # a BOM before the first data row: stripped from the id
    out = parse_rows([(0, bom + b"d0\tzero"), (1, b"d1\tone")], "tsv", first_block_of_file=True)
    assert [r.doc_id for r in out] == ["d0", "d1"]
    # JSON lines with a BOM: the first row parses
    out = parse_rows([(0, bom + b'{"_id": "j", "text": "x"}')], "jsonl", first_block_of_file=True)
    assert out == [Document(0, "j", "", "x")]
    for header in (b"id\ttext", b"ID\tText", b"doc_id\tcontents\ttitle", b"pid\tpassage", b"docid\tbody"):
        assert tsv_header(header) is not None, header
    assert tsv_header(b"id\ttext\ttitle\textra") is not None  # a metadata column
    for data in (b"d1\ttext", b"id\ta real passage with words", b"id", b"id\ttext\ttext"):
        assert tsv_header(data) is None, data


def test_tsv_encoded_surrogates_and_parquet_bytes():
    # a surrogate UTF-8-encoded (CESU style) is not valid UTF-8: rejected, the other rows kept
    out = parse_rows([(0, b"a\tfine"), (1, b"b\tbad \xed\xa0\x80 here"), (2, b"c\talso fine")], "tsv", first_block_of_file=False)
    assert [type(r).__name__ for r in out] == ["Document", "Reject", "Document"]
    assert out[1].reason.startswith("invalid UTF-8")
    # Parquet values that arrive as bytes (a binary column, or a string column with invalid UTF-8)
    rows = [(0, {"id": b"p0", "text": b"caf\xc3\xa9"}), (1, {"id": "p1", "text": b"caf\xe9"}), (2, {"id": b"\xff", "text": "t"})]
    out = parse_rows(rows, "parquet", True, ("id", "text", None))
    assert out[0] == Document(0, "p0", "", "café")
    assert isinstance(out[1], Reject) and out[1].reason == "invalid UTF-8: byte 3 of the text"
    assert isinstance(out[2], Reject) and out[2].reason == "invalid UTF-8: byte 0 of the id"


def test_malformed_tsv_reject_id_is_bounded():
    r = parse_tsv_line(b"x" * 10_000, 0)  # one field: the line is not an id
    assert isinstance(r, Reject) and r.doc_id is None
    r = parse_tsv_line(b"k" * 1000 + b"\ta\tb\tc", 0)  # four fields: the first is, cut short
    assert isinstance(r, Reject) and r.doc_id.startswith("kkk") and len(r.doc_id) == 201
