"""``mvr build-ann``: partitioned ANN indexes from an index's shards, one Ray task a partition
and vector kind (a small index's are built one after another in the driver process instead:
``ray_runtime.small_build_threads``), then BM25 partitions lined up with every ANN build of the index
(``pipeline/indexing/bm25_build.py``: P = the lcm of the builds' partition counts; skipped when
the current BM25 build already is; ``bm25: null`` in the config skips them). The driver only plans (which shard rows go to
which partition); each task reads its own rows, trains and fills its index, and writes it
with its passages' id maps through storage/ (the vectors stay in the shards: one copy). The manifest is committed once every task has finished, so a failed or
killed build leaves the previous ANN entries in force; its directories are removed later."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict
from typing import Any, Callable, Optional, Sequence

import numpy as np
import ray

from mvr.operators.ann.base import ADD_BATCH, AnnIndex, set_build_threads
from mvr.operators.ann.factory import load_index, make_index
from mvr.operators.retrieval.stored_vectors import StoredVectors
from mvr.pipeline.config import AnnBuildConfig, BM25BuildConfig
from mvr.pipeline.indexing.bm25_build import build_bm25, is_current, partitions_for
from mvr.pipeline.ray_runtime import init_ray, run_calls, small_build_threads
from mvr.pipeline.results import AnnBuildResult
from mvr.storage.codec_file import load_codecs
from mvr.storage.integrity import ExpectedFile, require_intact
from mvr.storage.manifest import Manifest, ShardEntry, commit_update, load_manifest, shard_lookup
from mvr.storage.partitions import INDEX_SUBDIR, PartitionPlan, ShardSlice, build_dir, local_copy, plan_partitions, read_passages, write_partition
from mvr.storage.retention import collect
from mvr.storage.verify import codes_file


def build_partition(
    index_url: str,
    kind: str,
    plan: dict,
    rel_dir: str,
    backend: str,
    params: dict[str, Any],
    threads: int,
    shards: list[dict],
    codecs: dict,
    template: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """Build one partition (a Ray task body; plain function). ``plan`` is a PartitionPlan as a
    dict; ``shards`` the manifest's entries of the shards it reads (``ShardEntry`` as dicts):
    a corrupted or truncated one fails the build (``IntegrityError``, not retried) before
    anything is built from it; ``codecs`` the manifest's codecs entry. The index is trained
    and filled with the decoded vectors, a block at a time; with ``template`` (another built
    partition's manifest entry) its trained index is reused, emptied, instead (no training:
    ``mvr compact`` when the data has not drifted). Returns the partition's manifest entry
    plus ``build_seconds``, ``trained`` (whether it was trained here) and ``build_device``
    ("cuda" when FAISS trained and filled it on a GPU, else "cpu")."""
    t0 = time.perf_counter()
    entries = [ShardEntry(**s) for s in shards]
    require_intact(index_url, [f for e in entries for f in (ExpectedFile(e.path, "shard", e.bytes, e.sha256), codes_file(e))])
    set_build_threads(threads)
    p = PartitionPlan(plan["number"], plan["first_passage"], plan["passages"], [ShardSlice(**s) for s in plan["slices"]])
    passages = read_passages(index_url, entries, p.slices, kind, load_codecs(index_url, codecs))
    v = passages.vectors  # row order = ANN ids
    reused = local_copy(index_url, template, INDEX_SUBDIR, load_index, False).emptied() if template is not None else None
    index = reused
    if index is None:
        index = make_index(backend, v.dim, v.n_vectors, **params)
        if not index.use_codec(v.codec):  # codec-ivf's cells are the codec's centroids: nothing to train
            sample_size = index.params.get("training_sample_size", v.n_vectors)
            rng = np.random.default_rng(index.params.get("seed", 0))
            sample_rows = np.sort(rng.choice(v.n_vectors, min(sample_size, v.n_vectors), replace=False))
            index.train(v.decode(sample_rows))
    fill(index, v)
    entry = write_partition(index_url, rel_dir, p.first_passage, passages, index)
    entry["build_seconds"] = round(time.perf_counter() - t0, 2)
    entry["trained"] = reused is None
    entry["build_device"] = index.build_device
    return entry


def fill(index: AnnIndex, vectors: StoredVectors) -> None:
    """Append every vector of ``vectors`` to ``index``, a block of ``ADD_BATCH`` at a time,
    and finish it: their codes when the index takes its cells from their codec (codec-ivf:
    nothing decoded), else the decoded vectors."""
    if index.takes_codes or index.use_codec(vectors.codec):
        for codes in vectors.code_blocks(ADD_BATCH):
            index.add_codes(codes)
    else:
        for block in vectors.vector_blocks(ADD_BATCH):
            index.add(block)
    index.finalize()


def is_up_to_date(manifest: Manifest, kind: str, config: AnnBuildConfig) -> bool:
    """The current build of ``kind`` has ``config``'s backend, partition count and parameters,
    over the manifest's shards (resources and threads do not change what is built)."""
    entry = manifest.ann.get(kind)
    return (
        entry is not None
        and entry.get("backend") == config.backend
        and len(entry.get("partitions", [])) == config.partitions
        and entry.get("config", {}).get("params") == config.model_dump(mode="json")["params"]
        and entry.get("shards") == manifest.shards_digest()
    )


