"""Parse and validate raw corpus rows. Every row becomes exactly one Document or one Reject."""

from __future__ import annotations

import json
import re
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
INVALID_UNICODE = "invalid unicode"
NESTED_JSON = "JSON nested too deeply"

ID_KEYS = ("_id", "id", "doc_id", "docid")
TEXT_KEYS = ("text", "contents", "body")
# A TSV file's first line is a header (not a row) when its first field is one of these
# (case-insensitive) and every other field a column name (one word: letters, digits, _ . -):
# ``id<TAB>text``, ``_id<TAB>text<TAB>title``, ``doc_id<TAB>contents``, ``pid<TAB>passage`` …
HEADER_ID_COLUMNS = ID_KEYS + ("pid",)
_COLUMN_NAME = re.compile(r"[a-z_][a-z0-9_.\-]{0,63}")
BOM = b"\xef\xbb\xbf"
MAX_REJECT_ID_CHARS = 200  # a reject's id (an unparsable row's first field) is cut to this length
_SURROGATE = re.compile("[\ud800-\udfff]")


def _decode(raw: bytes, index: int) -> Union[str, Reject]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(index, None, f"{INVALID_UTF8}: byte {exc.start} of the row")


def _decode_value(value: Any, index: int, what: str) -> Any:
    """A bytes value (a Parquet binary column, or a string column holding invalid UTF-8) as
    text, or a Reject; any other value as it is."""
    if not isinstance(value, (bytes, bytearray)):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(index, None, f"{INVALID_UTF8}: byte {exc.start} of the {what}")


def safe_text(s: Optional[str], limit: Optional[int] = None) -> Optional[str]:
    """``s`` with lone surrogates written as ``\\ud800``-style escapes (so it can be encoded as
    UTF-8, e.g. in a reject record), cut to ``limit`` characters when given."""
    if s is None:
        return None
    if limit is not None and len(s) > limit:
        s = s[:limit] + "…"
    return s.encode("utf-8", "backslashreplace").decode("utf-8") if _surrogate(s) else s


def _surrogate(s: str) -> Optional[str]:
    """Where ``s`` holds a lone surrogate (JSON ``"\\ud800"`` escapes decode to one; UTF-8,
    Arrow and Parquet cannot hold it): "U+D800 at character N", else None."""
    m = None if s.isascii() else _SURROGATE.search(s)
    return None if m is None else f"U+{ord(m.group()):04X} at character {m.start()}"


def _first(obj: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in obj:
            return obj[k]
    return None


def validate_fields(index: int, doc_id: Any, text: Any, title: Any = None) -> Row:
    """Check one row's fields: id and text present, strings (ids may be ints), text not blank,
    no lone surrogate in any of them. Bytes values are decoded as UTF-8 (Parquet)."""
    decoded = [_decode_value(v, index, what) for v, what in ((doc_id, "id"), (text, "text"), (title, "title"))]
    bad = next((d for d in decoded if isinstance(d, Reject)), None)
    if bad is not None:
        return bad
    doc_id, text, title = decoded
    if isinstance(doc_id, str) and _surrogate(doc_id):
        return Reject(index, safe_text(doc_id, MAX_REJECT_ID_CHARS), f"{INVALID_UNICODE}: lone surrogate {_surrogate(doc_id)} of the id")
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
    for value, what in ((text, "text"), (title, "title")):
        where = _surrogate(value) if value else None
        if where:
            return Reject(index, doc_id, f"{INVALID_UNICODE}: lone surrogate {where} of the {what}")
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
    except RecursionError:
        return Reject(index, None, f"{NESTED_JSON}: more nested arrays/objects than the parser's recursion limit")
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return Reject(index, None, f"{MALFORMED_JSON}: {str(exc)[:200]}")
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
        doc_id = safe_text(parts[0], MAX_REJECT_ID_CHARS) if len(parts) > 1 and parts[0] else None
        return Reject(index, doc_id, f"{MALFORMED_TSV}: {len(parts)} fields, expected id<TAB>text[<TAB>title]")
    return validate_fields(index, parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def is_tsv_header(raw: bytes) -> bool:
    """True for a header line such as ``id<TAB>text`` or ``_id<TAB>text<TAB>title`` (a UTF-8
    BOM before it allowed): 2 or 3 fields, the first an id column name (``HEADER_ID_COLUMNS``),
    the others one-word column names. A header is skipped, not counted as a row."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    try:
        fields = [f.strip().lower() for f in raw.decode("utf-8").rstrip("\r").split("\t")]
    except UnicodeDecodeError:
        return False
    return 2 <= len(fields) <= 3 and fields[0] in HEADER_ID_COLUMNS and all(_COLUMN_NAME.fullmatch(f) for f in fields[1:])


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
    A UTF-8 byte order mark at the start of a file is dropped; a TSV header on the file's
    first line is not a row; a blank line is a reject."""
    out: list[Row] = []
    for index, raw in rows:
        if fmt == "parquet":
            id_col, text_col, title_col = fields  # type: ignore[misc]
            out.append(parse_record(raw, index, id_col, text_col, title_col))
            continue
        if first_block_of_file and index == 0 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        if fmt == "tsv" and first_block_of_file and index == 0 and is_tsv_header(raw):
            continue
        if not raw.strip():
            out.append(Reject(index, None, f"{EMPTY_LINE}: blank line"))
        elif fmt == "tsv":
            out.append(parse_tsv_line(raw, index))
        else:
            out.append(parse_jsonl_line(raw, index))
    return out
