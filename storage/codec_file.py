"""The index's codec file (``codec.mvrc``, the format of ``operators.codecs.serial``): written
once per index, its size and sha256 recorded in the manifest's ``codec`` entry, checked in
full whenever a job or replica loads it (it is small: a codebook, a PCA matrix)."""

from __future__ import annotations

import hashlib
from typing import Any, Optional

from operators import codecs
from storage import fs
from storage.shards import STAGING_DIR
from storage.verify import ExpectedFile, check_data, missing, unreadable

CODEC_FILE = "codec.mvrc"


def staged_url(index_url: str) -> str:
    """Where an indexing job keeps the codec it trained until it commits (a rerun reuses it)."""
    return fs.join(index_url, STAGING_DIR, CODEC_FILE)


def read_staged(index_url: str) -> Optional[bytes]:
    """The staged codec's bytes (None when none was trained yet)."""
    url = staged_url(index_url)
    return fs.read_bytes(url) if fs.exists(url) else None


def stage(index_url: str, data: bytes) -> None:
    fs.write_bytes_atomic(staged_url(index_url), data)


def commit(index_url: str, data: bytes, codec: codecs.Codec, sample_vectors_max: int, seed: int) -> dict[str, Any]:
    """Write the codec file into the index; its manifest entry."""
    fs.write_bytes_atomic(fs.join(index_url, CODEC_FILE), data)
    return {
        "name": codec.name,
        "path": CODEC_FILE,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "dim_in": codec.dim_in,
        "dim_out": codec.dim_out,
        "bytes_per_vector": codec.bytes_per_vector,
        "sample_vectors_max": int(sample_vectors_max),
        "seed": int(seed),
    }


def load_codec(index_url: str, entry: dict[str, Any]) -> codecs.Codec:
    """The codec the manifest's ``codec`` entry lists, its size and sha256 checked:
    ``IntegrityError`` when the file is missing or differs from the manifest, or cannot be
    decoded as a codec."""
    expected = ExpectedFile(entry["path"], "codec", int(entry["bytes"]), str(entry["sha256"]))
    try:
        data = fs.read_bytes(fs.join(index_url, expected.path))
    except FileNotFoundError:
        raise missing(index_url, expected) from None
    check_data(index_url, expected, data, sha256=True)
    try:
        return codecs.from_bytes(data, fs.join(index_url, expected.path))
    except codecs.CodecFileError as exc:
        raise unreadable(index_url, expected, exc, len(data)) from exc
