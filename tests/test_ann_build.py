"""``build_ann`` is idempotent: rerunning (or resubmitting) it with the same backend, partition
count and parameters over the same shards keeps the current build; ``force`` rebuilds."""

from __future__ import annotations

import shutil

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