def build_ann(index_url: str, config: AnnBuildConfig, log: Callable[[str], None] = print, force: bool = False) -> AnnBuildResult:
    """Build ``config.partitions`` partitions for every kind in ``config.vectors`` and record
    them in the manifest (``ann[kind]``), replacing earlier builds of those kinds. A kind whose
    current build is up to date (``is_up_to_date``) is kept unless ``force``: rerunning or
    resubmitting the job builds nothing twice."""
    t0 = time.perf_counter()
    manifest = load_manifest(index_url)
    kinds = [k for k in config.vectors if force or not is_up_to_date(manifest, k, config)]
    kept = [k for k in config.vectors if k not in kinds]
    if kept:
        log(f"kept the current {config.backend} P={config.partitions} build of {', '.join(kept)}: same parameters over the same shards (--force rebuilds)")
    built = _build_kinds(index_url, manifest, config, kinds, log) if kinds else {}
    manifest = load_manifest(index_url)
    bm25_partitions = partitions_for(manifest)
    if config.bm25 is not None and not is_current(manifest, bm25_partitions, config.bm25):  # the sparse side, lined up
        manifest = build_bm25(index_url, BM25BuildConfig(partitions=bm25_partitions, bm25=config.bm25), log)
    return AnnBuildResult(manifest, built, time.perf_counter() - t0)


def _build_kinds(index_url: str, manifest: Manifest, config: AnnBuildConfig, kinds: Sequence[str], log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Build and commit the partitions of ``kinds``; their new manifest entries."""
    plans = plan_partitions(manifest, config.partitions)
    init_ray()
    tasks = [(kind, p) for kind in sorted(kinds, key=lambda k: k != "tokens") for p in plans]
    gpus = 1 if config.backend == "faiss-ivfpq" and ray.cluster_resources().get("GPU", 0) >= 1 else 0
    build_id = f"{config.backend}-p{config.partitions}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    log(
        f"building {len(tasks)} partition indexes ({config.backend}, {config.partitions} partition(s) × {', '.join(kinds)}){'; a GPU each (FAISS trains and adds on it)' if gpus else ''}"
    )
    here = small_build_threads(int(manifest.counts.get("passages", 0)), manifest.config)  # 0 on a GPU cluster
    if here:
        log(f"a small index ({manifest.counts.get('passages', 0)} passages): built in this process, no Ray worker")
    cpus, threads = _task_resources(config, len(tasks)) if not here else (0.0, here)
    calls = []
    for kind, p in tasks:  # token partitions first: the largest builds
        rel = f"{build_dir(kind, build_id)}/part-{p.number:05d}"
        shards = [shard_lookup(manifest.shards, sl.path).model_dump() for sl in p.slices]
        calls.append((build_partition, (index_url, kind, asdict(p), rel, config.backend, config.params, threads, shards, manifest.codecs)))
    # raises when a task failed after its retries
    results = run_calls(calls, bool(here), {"num_cpus": cpus, "num_gpus": gpus, "max_retries": 3}, "build-ann")
    entries: dict[str, list[Any]] = {kind: [None] * len(plans) for kind in kinds}  # a partition's entry (a dict)
    for (kind, p), entry in zip(tasks, results):
        entries[kind][p.number] = entry
    built = {
        kind: {
            "backend": config.backend,
            "build": build_id,
            "path": build_dir(kind, build_id),
            "partitions": entries[kind],
            "passages": sum(e["passages"] for e in entries[kind]),
            "vectors": sum(e["vectors"] for e in entries[kind]),
            "target_passages": max(e["passages"] for e in entries[kind]),
            "trained_passages": sum(e["passages"] for e in entries[kind]),
            "churn_passages": 0,
            "laid_out_passages": sum(e["passages"] for e in entries[kind]),
            "config": config.model_dump(mode="json"),
            "gpus_per_task": gpus,  # the GPUs each build task reserved (each partition's build_device: where it ran)
            "shards": manifest.shards_digest(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        for kind in kinds
    }
    commit_update(index_url, lambda m: _with_builds(m, built), "build-ann", lambda m: f"{config.backend} P={config.partitions} {', '.join(kinds)}", log=log)
    collect(index_url)
    return built


def _with_builds(m: Manifest, built: dict[str, dict[str, Any]]) -> Manifest:
    """``m`` (the latest version) with the new builds, which must be over its shards: refused
    when an add or compaction committed other passages while they were built."""
    for kind, entry in built.items():
        if entry["shards"] != m.shards_digest():
            raise ValueError(
                f"the index's passages changed while the {kind} partitions were built (version {m.version} was committed meanwhile); "
                "nothing was committed: run mvr build-ann again"
            )
        m.ann[kind] = entry
    return m


def _task_resources(config: AnnBuildConfig, n_tasks: int) -> tuple[float, int]:
    """(CPUs a task reserves, threads it runs): a node's CPUs shared by the tasks that can run
    at once (at least 1 a task), and as many threads as CPUs reserved. Measured on 2 cores
    (test_search_ann.py builds): giving the token partitions the whole node instead made P = 4
    builds 14-18% slower, and threads beyond the reservation (FAISS's OpenMP threads spin) made
    a FAISS build 1.8x slower."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = int(max((n["Resources"].get("CPU", 1) for n in nodes), default=1))
    free = int(ray.available_resources().get("CPU", node_cpus))  # a service on the same cluster holds some
    node_cpus = max(1, min(node_cpus, free))
    cpus = config.cpus_per_task or float(max(1, node_cpus // max(1, min(n_tasks, node_cpus))))
    return cpus, max(1, int(config.threads_per_task or cpus))
