"""``mvr verify`` (storage/verify.py, jobs/verify.py) on a real index of msmarco-sample:
100 passages in 3 shards, FAISS partitions of the token and pooled vectors, BM25
(the ``msmarco_100`` fixture). Copies of it are
damaged (a flipped shard byte, a truncated shard, a deleted ANN file, a deleted BM25 file,
a grown ANN file) and each damage must be named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mvr.storage.integrity import IntegrityError, require_intact
from mvr.storage.manifest import load_manifest
from mvr.storage.verify import expected_files, shard_files, verify_index

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def index_copy(msmarco_100, tmp_path) -> str:
    dst = str(tmp_path / "copy")
    shutil.copytree(msmarco_100, dst)
    return dst


def test_intact_index_passes(msmarco_100, capsys):
    from mvr.jobs.verify import main

    m = load_manifest(msmarco_100)
    files = expected_files(m)
    groups = {f.group for f in files}
    assert len(m.shards) >= 3 and {"shard", "shard codes", "codec", "ann pooled part 0", "bm25 part 0", "rejects", "catalog"} <= groups
    report = verify_index(msmarco_100)
    assert report.ok and len(report.checks) == len(files)
    assert all(c.status == "ok" for c in report.checks)
    assert main([msmarco_100]) == 0
    assert f"all {len(files)} listed files match the manifest" in capsys.readouterr().out
    require_intact(msmarco_100, shard_files(m))  # no exception


def test_each_damaged_file_is_named(index_copy, capsys):
    from mvr.jobs.verify import main

    m = load_manifest(index_copy)
    corrupt, truncate = m.shards[0].path, m.shards[1].path
    ann_part = m.ann["pooled"]["partitions"][0]
    bm25_part = m.bm25["partitions"][0]
    ann_file = f"{ann_part['path']}/{next(n for n in ann_part['files'] if n.startswith('index/') and n != 'index/ann.json')}"
    bm25_file = f"{bm25_part['path']}/{next(n for n in bm25_part['files'] if n.startswith('index/'))}"
    grown = f"{ann_part['path']}/passages.parquet"
    codes, codec = m.shards[2].codes, m.codecs["tokens"]["path"]

    _flip_byte(os.path.join(index_copy, codes))
    _flip_byte(os.path.join(index_copy, codec))
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
    assert bad == {
        corrupt: "corrupted",
        truncate: "truncated",
        ann_file: "missing",
        bm25_file: "missing",
        grown: "oversized",
        codes: "corrupted",
        codec: "corrupted",
    }
    assert not report.ok
    summary = {what: b for what, _, _, b in report.summary()}
    assert summary["shard"] == 2 and summary["shard codes"] == 1 and summary["codec"] == 1 and summary["ann pooled"] == 2 and summary["bm25"] == 1

    assert main([index_copy]) == 1
    out = capsys.readouterr().out
    for text in ("corrupted", "truncated", "missing", "oversized", os.path.basename(corrupt), os.path.basename(truncate), os.path.basename(codes), "7 of"):
        assert text in out

    # the guard a reading job calls: refuses naming the damaged shards, passes the others
    with pytest.raises(IntegrityError) as err:
        require_intact(index_copy, shard_files(m, [corrupt, truncate, m.shards[2].path], codes=False))
    assert corrupt in str(err.value) and truncate in str(err.value) and m.shards[2].path not in str(err.value)
    assert {c.path for c in err.value.problems} == {corrupt, truncate}
    require_intact(index_copy, shard_files(m, [m.shards[2].path], codes=False))
    with pytest.raises(IntegrityError, match=os.path.basename(codes)):
        require_intact(index_copy, shard_files(m, [m.shards[2].path]))
    with pytest.raises(ValueError, match="not shards"):
        shard_files(m, ["shards/nope.parquet"])


def test_missing_catalog_and_no_manifest(index_copy, tmp_path, capsys):
    from mvr.jobs.verify import main

    os.remove(os.path.join(index_copy, "catalog.duckdb"))
    report = verify_index(index_copy)
    assert [(c.path, c.status) for c in report.problems] == [("catalog.duckdb", "missing")]
    assert main([str(tmp_path / "nothing-here")]) == 2
    assert "no committed index" in capsys.readouterr().err


def test_ann_and_bm25_builds_refuse_a_corrupted_shard(index_copy):
    """The builds check the shards they read against the manifest first: a damaged shard fails
    the build with its name, and the manifest keeps its previous, intact entries."""
    from mvr.pipeline.config import AnnBuildConfig, BM25BuildConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.bm25_build import build_bm25

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


def _search(index: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "mvr.jobs.cli", "search", index, "what is a lobster roll", "-k", "3", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _flip_byte(path: str) -> None:
    with open(path, "r+b") as f:  # one byte changed, same size
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def test_search_refuses_damaged_shards_and_partition_files(index_copy):
    """Search checks what it opens against the manifest: a shard's size and sha256 on the exact
    path (it reads whole shards), an ANN or BM25 partition file's size; ``mvr search`` exits
    with an ``error:`` line naming the file and ``mvr verify``, no traceback."""
    from mvr.pipeline.config import SearchConfig
    from mvr.pipeline.retrieval.searcher import Searcher

    m = load_manifest(index_copy)
    flipped, truncated = m.shards[0].path, m.shards[2].path
    p = os.path.join(index_copy, truncated)
    os.truncate(p, os.path.getsize(p) - 50)
    with pytest.raises(IntegrityError, match=f"{truncated}: truncated"):
        Searcher(index_copy, modes=("pooled",), config=SearchConfig(exact=True))
    _flip_byte(os.path.join(index_copy, flipped))
    with pytest.raises(IntegrityError, match=f"{flipped}: corrupted .sha256") as err:
        Searcher(index_copy, modes=("maxsim",), config=SearchConfig(exact=True))  # the Parquet files (ids): read whole, hashed
    assert f"mvr verify {index_copy}" in str(err.value)

    done = _search(index_copy, "--exact")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    err_text = " ".join(done.stderr.split())
    assert "error:" in err_text and f"{flipped}: corrupted" in err_text and "mvr verify" in err_text

    # the ANN path reads the partitions, not the shards: it still answers
    ok = _search(index_copy, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["path"] == "ann"

    ann_part = m.ann["tokens"]["partitions"][0]
    passages = os.path.join(index_copy, ann_part["path"], "passages.parquet")
    os.truncate(passages, os.path.getsize(passages) - 1)
    done = _search(index_copy)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    err_text = " ".join(done.stderr.split())
    assert f"{ann_part['path']}/passages.parquet: truncated" in err_text and "mvr verify" in err_text

    bm25_part = m.bm25["partitions"][0]
    name = next(n for n in bm25_part["files"] if n.startswith("index/"))
    with open(os.path.join(index_copy, bm25_part["path"], name), "ab") as f:
        f.write(b"appended")
    with pytest.raises(IntegrityError, match=f"{bm25_part['path']}/{name}: oversized"):
        Searcher(index_copy, modes=("bm25",))


def test_search_refuses_a_damaged_codec_or_codes_file(index_copy):
    """The codec file is read whole and its sha256 compared by every job and replica that
    loads it; a codes file is memory-mapped, so its size is compared when it is opened (its
    sha256 is ``mvr verify``'s). Both refusals name the file; ``mvr search`` prints one
    ``error:`` line."""
    from mvr.pipeline.config import SearchConfig
    from mvr.pipeline.retrieval.searcher import Searcher

    m = load_manifest(index_copy)
    codes = os.path.join(index_copy, m.shards[1].codes)
    os.truncate(codes, os.path.getsize(codes) - 8)
    with pytest.raises(IntegrityError, match=f"{m.shards[1].codes}: truncated"):
        Searcher(index_copy, modes=("maxsim",))  # the ANN partition maps the same codes
    with pytest.raises(IntegrityError, match=f"{m.shards[1].codes}: truncated"):
        Searcher(index_copy, modes=("pooled",), config=SearchConfig(exact=True))
    codec = os.path.join(index_copy, m.codecs["tokens"]["path"])
    good = open(codec, "rb").read()
    _flip_byte(codec)
    done = _search(index_copy)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    err_text = " ".join(done.stderr.split())
    assert "error:" in err_text and "codecs/tokens.mvrc: corrupted" in err_text and "mvr verify" in err_text
    with open(codec, "wb") as f:
        f.write(good)
    os.remove(os.path.join(index_copy, m.codecs["pooled"]["path"]))
    with pytest.raises(IntegrityError, match="codecs/pooled.mvrc: missing"):
        Searcher(index_copy, modes=("pooled",))


def test_undecodable_shard_is_an_integrity_error(index_copy):
    """A shard whose bytes are not Parquet, read without a size or checksum (the ANN build's
    reader): an IntegrityError naming the file, not a pyarrow traceback."""
    from mvr.storage.shards import read_shard

    m = load_manifest(index_copy)
    p = os.path.join(index_copy, m.shards[0].path)
    with open(p, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\0" * 8)  # the footer's length and magic
    with pytest.raises(IntegrityError, match=f"{m.shards[0].path}: unreadable .cannot be read: ArrowInvalid"):
        read_shard(index_copy, m.shards[0].path, ["doc_id"])
