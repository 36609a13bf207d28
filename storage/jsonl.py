"""Writing JSON-lines files (e.g. a BEIR ``corpus.jsonl``) to any fsspec URL."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from mvr.storage import fs


def encode_jsonl(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """One compact JSON object per line, UTF-8, newline-terminated."""
    return "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def write_jsonl(url: str, rows: Iterable[Mapping[str, Any]]) -> bool:
    """Write ``rows`` to ``url`` atomically. A file that already holds exactly these bytes is
    left untouched (its mtime, part of an index's input fingerprint, stays the same).
    Returns whether the file was written."""
    data = encode_jsonl(rows)
    if fs.exists(url) and fs.read_bytes(url) == data:
        return False
    fs.write_bytes_atomic(url, data)
    return True
