"""Parse and validate raw corpus rows. Every row becomes exactly one Document or one Reject."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union


@dataclass(frozen=True)
class Document:
    """A valid input row. ``index`` is the row's 0-based position inside its input block."""

    index: int
    doc_id: str
    title: str
    text: str
    metadata: Optional[str] = None  # the document's metadata object as compact JSON text (None: none)


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
BAD_METADATA = "bad metadata"

# What a document's metadata may be (docs/filters.md): a JSON object (BEIR ``metadata``; a
# Parquet file's extra columns; a headed TSV file's extra columns), stored as compact JSON.
MAX_METADATA_BYTES = 65_536  # of the compact JSON text
MAX_METADATA_DEPTH = 8  # nesting of objects and arrays, the metadata object itself is level 1
MAX_METADATA_KEYS = 256  # top-level keys
MAX_METADATA_KEY_CHARS = 256

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
    return s.encode("utf-8", "backslashreplace").decode("utf-8") if lone_surrogate(s) else s


def lone_surrogate(s: str) -> Optional[str]:
    """Where ``s`` holds a lone surrogate (JSON ``"\\ud800"`` escapes decode to one; UTF-8,
    Arrow and Parquet cannot hold it): "U+D800 at character N", else None."""
    m = None if s.isascii() else _SURROGATE.search(s)
    return None if m is None else f"U+{ord(m.group()):04X} at character {m.start()}"


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in obj:
            return obj[k]
    return None


class _BadMetadata(ValueError):
    pass


def _meta_value(v: Any, depth: int, where: str) -> Any:
    """A metadata value as JSON can hold it (see ``normalize_metadata``)."""
    if v is None or isinstance(v, (bool, str)):
        if isinstance(v, str) and lone_surrogate(v):
            raise _BadMetadata(f"lone surrogate {lone_surrogate(v)} in {where}")
        return v
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else float(v)  # beyond 64 bits: a float
    if isinstance(v, float):
        return v if math.isfinite(v) else None  # NaN / inf: JSON has no such number
    if isinstance(v, decimal.Decimal):
        return _meta_value(float(v), depth, where)
    if isinstance(v, (bytes, bytearray)):
        try:
            return _meta_value(bytes(v).decode("utf-8"), depth, where)
        except UnicodeDecodeError as exc:
            raise _BadMetadata(f"invalid UTF-8 (byte {exc.start}) in {where}") from None
    if isinstance(v, (_dt.date, _dt.datetime, _dt.time)):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (dict, list, tuple)):
        if depth >= MAX_METADATA_DEPTH:
            raise _BadMetadata(f"nested more than {MAX_METADATA_DEPTH} levels deep at {where}")
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise _BadMetadata(f"a key of {where} is {type(k).__name__}, not a string")
                if lone_surrogate(k):
                    raise _BadMetadata(f"lone surrogate {lone_surrogate(k)} in a key of {where}")
                out[k] = _meta_value(x, depth + 1, f"{where}.{k[:40]}")
            return out
        return [_meta_value(x, depth + 1, f"{where}[{i}]") for i, x in enumerate(v)]
    raise _BadMetadata(f"{where} is a {type(v).__name__}, which JSON cannot hold")


