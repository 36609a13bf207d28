"""``mvr compact INDEX``: a new version without dead rows, with partitions split evenly again.

1. Every shard holding a deleted passage is rewritten without it under
   ``compacted/{tag}/`` (one Ray task a shard; shards without deletions are kept as they
   are; a shard whose passages are all deleted is dropped). The tombstones start empty.
2. Passages are renumbered (the shard list changed), so every vector kind's ANN partitions
   are rebuilt over P = ceil(live passages / target) even ranges (``target``: the passages a
   partition was planned to hold at its build), one Ray task a partition.
   **Drift rule**: the coarse quantizer / tree is retrained when the churn since the kind's
   last training — passages added plus passages deleted, over the passages it was trained
   on — exceeds ``RETRAIN_CHURN`` (25 %), or when the backend cannot reuse a trained index
   (ScaNN); otherwise each new partition reuses the trained quantizer and codebooks of an
   old partition (FAISS: cloned and emptied), which skips training. benchmarks/updates.py
   measures both.
3. BM25 partitions are rebuilt over the same ranges (statistics without the deleted rows),
   and the catalog of the version is written.

Readers of the old version keep their files until retention removes them
(``storage/retention.py``)."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import asdict
from typing import Any, Callable

import numpy as np

from mvr.pipeline.config import AnnBuildConfig, BM25Config
from mvr.pipeline.indexing.ann_build import _task_resources, build_partition
from mvr.pipeline.indexing.bm25_build import build_bm25_entry
from mvr.pipeline.indexing.updates import CATALOGS_DIR, target_passages
from mvr.pipeline.ray_runtime import init_ray, run_calls, small_build_threads, task_cpus
from mvr.pipeline.results import UpdateResult
from mvr.storage.catalog import build_catalog
from mvr.storage.manifest import Manifest, ShardEntry, ShardList, commit_update, shard_lookup, shard_paths, shard_rows
from mvr.storage.partitions import build_dir, plan_partitions
from mvr.storage.retention import collect
from mvr.storage.shards import rewrite_shard
from mvr.storage.tombstones import read_tombstones

COMPACTED_DIR = "compacted"
RETRAIN_CHURN = 0.25


def compact(index_url: str, log: Callable[[str], None] = print, retrain: bool | None = None) -> UpdateResult:
    """``mvr compact`` (module docstring). ``retrain``: force (True) or forbid (False) the
    retraining the drift rule would decide."""
    t0 = time.time()
    report: dict[str, Any] = {}

    def change(m: Manifest) -> Manifest:
        dead = read_tombstones(index_url, m.tombstones)
        grown = any(int(e["passages"]) != int(e.get("laid_out_passages", e["passages"])) for e in m.ann.values())
        if not len(dead) and not grown:
            raise NothingToCompact()
        tag = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        m.shards = _rewrite_shards(index_url, m, dead, f"{COMPACTED_DIR}/{tag}", log)
        report.update(dead=int(len(dead)), shards=len(m.shards))
        total = int(shard_rows(m.shards).sum())
        m.tombstones = {}
        for kind, entry in list(m.ann.items()):
            m.ann[kind], report[kind] = _rebuild_kind(index_url, m, kind, entry, len(dead), tag, retrain, log)
        if m.bm25:
            bounds = sorted({total} | {int(p["first_passage"]) for e in m.ann.values() for p in e["partitions"]} | {0})
            from mvr.storage.partitions import plan_ranges

            m.bm25 = build_bm25_entry(index_url, m, BM25Config.model_validate(m.bm25["config"]), plan_ranges(m, bounds) if total else [], log=log)
        m.catalog = f"{CATALOGS_DIR}/{m.version + 1:012d}-{uuid.uuid4().hex[:6]}.duckdb"
        counts = build_catalog(index_url, shard_paths(m.shards), shard_rows(m.shards), None, out=m.catalog)
        m.counts = {
            **m.counts,
            "passages": total,
            "tokens": counts["tokens"],
            "indexed_documents": counts["documents"],
            "live_passages": total,
            "deleted_passages": 0,
        }
        return m

    try:
        m = commit_update(index_url, change, "compact", lambda m: f"{report.get('dead', 0)} dead passages removed", log=log)
    except NothingToCompact:
        from mvr.storage.manifest import load_manifest

        m = load_manifest(index_url)
        log(f"{index_url} (version {m.version}) has nothing to compact")
        return UpdateResult(m, "nothing to compact", time.time() - t0, True)
    collect(index_url)
    kinds = ", ".join(
        f"{k}: {'retrained' if r['retrained'] else 'quantizer reused'} (churn {r['churn']:.0%}), P={r['partitions']}"
        for k, r in report.items()
        if isinstance(r, dict)
    )
    summary = f"removed {report['dead']} deleted passages; {len(m.shards)} shards" + (f"; {kinds}" if kinds else "")
    log(f"committed version {m.version}: {summary}")
    return UpdateResult(m, summary, time.time() - t0)


class NothingToCompact(RuntimeError):
    """No deleted passage, and no passage added to a partition since it was laid out."""


def _rewrite_shards(index_url: str, m: Manifest, dead: np.ndarray, rel_dir: str, log: Callable[[str], None]) -> ShardList:
    """The shard list with every shard holding a dead passage rewritten without it (Ray tasks,
    or in the driver for a small index: ``small_build_threads``)."""
    rows = shard_rows(m.shards)
    starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    first_dead = np.searchsorted(dead, starts[:-1], side="left")
    last_dead = np.searchsorted(dead, starts[1:], side="left")
    touched = np.flatnonzero(last_dead > first_dead)
    entries: list = list(m.shards) if not len(touched) else [None] * len(m.shards)
    if len(touched):
        init_ray()
        here = bool(small_build_threads(int(rows.sum()), m.config))  # a small index's in the driver
        calls = []
        for i in touched:
            keep = np.setdiff1d(np.arange(rows[i], dtype=np.int64), dead[first_dead[i] : last_dead[i]] - starts[i], assume_unique=True)
            shard = m.shards[int(i)]
            calls.append((rewrite_shard, (index_url, shard.model_dump(), keep, f"{rel_dir}/{_unique_dir(shard.path)}")))
        untouched = np.setdiff1d(np.arange(len(rows)), touched)
        for i in untouched:
            entries[int(i)] = m.shards[int(i)]
        for n, new in zip(touched, run_calls(calls, here, {"num_cpus": task_cpus(1.0), "max_retries": 3})):
            entries[int(n)] = ShardEntry(**new) if new is not None else None
        log(f"rewrote {len(touched)} of {len(rows)} shards without {len(dead)} deleted passages")
    return ShardList.from_entries([e for e in entries if e is not None])


def _unique_dir(path: str) -> str:
    """A directory name for a shard's rewrite (shards of different adds share base names)."""
    return path.rsplit("/", 1)[0].replace("/", "_")


