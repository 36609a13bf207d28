"""``mvr build-bm25`` (and the BM25 half of ``mvr build-ann``): BM25 partitions over the same
passage ranges as the ANN partitions, two rounds of Ray tasks (a small index's run in the
driver process instead: ``ray_runtime.small_build_threads``). Round one: each task reads
its passages' text and counts its term statistics. The driver sums them into the
collection's statistics. Round two: each task builds its partition with the collection's
statistics (so the scores do not depend on P, ``operators/retrieval/bm25.py``) and writes it through
storage/. The manifest is committed once every task has finished."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import asdict
from typing import Any, Callable

import ray

from mvr.operators.retrieval.bm25 import Analyzer, BM25Partition, TermStats
from mvr.pipeline.config import BM25BuildConfig, BM25Config
from mvr.pipeline.ray_runtime import init_ray, run_calls, small_build_threads, task_cpus
from mvr.storage.bm25_partitions import build_dir, read_passage_texts, write_bm25_partition
from mvr.storage.integrity import ExpectedFile, require_intact
from mvr.storage.manifest import Manifest, commit_update, load_manifest
from mvr.storage.partitions import PartitionPlan, ShardSlice, plan_partitions
from mvr.storage.retention import collect
from mvr.storage.verify import shard_files


def _plan(plan: dict) -> PartitionPlan:
    return PartitionPlan(plan["number"], plan["first_passage"], plan["passages"], [ShardSlice(**s) for s in plan["slices"]])


def partition_stats(index_url: str, plan: dict, config: dict, shards: list[dict]) -> TermStats:
    """Round one (a Ray task body): the term statistics of one partition's passages, after
    checking its ``shards`` (``ExpectedFile`` dicts) against the manifest's sizes and sha256."""
    require_intact(index_url, [ExpectedFile(**f) for f in shards])
    cfg = BM25Config.model_validate(config)
    _, _, texts = read_passage_texts(index_url, _plan(plan).slices)
    return TermStats.of(Analyzer(cfg.stopwords, cfg.stemmer)(texts))


def build_partition(index_url: str, plan: dict, rel_dir: str, config: dict, stats: TermStats) -> dict[str, Any]:
    """Round two (a Ray task body): build and write one partition with the collection's
    ``stats``; its manifest entry plus ``build_seconds``."""
    t0 = time.perf_counter()
    cfg = BM25Config.model_validate(config)
    p = _plan(plan)
    doc_ids, pidx, texts = read_passage_texts(index_url, p.slices)
    part = BM25Partition.build(Analyzer(cfg.stopwords, cfg.stemmer)(texts), doc_ids, pidx, stats, **cfg.params())
    entry = write_bm25_partition(index_url, rel_dir, p.first_passage, part)
    entry["build_seconds"] = round(time.perf_counter() - t0, 2)
    return entry


def build_bm25_entry(
    index_url: str, manifest: Manifest, config: BM25Config, plans: list[PartitionPlan], cpus_per_task: float = 1.0, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Build BM25 partitions over ``plans``' passage ranges of ``manifest``'s shards (Ray
    tasks, two rounds) and return the manifest's ``bm25`` entry for them (not committed)."""
    plan_dicts = [asdict(p) for p in plans]
    init_ray()
    here = bool(small_build_threads(sum(p.passages for p in plans), manifest.config))
    options = {"num_cpus": task_cpus(cpus_per_task), "max_retries": 3}
    bm25 = config.model_dump(mode="json")
    build_id = f"p{len(plan_dicts)}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    log(
        f"building {len(plan_dicts)} BM25 partition(s) (stopwords={config.stopwords}, stemmer={config.stemmer}, {config.method})"
        + (" in this process" if here else "")
    )
    shards = [[asdict(f) for f in shard_files(manifest, [sl["path"] for sl in p["slices"]])] for p in plan_dicts]
    stats = sum(run_calls([(partition_stats, (index_url, p, bm25, s)) for p, s in zip(plan_dicts, shards)], here, options, "bm25 stats"), TermStats())
    shared = stats if here else ray.put(stats)  # one copy in the object store for every task
    entries = run_calls(
        [(build_partition, (index_url, p, f"{build_dir(build_id)}/part-{p['number']:05d}", bm25, shared)) for p in plan_dicts], here, options, "bm25 build"
    )
    return {
        "build": build_id,
        "path": build_dir(build_id),
        "partitions": entries,
        "passages": sum(e["passages"] for e in entries),
        "collection": {"passages": stats.n_docs, "terms": len(stats.df), "mean_length": round(stats.mean_length, 4)},
        "shards": manifest.shards_digest(),
        "config": bm25,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def build_bm25(index_url: str, config: BM25BuildConfig, log: Callable[[str], None] = print) -> Manifest:
    """Build ``config.partitions`` BM25 partitions and record them as the manifest's ``bm25``
    entry, replacing an earlier build. Returns the committed manifest."""
    manifest = load_manifest(index_url)
    entry = build_bm25_entry(index_url, manifest, config.bm25, plan_partitions(manifest, config.partitions), config.cpus_per_task, log)

    def change(m: Manifest) -> Manifest:
        if m.shards_digest() != entry["shards"]:
            raise ValueError(
                f"the index's passages changed while the BM25 partitions were built (version {m.version}); nothing was committed: run the build again"
            )
        m.bm25 = entry
        return m

    manifest = commit_update(index_url, change, "build-bm25", lambda m: f"P={len(entry['partitions'])}", log=log)
    collect(index_url)
    return manifest


def partitions_for(manifest: Manifest) -> int:
    """The BM25 partition count that lines up with every ANN build of the manifest: the least
    common multiple of their partition counts (range boundaries p·N // P are kept when P is
    multiplied), so any dense mode can be fused with BM25 partition by partition."""
    return math.lcm(*(len(e["partitions"]) for e in manifest.ann.values())) if manifest.ann else 1


def is_current(manifest: Manifest, partitions: int, config: BM25Config) -> bool:
    """True when the manifest's BM25 build has ``partitions`` partitions over the current
    shards with ``config``'s settings (nothing to rebuild)."""
    b = manifest.bm25
    return bool(b) and len(b["partitions"]) == partitions and b.get("shards") == manifest.shards_digest() and b["config"] == config.model_dump(mode="json")