def normalize_metadata(value: Any) -> Optional[str]:
    """A document's metadata as compact JSON text, or None when it has none (absent, null or
    an empty object). Integers beyond 64 bits become floats, NaN and infinities null, dates
    and times ISO text, bytes UTF-8 text. ``ValueError`` (the reject's reason without its
    prefix) when it is not an object, is nested deeper than ``MAX_METADATA_DEPTH``, has more
    than ``MAX_METADATA_KEYS`` keys, an empty or over-long key, a lone surrogate, bytes that
    are not UTF-8, or is over ``MAX_METADATA_BYTES`` as JSON."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _BadMetadata(f"metadata is a {type(value).__name__}, not an object")
    if not value:
        return None
    if len(value) > MAX_METADATA_KEYS:
        raise _BadMetadata(f"{len(value)} metadata keys; at most {MAX_METADATA_KEYS} are accepted")
    for k in value:
        if isinstance(k, str) and not k.strip():
            raise _BadMetadata("a metadata key is empty")
        if isinstance(k, str) and len(k) > MAX_METADATA_KEY_CHARS:
            raise _BadMetadata(f"a metadata key has {len(k)} characters; at most {MAX_METADATA_KEY_CHARS} are accepted")
    obj = _meta_value(value, 1, "metadata")
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise _BadMetadata(f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are accepted")
    return text


def validate_fields(index: int, doc_id: Any, text: Any, title: Any = None, metadata: Any = None) -> Row:
    """Check one row's fields: id and text present, strings (ids may be ints), text not blank,
    no lone surrogate in any of them, metadata storable (``normalize_metadata``). Bytes
    values are decoded as UTF-8 (Parquet)."""
    decoded = [_decode_value(v, index, what) for v, what in ((doc_id, "id"), (text, "text"), (title, "title"))]
    bad = next((d for d in decoded if isinstance(d, Reject)), None)
    if bad is not None:
        return bad
    doc_id, text, title = decoded
    if isinstance(doc_id, str) and lone_surrogate(doc_id):
        return Reject(index, safe_text(doc_id, MAX_REJECT_ID_CHARS), f"{INVALID_UNICODE}: lone surrogate {lone_surrogate(doc_id)} of the id")
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
        where = lone_surrogate(value) if value else None
        if where:
            return Reject(index, doc_id, f"{INVALID_UNICODE}: lone surrogate {where} of the {what}")
    try:
        meta = normalize_metadata(metadata)
    except _BadMetadata as exc:
        return Reject(index, doc_id, f"{BAD_METADATA}: {exc}")
    except RecursionError:
        return Reject(index, doc_id, f"{BAD_METADATA}: nested too deeply")
    return Document(index, doc_id, title or "", text, meta)


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
    return validate_fields(index, _first(obj, ID_KEYS), _first(obj, TEXT_KEYS), obj.get("title"), obj.get("metadata"))


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")


def tsv_value(field: str) -> Any:
    """A TSV metadata field as a typed value: empty → null, a JSON number → int or float,
    ``true`` / ``false`` → boolean, anything else the text itself (so ``007`` stays text)."""
    if field == "":
        return None
    if field in ("true", "false"):
        return field == "true"
    m = _JSON_NUMBER.fullmatch(field)
    if m is None:
        return field
    return float(field) if m.group(1) or m.group(2) else int(field)


@dataclass(frozen=True)
class TsvHeader:
    """A TSV file's header: its column names (as written) and which is the title (None: no
    title column). Column 0 is the id and column 1 the text; every other column but the
    title is a metadata key."""

    names: tuple[str, ...]
    title: Optional[int]

    @classmethod
    def of(cls, names: Sequence[str]) -> "TsvHeader":
        lower = [n.lower() for n in names]
        title = lower.index("title", 2) if "title" in lower[2:] else (2 if len(names) == 3 else None)
        return cls(tuple(names), title)

    @property
    def metadata_columns(self) -> list[int]:
        return [i for i in range(2, len(self.names)) if i != self.title]


def parse_tsv_line(raw: bytes, index: int, header: Optional[TsvHeader] = None) -> Row:
    """One TSV row: ``id<TAB>text`` or ``id<TAB>text<TAB>title``; under a header with metadata
    columns (``TsvHeader``), exactly the header's fields, the extra ones typed by ``tsv_value``."""
    line = _decode(raw, index)
    if isinstance(line, Reject):
        return line
    parts = line.rstrip("\r").split("\t")
    if header is not None and header.metadata_columns:
        if len(parts) != len(header.names):
            doc_id = safe_text(parts[0], MAX_REJECT_ID_CHARS) if len(parts) > 1 and parts[0] else None
            return Reject(index, doc_id, f"{MALFORMED_TSV}: {len(parts)} fields, the header has {len(header.names)}")
        meta = {header.names[i]: tsv_value(parts[i]) for i in header.metadata_columns}
        return validate_fields(index, parts[0], parts[1], parts[header.title] if header.title is not None else None, meta)
    if len(parts) < 2 or len(parts) > 3:
        doc_id = safe_text(parts[0], MAX_REJECT_ID_CHARS) if len(parts) > 1 and parts[0] else None
        return Reject(index, doc_id, f"{MALFORMED_TSV}: {len(parts)} fields, expected id<TAB>text[<TAB>title]")
    return validate_fields(index, parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def tsv_header(raw: bytes) -> Optional[TsvHeader]:
    """The header of a line such as ``id<TAB>text``, ``_id<TAB>text<TAB>title`` or
    ``id<TAB>text<TAB>title<TAB>year<TAB>source`` (a UTF-8 BOM before it allowed): at least 2
    fields (at most 3 + ``MAX_METADATA_KEYS``), the first an id column name
    (``HEADER_ID_COLUMNS``), the others distinct one-word column names; None for a line that
    is not a header. A header is skipped, not counted as a row."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    try:
        names = [f.strip() for f in raw.decode("utf-8").rstrip("\r").split("\t")]
    except UnicodeDecodeError:
        return None
    lower = [n.lower() for n in names]
    if not 2 <= len(names) <= 3 + MAX_METADATA_KEYS or lower[0] not in HEADER_ID_COLUMNS:
        return None
    if not all(_COLUMN_NAME.fullmatch(f) for f in lower[1:]) or len(set(lower)) != len(lower):
        return None
    return TsvHeader.of(names)


def parse_record(obj: dict[str, Any], index: int, id_field: str, text_field: str, title_field: Optional[str]) -> Row:
    """One row of a columnar input (Parquet) given as a dict; every other column of it is a
    metadata key."""
    meta = {k: v for k, v in obj.items() if k not in (id_field, text_field, title_field)}
    return validate_fields(index, obj.get(id_field), obj.get(text_field), obj.get(title_field) if title_field else None, meta)


def parse_rows(
    rows: Iterable[tuple[int, Any]],
    fmt: str,
    first_block_of_file: bool,
    fields: Optional[tuple[str, str, Optional[str]]] = None,
    header: Optional[TsvHeader] = None,
) -> list[Row]:
    """Parse a block's raw rows (from ``storage.corpus.read_block``) in order.

    ``fmt`` is ``jsonl``, ``tsv`` or ``parquet`` (then ``fields`` = id, text, title columns).
    A UTF-8 byte order mark at the start of a file is dropped; a TSV header on the file's
    first line is not a row; a blank line is a reject. ``header``: the TSV file's header
    (``tsv_header`` of its first line), for blocks after the first."""
    out: list[Row] = []
    for index, raw in rows:
        if fmt == "parquet":
            id_col, text_col, title_col = fields  # type: ignore[misc]
            out.append(parse_record(raw, index, id_col, text_col, title_col))
            continue
        if first_block_of_file and index == 0 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        if fmt == "tsv" and first_block_of_file and index == 0:
            found = tsv_header(raw)
            if found is not None:
                header = found
                continue
        if not raw.strip():
            out.append(Reject(index, None, f"{EMPTY_LINE}: blank line"))
        elif fmt == "tsv":
            out.append(parse_tsv_line(raw, index, header))
        else:
            out.append(parse_jsonl_line(raw, index))
    return out
