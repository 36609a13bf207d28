"""The index's codec files (``codecs/{group}.mvrc``, the format of ``operators.codecs.serial``):
written once per index, each one's size and sha256 recorded in the manifest's ``codecs``
entry, checked in full whenever a job or replica loads it (they are small: a codebook, a PCA
matrix).

Codec groups, one file each (docs/codecs.md has the measurements behind them):

- ``tokens``: the token vectors (MaxSim), most of an index's vectors;
- ``pooled``: the vectors scored against the pooled query vector: pooled and the k-means
  centroids (whose norms carry meaning: softmax-centroid weighs by them), and first-m
  when the index has no ``first_m`` file;
- ``first_m`` (optional): the first-m vectors' refinement of their token codes
  (``operators/codecs/refinement.py``): first-m is then read as each passage's first m token
  codes plus these codes (``codec_of``), with no vector stored twice."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional

from mvr.operators import codecs
from mvr.storage import fs
from mvr.storage.integrity import ExpectedFile, read_listed, unreadable
from mvr.storage.shards import STAGING_DIR

CODECS_DIR = "codecs"
GROUPS = codecs.GROUPS
REQUIRED = ("tokens", "pooled")  # every index has these; first_m only with the refinement
KIND_GROUP = {"tokens": "tokens", "first-m": "pooled", "centroids": "pooled", "pooled": "pooled"}  # first-m: without a first_m file


def _rel(group: str) -> str:
    return f"{CODECS_DIR}/{group}.mvrc"


def _staged_url(index_url: str, group: str) -> str:
    return fs.join(index_url, STAGING_DIR, _rel(group))


def read_staged(index_url: str) -> Optional[dict[str, bytes]]:
    """The codecs an interrupted run of the indexing job trained and staged ({group: file
    bytes}; None unless the tokens group's is there: it is staged last, after the others)."""
    urls = {g: _staged_url(index_url, g) for g in GROUPS}
    if not fs.exists(urls["tokens"]):
        return None
    return {g: fs.read_bytes(u) for g, u in urls.items() if fs.exists(u)}


def stage(index_url: str, files: Mapping[str, bytes]) -> None:
    """Stage the trained codecs ({group: file bytes}, ``REQUIRED`` and optionally first_m),
    the others first: the tokens one marks the set complete (``read_staged``); a group
    staged by an earlier run and not in ``files`` is removed before."""
    missing_groups = [g for g in REQUIRED if g not in files]
    if missing_groups:
        raise ValueError(f"codec files of {', '.join(missing_groups)} missing")
    for g in GROUPS:
        if g not in files and fs.exists(_staged_url(index_url, g)):
            fs.remove(_staged_url(index_url, g))
    for g in sorted(files, key=lambda g: g == "tokens"):
        fs.write_bytes_atomic(_staged_url(index_url, g), files[g])


def commit(index_url: str, files: Mapping[str, bytes], sample_vectors_max: int, seed: int) -> dict[str, dict[str, Any]]:
    """Write the codec files into the index; the manifest's ``codecs`` entry {group: name,
    path, bytes, sha256, dim_in, dim_out, bytes_per_vector, sample_vectors_max, seed}."""
    out = {}
    for g in [g for g in GROUPS if g in files]:
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
    return {
        g: read_listed(index_url, ExpectedFile(entries[g]["path"], "codec", int(entries[g]["bytes"]), str(entries[g]["sha256"])))
        for g in GROUPS
        if g in entries
    }


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
    return {g: load_codec(index_url, entries[g]) for g in GROUPS if g in entries}


def refines_first_m(codec_set: Mapping[str, Any]) -> bool:
    """Whether the index reads first-m from its token codes plus a refinement (a ``first_m``
    codec, file or manifest entry) rather than from a column in the pooled group's codec."""
    return "first_m" in codec_set


def group_of(codec_set: Mapping[str, Any], kind: str) -> str:
    """The codec group whose file codes the stored column of vector ``kind`` (``codec_set``:
    the index's codecs, files or manifest entries by group): first-m's is ``first_m`` when the
    index refines it (the column then holds refinement codes), else ``KIND_GROUP``'s."""
    return "first_m" if kind == "first-m" and refines_first_m(codec_set) else KIND_GROUP[kind]


def codec_of(codec_set: Mapping[str, codecs.Codec], kind: str) -> codecs.Codec:
    """The codec whose codes a reader decodes for vector ``kind`` (tokens, first-m,
    centroids, pooled): first-m with a refinement is ``Refined(tokens, first_m)``, whose code
    is a token code and a refinement code side by side (``storage.partitions.read_passages``)."""
    refined = refined_first_m(codec_set) if kind == "first-m" else None
    return refined if refined is not None else codec_set[KIND_GROUP[kind]]


def refined_first_m(codec_set: Mapping[str, codecs.Codec]) -> Optional[codecs.Refined]:
    """First-m's codec when the index refines the token codes (``Refined(tokens, first_m)``),
    else None (first-m is a column in the pooled codec)."""
    if not refines_first_m(codec_set):
        return None
    refinement = codec_set["first_m"]
    if not isinstance(refinement, codecs.Refinement):
        raise codecs.CodecFileError(f"the first_m codec is {refinement.name}, not a refinement (refine-M)")
    return codecs.Refined(codec_set["tokens"], refinement)


def read_codec(url: str) -> codecs.Codec:
    """The codec in the file at ``url``; ``CodecFileError`` naming it when it cannot be read,
    is truncated or corrupted."""
    try:
        data = fs.read_bytes(url)
    except OSError as e:
        raise codecs.CodecFileError(f"codec file {url}: cannot be read ({e})") from None
    return codecs.from_bytes(data, url)
