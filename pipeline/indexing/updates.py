"""Live updates of a committed index: ``mvr add`` and ``mvr delete`` (``mvr compact`` is
``pipeline/indexing/compaction.py``). Each commits one new version (``storage/manifest.py``:
exclusive create, re-applied on top of a concurrent writer's version) and rewrites no file a
reader may hold: new documents go into new shards, deletions into a new tombstones file,
the partitions that change into new directories.

Ids are the documents' own (``doc_id``): nothing is renumbered. Internally a passage has a
global number (shards in manifest order, rows in shard order); an add appends shards, so
numbers only grow until a compaction.

``mvr add INDEX CORPUS`` indexes the new documents with the index's own configuration and
codec files (no retraining) into a workspace ``adds/{add id}/`` (the indexing graph of
``pipeline/indexing/corpus_job.py``: validation, duplicates, rejects, encode and compress; resumable),
then commits: the workspace's shards join the shard list; a document id the index already
holds is an **update**: its old passages are tombstoned; the ANN partitions take the new
passages (``extend_ann``); BM25 partitions are rebuilt over the new ranges (their statistics
are collection-wide); a catalog of the version is written. Running the same add again (same
input, same settings) finds it committed and changes nothing.

Routing rule (ANN): passages are appended to the last partition of each vector kind, whose
ANN index takes them without retraining (its trained quantizers code them; FAISS ``add``,
ScaNN ``upsert``), until it holds 1.5× the build's target size (``target_passages``: the
passages a partition got at build); the rest open new partitions of the target size, each
trained on its own vectors like a partition of ``mvr build-ann``. So every partition stays a
contiguous passage range, no partition exceeds 1.5× the target, and P grows with the index;
``mvr compact`` re-splits it evenly."""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from dataclasses import asdict
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa

from mvr.operators.ann.base import set_build_threads
from mvr.operators.ann.factory import load_index
from mvr.pipeline.config import BM25Config, IndexConfig
from mvr.pipeline.indexing.ann_build import build_partition, fill
from mvr.pipeline.indexing.bm25_build import build_bm25_entry
from mvr.pipeline.indexing.corpus_job import index_corpus
from mvr.pipeline.ray_runtime import init_ray, run_calls, small_build_threads, task_cpus
from mvr.pipeline.results import UpdateResult
from mvr.storage import codec_file, fs
from mvr.storage.catalog import Catalog, build_catalog
from mvr.storage.codec_file import load_codecs
from mvr.storage.corpus import plan_blocks
from mvr.storage.index_dir import check_corpus_outside
from mvr.storage.integrity import ExpectedFile, require_intact
from mvr.storage.manifest import Manifest, ShardEntry, ShardList, commit_update, load_manifest, shard_lookup, shard_paths, shard_rows
from mvr.storage.partitions import (
    INDEX_SUBDIR,
    PartitionPlan,
    PassageVectors,
    ShardSlice,
    local_copy,
    partition_slices,
    plan_ranges,
    read_partition_passages,
    read_passages,
    write_partition,
)
from mvr.storage.retention import collect
from mvr.storage.tombstones import read_tombstones, write_tombstones
from mvr.storage.verify import codes_file

ADDS_DIR = "adds"
CATALOGS_DIR = "catalogs"
GROWTH_CAP = 1.5  # a partition takes appended passages up to this multiple of its build's target size


# ---------------------------------------------------------------------------------------------
# mvr add


