"""The index's codec files (``codecs/{group}.mvrc``, the format of ``operators.codecs.serial``):
written once per index, each one's size and sha256 recorded in the manifest's ``codecs``
entry, checked in full whenever a job or replica loads it (they are small: a codebook, a PCA
matrix).

Two groups of vector kinds, one codec each (docs/codecs.md has the measurements behind it):

- ``tokens``: the token vectors (MaxSim), most of an index's vectors;
- ``pooled``: the vectors scored against the pooled query vector: pooled, first-m and the
  k-means centroids (whose norms carry meaning: softmax-centroid weighs by them)."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional

from mvr.operators import codecs
from mvr.storage import fs
from mvr.storage.integrity import ExpectedFile, read_listed, unreadable
from mvr.storage.shards import STAGING_DIR

CODECS_DIR = "codecs"
GROUPS = ("tokens", "pooled")
KIND_GROUP = {"tokens": "tokens", "first-m": "pooled", "centroids": "pooled", "pooled": "pooled"}


def _rel(group: str) -> str:
    return f"{CODECS_DIR}/{group}.mvrc"


def _staged_url(index_url: str, group: str) -> str:
    return fs.join(index_url, STAGING_DIR, _rel(group))


def read_staged(index_url: str) -> Optional[dict[str, bytes]]:
    """The codecs an interrupted run of the indexing job trained and staged ({group: file
    bytes}; None unless every group's is there: they are staged together)."""
    urls = {g: _staged_url(index_url, g) for g in GROUPS}
    if not all(fs.exists(u) for u in urls.values()):
        return None
    return {g: fs.read_bytes(u) for g, u in urls.items()}


def stage(index_url: str, files: Mapping[str, bytes]) -> None:
    """Stage the trained codecs ({group: file bytes}), the pooled one first: the tokens one
    marks the set complete (``read_staged``)."""
    for g in sorted(GROUPS, key=lambda g: g == "tokens"):
        fs.write_bytes_atomic(_staged_url(index_url, g), files[g])


def commit(index_url: str, files: Mapping[str, bytes], sample_vectors_max: int, seed: int) -> dict[str, dict[str, Any]]:
    """Write the codec files into the index; the manifest's ``codecs`` entry {group: name,
    path, bytes, sha256, dim_in, dim_out, bytes_per_vector, sample_vectors_max, seed}."""
    out = {}
    for g in GROUPS:
        data = files[g]
        codec = codecs.from_bytes(data, _rel(g))
        fs.write_bytes_atomic(fs.join(index_url, _rel(g)), data)
        out[g] = {
            "name": codec.name,
            "path": _rel(g),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "dim_in": codec.dim_in,
            "dim_out": codec.dim_out,
            "bytes_per_vector": codec.bytes_per_vector,
            "sample_vectors_max": int(sample_vectors_max),
            "seed": int(seed),
        }
    return out


def read_committed(index_url: str, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, bytes]:
    """The index's codec files as bytes ({group: bytes}), each checked against the manifest's
    ``codecs`` entry (``IntegrityError``): what ``mvr add`` compresses new documents with."""
    return {g: read_listed(index_url, ExpectedFile(entries[g]["path"], "codec", int(entries[g]["bytes"]), str(entries[g]["sha256"]))) for g in GROUPS}


def load_codec(index_url: str, entry: Mapping[str, Any]) -> codecs.Codec:
    """The codec a manifest ``codecs`` entry lists, its size and sha256 checked:
    ``IntegrityError`` when the file is missing or differs from the manifest, or cannot be
    decoded as a codec."""
    expected = ExpectedFile(entry["path"], "codec", int(entry["bytes"]), str(entry["sha256"]))
    data = read_listed(index_url, expected)
    try:
        return codecs.from_bytes(data, fs.join(index_url, expected.path))
    except codecs.CodecFileError as exc:
        raise unreadable(index_url, expected, exc, len(data)) from exc


def load_codecs(index_url: str, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, codecs.Codec]:
    """Every codec of the index ({group: Codec}) from the manifest's ``codecs`` entry."""
    return {g: load_codec(index_url, entries[g]) for g in GROUPS}


def codec_of(codec_set: Mapping[str, codecs.Codec], kind: str) -> codecs.Codec:
    """The codec that stores vector ``kind`` (tokens, first-m, centroids, pooled)."""
    return codec_set[KIND_GROUP[kind]]


def read_codec(url: str) -> codecs.Codec:
    """The codec in the file at ``url``; ``CodecFileError`` naming it when it cannot be read,
    is truncated or corrupted."""
    try:
        data = fs.read_bytes(url)
    except OSError as e:
        raise codecs.CodecFileError(f"codec file {url}: cannot be read ({e})") from None
    return codecs.from_bytes(data, url)
