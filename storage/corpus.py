"""Corpus input: find the files behind a URL, cut them into stable input blocks, read a block.

A block is a byte range of a JSON-lines / TSV file (a line belongs to the block its first
byte falls in) or a run of Parquet row groups. Block ids are stable for a given input and
block size, so a shard named by its block is never written twice by a rerun.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import asdict, dataclass
from typing import Iterator, Optional, Union

import pyarrow as pa
import pyarrow.parquet as pq

from mvr.operators.encode.validation import ID_KEYS, TEXT_KEYS, TsvHeader, tsv_header
from mvr.storage import fs

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}
COMPRESSED = (".gz", ".bz2", ".zst", ".xz")


class CorpusError(ValueError):
    """The corpus URL names nothing readable, a file of it cannot be read as its format, or
    no row of it can be indexed."""


@dataclass(frozen=True)
class InputBlock:
    """One unit of input work. ``start``/``end``: bytes (jsonl, tsv) or row groups (parquet)."""

    block_id: str
    url: str
    format: str
    start: int
    end: int
    compression: Optional[str] = None
    max_rows: Optional[int] = None  # set when --limit ends the input inside this block

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "InputBlock":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def _format_of(path: str) -> tuple[Optional[str], Optional[str]]:
    compression = None
    for ext in COMPRESSED:
        if path.endswith(ext):
            compression = "infer"
            path = path[: -len(ext)]
    return FORMATS.get(posixpath.splitext(path)[1].lower()), compression


def find_files(url: str) -> list[tuple[str, str, Optional[str]]]:
    """(url, format, compression) of every corpus file behind ``url``: a file, a BEIR
    directory (``corpus.jsonl``), or a directory of .jsonl / .tsv / .parquet files."""
    filesystem, path = fs.resolve(url)
    if not filesystem.exists(path):
        raise CorpusError(f"corpus not found: {url}")
    if filesystem.isdir(path):
        beir = posixpath.join(path, "corpus.jsonl")
        candidates = [beir] if filesystem.exists(beir) else sorted(p for p in filesystem.find(path) if _format_of(p)[0] is not None)
    else:
        candidates = [path]
    out = []
    for p in candidates:
        fmt, compression = _format_of(p)
        if fmt is None:
            raise CorpusError(f"unknown corpus format for {p} (expected {', '.join(FORMATS)})")
        out.append((fs.unstrip(filesystem, p), fmt, compression))
    if not out:
        raise CorpusError(f"no corpus files (.jsonl, .tsv, .parquet) under {url}")
    return out


def plan_blocks(url: str, block_bytes: int, parquet_rows_per_block: int) -> tuple[list[InputBlock], str]:
    """Cut the corpus into blocks. Returns (blocks, fingerprint of the input files)."""
    blocks: list[InputBlock] = []
    digest = hashlib.sha256()
    for file_no, (file_url, fmt, compression) in enumerate(find_files(url)):
        meta = fs.info(file_url)
        size = int(meta.get("size") or 0)
        digest.update(f"{file_url}|{size}|{meta.get('mtime', meta.get('LastModified', ''))}".encode())
        if fmt == "parquet":
            md = _parquet_metadata(file_url)
            groups, rows, start = [], 0, 0
            for g in range(md.num_row_groups):
                rows += md.row_group(g).num_rows
                if rows >= parquet_rows_per_block or g == md.num_row_groups - 1:
                    groups.append((start, g + 1))
                    start, rows = g + 1, 0
            ranges = groups or [(0, 0)]
        elif compression:
            ranges = [(0, size)]  # a compressed stream cannot be split
        else:
            ranges = [(s, min(s + block_bytes, size)) for s in range(0, max(size, 1), block_bytes)]
        for block_no, (s, e) in enumerate(ranges):
            blocks.append(InputBlock(f"{file_no:05d}-{block_no:06d}", file_url, fmt, s, e, compression))
    return blocks, digest.hexdigest()


def _parquet_metadata(url: str) -> pq.FileMetaData:
    """A Parquet corpus file's metadata, after checking (on the driver, before any task) that
    it is Parquet and has the id and text columns; CorpusError naming the file otherwise."""
    try:
        with fs.open_file(url) as f:
            pf = pq.ParquetFile(f)
            md, names = pf.metadata, pf.schema_arrow.names
    except (pa.ArrowException, OSError) as exc:
        raise CorpusError(f"{url}: not a readable Parquet file ({exc})") from None
    _columns(url, names)
    return md


def _columns(url: str, names: list[str]) -> tuple[str, str, Optional[str]]:
    pick = lambda opts: next((n for n in opts if n in names), None)  # noqa: E731
    id_col, text_col = pick(ID_KEYS), pick(TEXT_KEYS)
    if id_col is None or text_col is None:
        missing = " and ".join(what for what, col in (("id", id_col), ("text", text_col)) if col is None)
        raise CorpusError(
            f"{url}: a Parquet corpus needs an id column (one of {', '.join(ID_KEYS)}) and a text column "
            f"(one of {', '.join(TEXT_KEYS)}), title optional; found columns: {', '.join(names) or '(none)'} (no {missing} column)"
        )
    return id_col, text_col, pick(("title",))


def _iter_lines(block: InputBlock) -> Iterator[bytes]:
    """Raw lines (without the newline) whose first byte lies in [start, end)."""
    with fs.open_file(block.url, "rb", compression=block.compression) as f:
        if block.compression:
            for line in f:
                yield line.rstrip(b"\n")
            return
        pos = block.start
        if pos > 0:
            f.seek(pos - 1)
            skipped = f.readline()  # rest of the line owned by the previous block
            pos = pos - 1 + len(skipped)
        while pos < block.end:
            line = f.readline()
            if not line:
                break
            pos += len(line)
            yield line.rstrip(b"\n")


def read_block(block: InputBlock, columns: Optional[list[str]] = None) -> Iterator[Union[tuple[int, bytes], tuple[int, dict]]]:
    """(line or row index within the block, raw line bytes | Parquet row dict), in input order.
    ``columns``: the Parquet columns to read (default all). A string value that is not valid
    UTF-8 comes as its raw bytes (validation rejects that row), so one bad value does not
    fail the block."""
    if block.format == "parquet":
        with fs.open_file(block.url) as f:
            pf = pq.ParquetFile(f)
            index = 0
            for g in range(block.start, block.end):
                table = pf.read_row_group(g, columns=columns)
                values = [_pylist(table.column(i)) for i in range(table.num_columns)]
                for row in zip(*values):
                    yield index, dict(zip(table.column_names, row))
                    index += 1
        return
    yield from enumerate(_iter_lines(block))


def _pylist(column: pa.ChunkedArray) -> list:
    """A column as Python values; a string column with invalid UTF-8 as bytes instead."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        if pa.types.is_large_string(column.type):
            return column.cast(pa.large_binary()).to_pylist()
        if pa.types.is_string(column.type):
            return column.cast(pa.binary()).to_pylist()
        raise


def read_tsv_header(block: InputBlock) -> Optional[TsvHeader]:
    """The header of the TSV file ``block`` belongs to (its first line), or None when that line
    is data: blocks after the first need it to name their metadata columns."""
    with fs.open_file(block.url, "rb", compression=block.compression) as f:
        return tsv_header(f.readline(1 << 20).rstrip(b"\n"))


def parquet_fields(url: str) -> tuple[str, str, Optional[str]]:
    """(id, text, title) column names of a Parquet corpus file (CorpusError naming the
    expected and the found columns when it lacks one)."""
    with fs.open_file(url) as f:
        names = pq.ParquetFile(f).schema_arrow.names
    return _columns(url, names)