def add_id(corpus_url: str, input_fingerprint: str, config: IndexConfig) -> str:
    """The workspace name of adding this input with these settings (so a rerun resumes it)."""
    key = json.dumps({"corpus": corpus_url, "input": input_fingerprint, "settings": config.vector_settings()}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def add_documents(corpus_url: str, index_url: str, log: Callable[[str], None] = print, force: bool = False) -> UpdateResult:
    """``mvr add INDEX CORPUS`` (module docstring). ``force``: add an input again that an
    earlier add of the same bytes committed."""
    t0 = time.time()
    check_corpus_outside(corpus_url, index_url)
    base = load_manifest(index_url)
    config = IndexConfig.of_index(base.config)
    blocks, fingerprint = plan_blocks(corpus_url, config.runtime.block_bytes, config.runtime.parquet_rows_per_block)
    del blocks
    aid = add_id(corpus_url, fingerprint, config)
    if force:
        aid = f"{aid}-{uuid.uuid4().hex[:6]}"
    done = [a for a in base.adds if a["id"] == aid]
    if done:
        log(f"{corpus_url} was added already (version {done[0]['version']}); nothing to do (--force adds it again)")
        return UpdateResult(base, f"already added in version {done[0]['version']}", time.time() - t0, True)
    workspace = fs.join(index_url, ADDS_DIR, aid)
    log(f"adding {corpus_url} to {index_url} (version {base.version}) through the workspace {ADDS_DIR}/{aid}")
    ws = index_corpus(corpus_url, workspace, config, log=log, codecs_given=codec_file.read_committed(index_url, base.codecs)).manifest
    log(f"encoded {ws.counts['passages']} passages of {ws.counts['indexed_documents']} documents; committing")

    def change(m: Manifest) -> Manifest:
        if any(a["id"] == aid for a in m.adds):
            raise AlreadyCommitted(aid)
        if {g: e["sha256"] for g, e in m.codecs.items()} != {g: e["sha256"] for g, e in base.codecs.items()}:
            raise ValueError("the index's codecs changed while the documents were encoded (it was rebuilt); nothing was committed: add them again")
        return _merge_add(index_url, m, ws, aid, corpus_url, fingerprint, log)

    try:
        m = commit_update(index_url, change, "add", lambda m: _add_summary(m.adds[-1]), log=log)
    except AlreadyCommitted:
        m = load_manifest(index_url)
        return UpdateResult(m, "already added by a concurrent run", time.time() - t0, True)
    collect(index_url)
    summary = _add_summary(m.adds[-1])
    log(f"committed version {m.version}: {summary}")
    return UpdateResult(m, summary, time.time() - t0)


class AlreadyCommitted(RuntimeError):
    """The add was committed (by a concurrent run of the same add)."""


def _add_summary(a: dict[str, Any]) -> str:
    return f"added {a['documents']} documents ({a['updated']} updated), {a['passages']} passages, rejected {a['rejected']}"


def _merge_add(index_url: str, m: Manifest, ws: Manifest, aid: str, corpus_url: str, fingerprint: str, log: Callable[[str], None]) -> Manifest:
    """``m`` (the latest version) with the workspace's documents added (module docstring)."""
    version = m.version + 1
    first_new = int(shard_rows(m.shards).sum())
    n_new = int(shard_rows(ws.shards).sum())
    prefix = f"{ADDS_DIR}/{aid}/"
    added = ShardList.from_entries(ws.shards).to_table()
    added = added.set_column(added.schema.get_field_index("path"), "path", pa.compute.binary_join_element_wise(prefix, added["path"], ""))
    added = added.set_column(added.schema.get_field_index("codes"), "codes", pa.compute.binary_join_element_wise(prefix, added["codes"], ""))
    m.shards = ShardList.from_table(pa.concat_tables([ShardList.from_entries(m.shards).to_table(), added]))
    # updates: the documents the index holds already lose their old passages
    ws_catalog = Catalog(fs.join(index_url, ADDS_DIR, aid), ws.catalog)
    try:
        new_ids = [r[0] for r in ws_catalog.con.execute("SELECT DISTINCT doc_id FROM passages").fetchall()]
    finally:
        ws_catalog.close()
    catalog = Catalog(index_url, m.catalog)
    try:
        replaced = catalog.passages_of(new_ids)
        updated = len(catalog.doc_ids_present(new_ids)) if len(replaced) else 0
    finally:
        catalog.close()
    dead = np.union1d(read_tombstones(index_url, m.tombstones), replaced)
    m.tombstones = write_tombstones(index_url, dead)
    codecs = load_codecs(index_url, m.codecs)
    for kind, entry in list(m.ann.items()):
        m.ann[kind] = extend_ann(index_url, m, kind, entry, first_new, n_new, codecs, log)
    if m.bm25:
        starts = [p["first_passage"] for e in list(m.ann.values()) + [m.bm25] for p in e["partitions"]] + [first_new]
        bounds = sorted({0, first_new + n_new} | {int(x) for x in starts})
        m.bm25 = build_bm25_entry(index_url, m, BM25Config.model_validate(m.bm25["config"]), plan_ranges(m, bounds), log=log)
    m.catalog = f"{CATALOGS_DIR}/{version:012d}-{uuid.uuid4().hex[:6]}.duckdb"
    counts = build_catalog(index_url, shard_paths(m.shards), shard_rows(m.shards), dead, out=m.catalog)
    c = dict(m.counts)
    for key in ("input_rows", "rejected", "duplicates"):
        c[key] = int(c.get(key, 0)) + int(ws.counts.get(key, 0))
    c.update(
        passages=first_new + n_new,
        tokens=int(c.get("tokens", 0)) + int(ws.counts["tokens"]),
        indexed_documents=counts["documents"],
        live_passages=counts["passages"],
        deleted_passages=int(len(dead)),
    )
    m.counts = c
    m.adds = m.adds + [
        {
            "id": aid,
            "corpus": corpus_url,
            "fingerprint": fingerprint,
            "version": version,
            "first_passage": first_new,
            "passages": n_new,
            "documents": int(ws.counts["indexed_documents"]),
            "updated": int(updated),
            "rejected": int(ws.counts.get("rejected", 0)),
            "rejects": f"{prefix}{ws.rejects}",
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    ]
    return m


# ---------------------------------------------------------------------------------------------
# ANN partitions take new passages


def target_passages(entry: dict[str, Any]) -> int:
    """The passages a partition of this build was planned to hold."""
    return int(entry.get("target_passages") or math.ceil(entry["passages"] / max(1, len(entry["partitions"]))) or 1)


def route(sizes: Sequence[int], target: int, n_new: int) -> tuple[int, list[int]]:
    """The routing rule (module docstring): how many of ``n_new`` appended passages the last
    partition (of ``sizes``) takes, and the sizes of the partitions opened for the rest."""
    take = min(n_new, max(0, int(GROWTH_CAP * target) - int(sizes[-1]))) if sizes else 0
    rest = n_new - take
    opened = [target] * (rest // target) + ([rest % target] if rest % target else [])
    if len(opened) > 1 and opened[-1] < target // 2:  # no sliver: the last two share
        opened[-2] += opened.pop()
    return take, opened


def extend_partition(
    index_url: str, kind: str, entry: dict[str, Any], rel_dir: str, shards: list[dict], slices: list[dict], codecs_entry: dict, threads: int
) -> dict[str, Any]:
    """A Ray task body: partition ``entry`` with the passages of ``slices`` appended (they
    follow its range; ``shards``: the manifest's entries of their shards), its ANN index
    loaded and given their vectors (no retraining), written to ``rel_dir`` with its id maps;
    the new manifest entry."""
    t0 = time.perf_counter()
    set_build_threads(threads)
    entries = [ShardEntry(**s) for s in shards]
    require_intact(index_url, [f for e in entries for f in (ExpectedFile(e.path, "shard", e.bytes, e.sha256), codes_file(e))])
    old = read_partition_passages(index_url, entry)
    new = read_passages(index_url, entries, [ShardSlice(**s) for s in slices], kind, load_codecs(index_url, codecs_entry))
    ann = local_copy(index_url, entry, INDEX_SUBDIR, load_index, False)
    fill(ann, new.vectors)
    both = PassageVectors(old["doc_id"].to_pylist() + new.doc_ids, np.concatenate([old["passage_idx"].to_numpy(), new.passage_idx]), new.vectors)
    out = write_partition(index_url, rel_dir, int(entry["first_passage"]), both, ann)
    out["build_seconds"] = round(time.perf_counter() - t0, 2)
    return out


def extend_ann(
    index_url: str, m: Manifest, kind: str, entry: dict[str, Any], first_new: int, n_new: int, codecs: Any, log: Callable[[str], None]
) -> dict[str, Any]:
    """``kind``'s ANN entry with the passages [first_new, first_new + n_new) routed into it
    (``route``): the last partition rewritten into a new directory, new partitions built."""
    if n_new == 0:
        return entry
    parts = list(entry["partitions"])
    target = target_passages(entry)
    take, opened = route([p["passages"] for p in parts], target, n_new)
    init_ray()
    # the partitions rewritten or opened: in the driver when small (``small_build_threads``)
    here = small_build_threads(n_new + (int(parts[-1]["passages"]) if take else 0), m.config)
    threads = here or 1
    tag = uuid.uuid4().hex[:8]
    calls: list[tuple[Callable[..., dict[str, Any]], tuple]] = []
    if take:
        last = parts[-1]
        slices = partition_slices(m, first_new, take)
        shards = [shard_lookup(m.shards, sl.path).model_dump() for sl in slices]
        rel = f"{entry['path']}/part-{len(parts) - 1:05d}-{tag}"
        calls.append((extend_partition, (index_url, kind, last, rel, shards, [asdict(sl) for sl in slices], m.codecs, threads)))
    start = first_new + take
    for i, size in enumerate(opened):
        number = len(parts) + i
        plan = PartitionPlan(number, start, size, partition_slices(m, start, size))
        shards = [shard_lookup(m.shards, sl.path).model_dump() for sl in plan.slices]
        rel = f"{entry['path']}/part-{number:05d}-{tag}"
        params = entry["config"]["params"] if entry.get("config") else {}
        calls.append((build_partition, (index_url, kind, asdict(plan), rel, entry["backend"], params, threads, shards, m.codecs)))
        start += size
    results = run_calls(calls, bool(here), {"num_cpus": task_cpus(1.0), "max_retries": 3})
    if take:
        parts[-1] = results.pop(0)
    parts += results
    log(f"{kind}: {take} passages joined partition {len(entry['partitions']) - 1}" + (f", {len(opened)} partition(s) opened" if opened else ""))
    return {
        **entry,
        "partitions": parts,
        "passages": sum(p["passages"] for p in parts),
        "vectors": sum(p["vectors"] for p in parts),
        "shards": m.shards_digest(),
        "target_passages": target,
        "trained_passages": int(entry.get("trained_passages", entry["passages"])),
        "churn_passages": int(entry.get("churn_passages", 0)) + n_new,
        "laid_out_passages": int(entry.get("laid_out_passages", entry["passages"])),
    }


# ---------------------------------------------------------------------------------------------
# mvr delete


def delete_documents(index_url: str, doc_ids: Optional[Sequence[str]] = None, where: Optional[str] = None, log: Callable[[str], None] = print) -> UpdateResult:
    """``mvr delete``: tombstone every passage of the documents ``doc_ids`` (and, with
    ``where``, of the documents a filter expression selects, ``docs/filters.md``), as one new
    version. Ids the index does not hold are reported, not an error."""
    t0 = time.time()
    if doc_ids is None and where is None:
        raise ValueError("say which documents to delete: --ids FILE or --where EXPR")
    wanted = list(dict.fromkeys(doc_ids or []))
    stats: dict[str, Any] = {}

    def change(m: Manifest) -> Manifest:
        catalog = Catalog(index_url, m.catalog)
        try:
            ids = list(wanted)
            if where is not None:
                ids += [d for d in _where_doc_ids(catalog, where) if d not in set(ids)]
            present = catalog.doc_ids_present(ids)
            passages = catalog.passages_of(present)
        finally:
            catalog.close()
        stats.update(asked=len(ids), deleted=len(present), missing=len(ids) - len(present), passages=len(passages))
        if not len(passages):
            raise NothingToDelete()
        dead = np.union1d(read_tombstones(index_url, m.tombstones), passages)
        m.tombstones = write_tombstones(index_url, dead)
        m.catalog = f"{CATALOGS_DIR}/{m.version + 1:012d}-{uuid.uuid4().hex[:6]}.duckdb"
        counts = build_catalog(index_url, shard_paths(m.shards), shard_rows(m.shards), dead, out=m.catalog)
        m.counts = {**m.counts, "indexed_documents": counts["documents"], "live_passages": counts["passages"], "deleted_passages": int(len(dead))}
        return m

    try:
        m = commit_update(index_url, change, "delete", lambda m: f"deleted {stats['deleted']} documents ({stats['passages']} passages)", log=log)
    except NothingToDelete:
        m = load_manifest(index_url)
        summary = f"none of the {stats['asked']} documents is in the index (version {m.version}); nothing was committed"
        log(summary)
        return UpdateResult(m, summary, time.time() - t0, True)
    collect(index_url)
    summary = f"deleted {stats['deleted']} documents ({stats['passages']} passages)" + (
        f"; {stats['missing']} ids not in the index" if stats["missing"] else ""
    )
    log(f"committed version {m.version}: {summary}")
    return UpdateResult(m, summary, time.time() - t0)


class NothingToDelete(RuntimeError):
    """No passage of the documents asked for is live."""


def _where_doc_ids(catalog: Catalog, where: str) -> list[str]:
    """The documents a filter expression selects (``operators/retrieval/filters.py``)."""
    select = getattr(catalog, "filter_doc_ids", None)
    if select is None:
        raise ValueError("this mvr has no metadata filters yet: delete by --ids")
    return list(select(where))


def read_ids_file(path: str) -> list[str]:
    """Document ids to delete: one a line (blank lines skipped), or a JSON list."""
    text = fs.read_bytes(path).decode("utf-8")
    stripped = text.strip()
    if stripped.startswith("["):
        ids = json.loads(stripped)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{path}: a JSON ids file must be a list of strings")
        return ids
    return [line.strip() for line in text.splitlines() if line.strip()]
