"""Facts about a committed index, from its manifest, catalog and files."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from mvr.storage import fs
from mvr.storage.catalog import Catalog
from mvr.storage.codec_file import group_of
from mvr.storage.manifest import Manifest, load_manifest

# vector kind → codes-file column (storage/schema.py); the order ``mvr stats`` prints them in
KIND_COLUMNS = {"tokens": "tokens", "first-m": "first_m", "centroids": "centroids", "pooled": "pooled"}


def index_stats(index_url: str) -> dict:
    """Counts from the manifest, checked against the catalog, rejects grouped by reason, the
    codecs (trained, and as configured), and the bytes a vector of each kind costs on disk (``vector_bytes``)."""
    m = load_manifest(index_url)
    cat = Catalog(index_url)
    try:
        totals = cat.totals()
        rejects = cat.rejects_by_reason()
    finally:
        cat.close()
    return {
        "manifest_version": m.version,
        "schema_version": m.schema_version,
        "model": m.model["name"],
        "model_format": m.model["format"],
        "input_rows": m.counts["input_rows"],
        "documents": totals["documents"],
        "passages": totals["passages"],  # live: the catalog of the version holds no deleted passage
        "deleted_passages": int(m.counts.get("deleted_passages", 0)),  # tombstoned, still in the shards until mvr compact
        "adds": len(m.adds),
        "last_change": (lambda h: f"version {h['version']}: {h['operation']}" + (f" ({h['summary']})" if h.get("summary") else "") + f" at {h['at']}")(
            m.history[-1]
        )
        if m.history
        else "",
        "tokens": totals["tokens"],
        "dim": m.dim,
        "codec": m.codecs["tokens"]["name"],
        # the configured names (auto, or a name): another than the codec's when the training
        # sample was too small for it (operators.codecs.choose, docs/codecs.md)
        "codec_asked": m.config.get("compress", {}).get("codec", m.codecs["tokens"]["name"]),
        "pooled_codec": m.codecs["pooled"]["name"],
        "pooled_codec_asked": m.config.get("compress", {}).get("pooled_codec", m.codecs["pooled"]["name"]),
        "bytes_per_token_vector": int(m.codecs["tokens"]["bytes_per_vector"]),  # the token codec's code size
        "shards": len(m.shards),
        "shard_bytes": sum(s.bytes for s in m.shards),
        "codes_bytes": sum(s.codes_bytes for s in m.shards),
        "rejected": m.counts["rejected"],
        "rejects_by_reason": rejects,
        "vector_bytes": vector_bytes(index_url, m),
    }


def codes_file_columns(index_url: str, rel_path: str) -> dict[str, Any]:
    """One codes file's bytes by column, read from its Arrow IPC buffers (a memory map when
    local: only the metadata is touched): ``file_bytes``, ``columns`` {column: {"bytes": the
    column's buffers (codes, list offsets, validity) over every record batch, "vectors"}}."""
    url = fs.join(index_url, rel_path)
    local = fs.local_path(url)
    source = pa.memory_map(local, "r") if local is not None else pa.BufferReader(fs.read_bytes(url))
    with source:
        size = source.size()
        reader = pa.ipc.open_file(source)
        columns: dict[str, dict[str, int]] = {name: {"bytes": 0, "vectors": 0} for name in reader.schema.names}
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            for name, arr in zip(batch.schema.names, batch.columns):
                col = columns[name]
                col["bytes"] += sum(b.size for b in arr.buffers() if b is not None)
                if pa.types.is_list(arr.type):
                    offsets = arr.offsets
                    col["vectors"] += offsets[-1].as_py() - offsets[0].as_py() if len(offsets) else 0
                else:
                    col["vectors"] += len(arr)
    return {"file_bytes": size, "columns": columns}


def vector_bytes(index_url: str, m: Manifest) -> dict[str, Any]:
    """Bytes a vector costs on disk, measured from the files that hold vectors or their ANN
    index: per kind the codes files' buffers of its column (codes + list offsets) and its ANN
    partitions' ``index/`` files (every partition of the manifest's build), divided by the
    kind's vector count; the total puts the codes files' whole bytes (framing included) and
    every ANN index over all vectors. The ANN partitions' ``passages.parquet`` (ids, no
    vectors) and the codec files are left out."""
    kinds: dict[str, dict[str, Any]] = {k: {"vectors": 0, "codes_bytes": 0, "ann_bytes": 0} for k in KIND_COLUMNS}
    codes_files = 0
    for shard in m.shards:
        info = codes_file_columns(index_url, shard.codes)
        codes_files += info["file_bytes"]
        for kind, column in KIND_COLUMNS.items():
            kinds[kind]["vectors"] += info["columns"][column]["vectors"]
            kinds[kind]["codes_bytes"] += info["columns"][column]["bytes"]
    for kind, entry in m.ann.items():
        if kind in kinds:
            kinds[kind]["ann_bytes"] = sum(f["bytes"] for part in entry.get("partitions", []) for name, f in part["files"].items() if name.startswith("index/"))
    for k in kinds.values():
        n = max(k["vectors"], 1)
        k["codes_per_vector"] = k["codes_bytes"] / n
        k["ann_per_vector"] = k["ann_bytes"] / n
        k["total_per_vector"] = (k["codes_bytes"] + k["ann_bytes"]) / n
    vectors = sum(k["vectors"] for k in kinds.values())
    ann = sum(k["ann_bytes"] for k in kinds.values())
    total = {"vectors": vectors, "codes_files_bytes": codes_files, "ann_bytes": ann, "per_vector": (codes_files + ann) / max(vectors, 1)}
    for kind, k in kinds.items():
        entry = m.codecs[group_of(m.codecs, kind)]
        k["codec"], k["bytes_per_vector"] = entry["name"], int(entry["bytes_per_vector"])
    return {"codecs": {g: e["name"] for g, e in m.codecs.items()}, "kinds": kinds, "total": total}
