"""``build_ann`` is idempotent: rerunning (or resubmitting) it with the same backend, partition
count and parameters over the same shards keeps the current build; ``force`` rebuilds."""

from __future__ import annotations

import shutil
import time

import pytest

from mvr.pipeline.config import AnnBuildConfig
from mvr.pipeline.indexing.ann_build import build_ann, is_up_to_date
from mvr.storage.manifest import load_manifest

pytestmark = pytest.mark.ray


def test_same_build_is_kept_other_settings_and_force_rebuild(msmarco_100, tmp_path):
    index = str(tmp_path / "copy")
    shutil.copytree(msmarco_100, index)
    before = load_manifest(index)
    same = AnnBuildConfig(backend="faiss-ivfpq", partitions=1, vectors=["pooled"], cpus_per_task=1)  # the fixture's build; resources do not count
    assert is_up_to_date(before, "pooled", same)
    logs: list[str] = []
    result = build_ann(index, same, log=logs.append)
    assert result.built == {} and load_manifest(index).version == before.version
    assert any("kept the current faiss-ivfpq P=1 build of pooled" in line for line in logs)

    for other in (same.model_copy(update={"partitions": 2}), same.model_copy(update={"params": {"nprobe": 2}})):
        assert not is_up_to_date(before, "pooled", other)
    forced = build_ann(index, same, log=lambda _: None, force=True)
    after = load_manifest(index)
    assert set(forced.built) == {"pooled"} and after.version == before.version + 1
    assert after.ann["pooled"]["build"] != before.ann["pooled"]["build"]
    assert after.ann["tokens"] == before.ann["tokens"]
    # a different set of shards (here: one shard's listed digest) makes every build stale
    shards = list(after.shards)
    shards[0] = shards[0].model_copy(update={"sha256": "0" * 64})
    after = after.model_copy(update={"shards": shards})
    assert not is_up_to_date(after, "pooled", same) and not is_up_to_date(after, "tokens", same)


def test_a_small_index_builds_in_the_driver_what_ray_tasks_build(msmarco_100, tmp_path, ray_address):
    """An index of at most its ``runtime.small_job_rows`` passages builds its ANN and BM25
    partitions in the driver process, one after another; the same index with
    ``small_job_rows`` 0 in Ray tasks, as a large one does. Both give the same bytes."""
    import ray
    from ray.util.state import list_tasks

    from mvr.pipeline.config import BM25Config
    from mvr.storage.manifest import commit_update

    def tasks() -> int:
        """Ray tasks of this process's job that built an ANN or BM25 partition."""
        names = ("build_partition", "partition_stats")
        found = list_tasks(ray_address, filters=[("job_id", "=", ray.get_runtime_context().get_job_id())], limit=10_000, raise_on_missing_output=False)
        return sum(t.func_or_class_name in names for t in found)

    config = AnnBuildConfig(backend="faiss-ivfpq", partitions=2, vectors=["pooled"], bm25=BM25Config())
    builds = {}
    before = tasks()
    for small_rows in (1000, 0):
        index = str(tmp_path / f"rows-{small_rows}")
        shutil.copytree(msmarco_100, index)
        assert load_manifest(index).counts["passages"] <= 1000
        runtime = {**load_manifest(index).config["runtime"], "small_job_rows": small_rows}
        commit_update(index, lambda m, runtime=runtime: m.model_copy(update={"config": {**m.config, "runtime": runtime}}), "set small_job_rows")
        logs: list[str] = []
        builds[small_rows] = build_ann(index, config, log=logs.append).manifest
        assert any("built in this process, no Ray worker" in line for line in logs) == bool(small_rows), logs
        assert any(line.startswith("building 2 BM25 partition(s)") and line.endswith("in this process") for line in logs) == bool(small_rows), logs
        if small_rows:
            assert tasks() == before
    # the task builds: 2 ANN partitions, then BM25's 2 statistics and 2 partition builds
    deadline = time.monotonic() + 60
    while tasks() < before + 6 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tasks() == before + 6
    driver, in_tasks = builds[1000], builds[0]
    for entry in ("ann", "bm25"):
        a = driver.ann["pooled"]["partitions"] if entry == "ann" else driver.bm25["partitions"]
        b = in_tasks.ann["pooled"]["partitions"] if entry == "ann" else in_tasks.bm25["partitions"]
        assert [{f: x["sha256"] for f, x in p["files"].items()} for p in a] == [{f: x["sha256"] for f, x in p["files"].items()} for p in b], entry