def _rebuild_kind(
    index_url: str, m: Manifest, kind: str, entry: dict[str, Any], dead: int, tag: str, retrain: bool | None, log: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kind``'s partitions rebuilt over even ranges of the compacted shards, retrained or not
    by the drift rule; (the new entry, a report)."""
    target = target_passages(entry)
    trained_on = int(entry.get("trained_passages", entry["passages"]))
    changed = int(entry.get("churn_passages", 0)) + dead
    churn = changed / max(1, trained_on)
    do_retrain = retrain if retrain is not None else churn > RETRAIN_CHURN
    total = int(shard_rows(m.shards).sum())
    parts = max(1, math.ceil(total / max(1, target)))
    config = AnnBuildConfig.model_validate({**entry.get("config", {}), "partitions": parts, "vectors": [kind], "bm25": None})
    plans = plan_partitions(m, parts)
    init_ray()
    here = small_build_threads(total, m.config)  # a small index's in the driver
    cpus, threads = _task_resources(config, len(plans)) if not here else (0.0, here)
    build_id = f"{entry['backend']}-p{parts}-{tag}"
    old = entry["partitions"]
    calls = []
    for p in plans:
        shards = [shard_lookup(m.shards, sl.path).model_dump() for sl in p.slices]
        template = None if do_retrain else old[min(p.number, len(old) - 1)]
        rel = f"{build_dir(kind, build_id)}/part-{p.number:05d}"
        calls.append((build_partition, (index_url, kind, asdict(p), rel, entry["backend"], config.params, threads, shards, m.codecs, template)))
    results = run_calls(calls, bool(here), {"num_cpus": cpus, "max_retries": 3})
    retrained = any(r.get("trained") for r in results)
    log(f"{kind}: {parts} partition(s), churn {churn:.1%} since training: {'retrained' if retrained else 'trained quantizers reused'}")
    new = {
        **entry,
        "build": build_id,
        "path": build_dir(kind, build_id),
        "partitions": results,
        "passages": sum(r["passages"] for r in results),
        "vectors": sum(r["vectors"] for r in results),
        "shards": m.shards_digest(),
        "target_passages": target,
        "trained_passages": total if retrained else trained_on,
        "churn_passages": 0 if retrained else changed,
        "laid_out_passages": total,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    new["config"] = {**entry.get("config", {}), "partitions": parts}
    return new, {"retrained": retrained, "churn": churn, "partitions": parts}
