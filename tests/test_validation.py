"""Row parsing and validation: every raw row becomes exactly one Document or Reject."""

import json

from operators.validation import Document, Reject, parse_jsonl_line, parse_rows, parse_tsv_line


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
