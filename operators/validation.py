"""Parse and validate raw corpus rows. Every row becomes exactly one Document or one Reject."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Union


@dataclass(frozen=True)
class Document:
    """A valid input row. ``index`` is the row's 0-based position inside its input block."""

    index: int
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Reject:
    """An input row that is not indexed, with the reason."""

    index: int
    doc_id: Optional[str]
    reason: str


Row = Union[Document, Reject]

# Reason prefixes, stable so `mvr stats` can group rejects by kind.
MALFORMED_JSON = "malformed JSON"
INVALID_UTF8 = "invalid UTF-8"
MISSING_ID = "missing id"
MISSING_TEXT = "missing text"
EMPTY_TEXT = "empty text"
BAD_TYPE = "wrong field type"
DUPLICATE_ID = "duplicate id"
MALFORMED_TSV = "malformed TSV"
EMPTY_LINE = "empty line"

ID_KEYS = ("_id", "id", "doc_id", "docid")
TEXT_KEYS = ("text", "contents", "body")


def _decode(raw: bytes, index: int) -> Union[str, Reject]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(index, None, f"{INVALID_UTF8}: byte {exc.start} of the row")


def _first(obj: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in obj:
            return obj[k]
    return None


def validate_fields(index: int, doc_id: Any, text: Any, title: Any = None) -> Row:
    """Check one row's fields: id and text present, strings (ids may be ints), text not blank."""
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or (isinstance(doc_id, str) and not doc_id.strip()):
        return Reject(index, None, f"{MISSING_ID}: no non-empty id field ({'/'.join(ID_KEYS)})")
    doc_id = str(doc_id)
    if text is None:
        return Reject(index, doc_id, f"{MISSING_TEXT}: no text field ({'/'.join(TEXT_KEYS)})")
    if not isinstance(text, str):
        return Reject(index, doc_id, f"{BAD_TYPE}: text is {type(text).__name__}, not a string")
    if title is not None and not isinstance(title, str):
        return Reject(index, doc_id, f"{BAD_TYPE}: title is {type(title).__name__}, not a string")
    if not text.strip():
        return Reject(index, doc_id, f"{EMPTY_TEXT}: text is blank")
    return Document(index, doc_id, title or "", text)


def parse_jsonl_line(raw: bytes, index: int) -> Row:
    """One JSON-lines row (BEIR ``corpus.jsonl``): ``{"_id", "title", "text", ...}``."""
    line = _decode(raw, index)
    if isinstance(line, Reject):
        return line
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return Reject(index, None, f"{MALFORMED_JSON}: {exc.msg} at column {exc.colno}")
    if not isinstance(obj, dict):
        return Reject(index, None, f"{MALFORMED_JSON}: row is a {type(obj).__name__}, not an object")
    return validate_fields(index, _first(obj, ID_KEYS), _first(obj, TEXT_KEYS), obj.get("title"))


def parse_tsv_line(raw: bytes, index: int) -> Row:
    """One TSV row: ``id<TAB>text`` or ``id<TAB>text<TAB>title``."""
    line = _decode(raw, index)
    if isinstance(line, Reject):
        return line
    parts = line.rstrip("\r").split("\t")
    if len(parts) < 2 or len(parts) > 3:
        return Reject(index, parts[0] or None, f"{MALFORMED_TSV}: {len(parts)} fields, expected id<TAB>text[<TAB>title]")
    return validate_fields(index, parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def is_tsv_header(raw: bytes) -> bool:
    """True for a header line such as ``id<TAB>text`` (skipped, not counted as a row)."""
    head = raw.split(b"\t", 1)[0].strip().lower()
    return head in (b"id", b"_id", b"docid", b"doc_id", b"pid")


def parse_record(obj: dict, index: int, id_field: str, text_field: str, title_field: Optional[str]) -> Row:
    """One row of a columnar input (Parquet) given as a dict."""
    return validate_fields(index, obj.get(id_field), obj.get(text_field), obj.get(title_field) if title_field else None)


def parse_rows(
    rows: Iterable[tuple[int, Any]],
    fmt: str,
    first_block_of_file: bool,
    fields: Optional[tuple[str, str, Optional[str]]] = None,
) -> list[Row]:
    """Parse a block's raw rows (from ``storage.corpus.read_block``) in order.

    ``fmt`` is ``jsonl``, ``tsv`` or ``parquet`` (then ``fields`` = id, text, title columns).
    A TSV header on the file's first line is not a row; a blank line is a reject."""
    out: list[Row] = []
    for index, raw in rows:
        if fmt == "parquet":
            id_col, text_col, title_col = fields  # type: ignore[misc]
            out.append(parse_record(raw, index, id_col, text_col, title_col))
            continue
        if fmt == "tsv" and first_block_of_file and index == 0 and is_tsv_header(raw):
            continue
        if not raw.strip():
            out.append(Reject(index, None, f"{EMPTY_LINE}: blank line"))
        elif fmt == "tsv":
            out.append(parse_tsv_line(raw, index))
        else:
            out.append(parse_jsonl_line(raw, index))
    return out
