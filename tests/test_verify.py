"""``mvr verify`` (storage/verify.py, jobs/verify.py) on a real index of msmarco-sample:
100 passages in 3 shards, FAISS partitions of the token and pooled vectors, BM25
(the ``msmarco_100`` fixture). Copies of it are
damaged (a flipped shard byte, a truncated shard, a deleted ANN file, a deleted BM25 file,
a grown ANN file) and each damage must be named."""

from __future__ import annotations

import os
import shutil

import pytest

from storage.manifest import load_manifest
from storage.verify import (
    IntegrityError,
    expected_files,
    require_intact,
    shard_files,
    verify_index,
)


@pytest.fixture
def index_copy(msmarco_100, tmp_path) -> str:
    dst = str(tmp_path / "copy")
    shutil.copytree(msmarco_100, dst)
    return dst


def test_intact_index_passes(msmarco_100, capsys):
    from jobs.verify import main

    m = load_manifest(msmarco_100)
    files = expected_files(m)
    groups = {f.group for f in files}
    assert len(m.shards) >= 3 and {"shard", "ann pooled part 0", "bm25 part 0", "rejects", "catalog"} <= groups
    report = verify_index(msmarco_100)
    assert report.ok and len(report.checks) == len(files)
    assert all(c.status == "ok" for c in report.checks)
    assert main([msmarco_100]) == 0
    assert f"all {len(files)} listed files match the manifest" in capsys.readouterr().out
    require_intact(msmarco_100, shard_files(m))  # no exception


def test_each_damaged_file_is_named(index_copy, capsys):
    from jobs.verify import main

    m = load_manifest(index_copy)
    corrupt, truncate = m.shards[0].path, m.shards[1].path
    ann_part = m.ann["pooled"]["partitions"][0]
    bm25_part = m.bm25["partitions"][0]
    ann_file = f"{ann_part['path']}/{next(n for n in ann_part['files'] if n.startswith('index/') and n != 'index/ann.json')}"
    bm25_file = f"{bm25_part['path']}/{next(n for n in bm25_part['files'] if n.startswith('index/'))}"
    grown = f"{ann_part['path']}/passages.parquet"

    p = os.path.join(index_copy, corrupt)
    with open(p, "r+b") as f:  # flip one byte, same size
        f.seek(os.path.getsize(p) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))
    p = os.path.join(index_copy, truncate)
    os.truncate(p, os.path.getsize(p) - 100)
    os.remove(os.path.join(index_copy, ann_file))
    os.remove(os.path.join(index_copy, bm25_file))
    with open(os.path.join(index_copy, grown), "ab") as f:
        f.write(b"x")

    report = verify_index(index_copy, workers=2)
    bad = {c.path: c.status for c in report.problems}
    assert bad == {corrupt: "corrupted", truncate: "truncated", ann_file: "missing", bm25_file: "missing", grown: "oversized"}
    assert not report.ok
    summary = {what: b for what, _, _, b in report.summary()}
    assert summary["shard"] == 2 and summary["ann pooled"] == 2 and summary["bm25"] == 1

    assert main([index_copy]) == 1
    out = capsys.readouterr().out
    for text in ("corrupted", "truncated", "missing", "oversized", os.path.basename(corrupt), os.path.basename(truncate), "5 of"):
        assert text in out

    # the guard a reading job calls: refuses naming the damaged shards, passes the others
    with pytest.raises(IntegrityError) as err:
        require_intact(index_copy, shard_files(m, [corrupt, truncate, m.shards[2].path]))
    assert corrupt in str(err.value) and truncate in str(err.value) and m.shards[2].path not in str(err.value)
    assert {c.path for c in err.value.problems} == {corrupt, truncate}
    require_intact(index_copy, shard_files(m, [m.shards[2].path]))
    with pytest.raises(ValueError, match="not shards"):
        shard_files(m, ["shards/nope.parquet"])


def test_missing_catalog_and_no_manifest(index_copy, tmp_path, capsys):
    from jobs.verify import main

    os.remove(os.path.join(index_copy, "catalog.duckdb"))
    report = verify_index(index_copy)
    assert [(c.path, c.status) for c in report.problems] == [("catalog.duckdb", "missing")]
    assert main([str(tmp_path / "nothing-here")]) == 2
    assert "no committed index" in capsys.readouterr().err


def test_ann_and_bm25_builds_refuse_a_corrupted_shard(index_copy):
    """The builds check the shards they read against the manifest first: a damaged shard fails
    the build with its name, and the manifest keeps its previous, intact entries."""
    from pipeline.ann_build import build_ann
    from pipeline.bm25_build import build_bm25
    from pipeline.config import AnnBuildConfig, BM25BuildConfig

    before = load_manifest(index_copy)
    bad = before.shards[1].path
    p = os.path.join(index_copy, bad)
    os.truncate(p, os.path.getsize(p) - 10)
    with pytest.raises(IntegrityError, match=os.path.basename(bad)):
        build_ann(index_copy, AnnBuildConfig(partitions=2, vectors=["pooled"]), log=lambda _: None)
    with pytest.raises(IntegrityError, match="truncated"):
        build_bm25(index_copy, BM25BuildConfig(partitions=2), log=lambda _: None)
    after = load_manifest(index_copy)
    assert after.version == before.version and after.ann == before.ann and after.bm25 == before.bm25
