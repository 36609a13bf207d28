"""Checks on an index's target directory (storage/index_dir.py), no Ray: the corpus and
the index must not overlap, INDEX must be a writable directory, and clearing an index
removes only what an index wrote."""

from __future__ import annotations

import os

import pytest

from mvr.storage import index_dir
from mvr.storage.index_dir import IndexTargetError, check_target, check_writable, clear, foreign_entries


def test_entry_names_match_the_modules_that_write_them():
    from mvr.storage.bm25_partitions import BM25_DIR
    from mvr.storage.catalog import CATALOG_FILE, REJECTS_FILE
    from mvr.storage.codec_file import CODECS_DIR
    from mvr.storage.manifest import MANIFEST_FILE
    from mvr.storage.partitions import ANN_DIR

    assert (index_dir.MANIFEST_FILE, index_dir.REJECTS_FILE, index_dir.CATALOG_FILE) == (MANIFEST_FILE, REJECTS_FILE, CATALOG_FILE)
    from mvr.storage.manifest import SHARD_LISTS_DIR

    assert index_dir.CODECS_DIR == CODECS_DIR and index_dir.SHARD_LISTS_DIR == SHARD_LISTS_DIR
    assert (index_dir.ANN_DIR, index_dir.BM25_DIR) == (ANN_DIR, BM25_DIR)


def test_corpus_and_index_must_not_overlap(tmp_path):
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "corpus.jsonl").write_text('{"_id": "1", "text": "x"}\n')
    with pytest.raises(IndexTargetError, match="lies inside the index directory"):
        check_target(str(idx / "corpus.jsonl"), str(idx))
    with pytest.raises(IndexTargetError, match="same path"):
        check_target(str(idx), str(idx) + "/")
    with pytest.raises(IndexTargetError, match="lies inside the corpus directory"):
        check_target(str(tmp_path), str(idx / "sub"))
    # through a symbolic link and a relative path too
    os.symlink(idx, tmp_path / "link")
    with pytest.raises(IndexTargetError, match="lies inside the index directory"):
        check_target(str(tmp_path / "link" / "corpus.jsonl"), os.path.relpath(idx))
    # siblings with a common prefix do not overlap
    check_target(str(tmp_path / "idx-corpus.jsonl"), str(idx))
    check_target(str(idx / "corpus.jsonl"), str(tmp_path / "idx2"))


def test_index_that_is_a_file_or_under_one_or_unwritable(tmp_path):
    corpus = str(tmp_path / "c.jsonl")
    f = tmp_path / "somefile"
    f.write_text("not a directory")
    with pytest.raises(IndexTargetError, match="is a file, not a directory"):
        check_target(corpus, str(f))
    with pytest.raises(IndexTargetError, match="somefile is a file"):
        check_target(corpus, str(f / "idx"))
    check_target(corpus, "/proc/mvr-index")  # /proc exists and is a directory: only writing tells
    with pytest.raises(IndexTargetError, match="cannot write to the index directory /proc/mvr-index"):
        check_writable("/proc/mvr-index")
    assert not os.path.exists("/proc/mvr-index")
    check_writable(str(tmp_path / "new" / "idx"))  # created, probe removed
    assert os.listdir(tmp_path / "new" / "idx") == []


def test_clear_removes_only_what_an_index_wrote(tmp_path):
    idx = tmp_path / "idx"
    for d in ("shards", "_staging/scan", "ann/tokens/b1", "bm25/b1"):
        (idx / d).mkdir(parents=True)
        (idx / d / "f.bin").write_bytes(b"x")
    for name in ("manifest.json", "rejects.parquet", "catalog.duckdb", "manifest.json.tmp-" + "0" * 32):
        (idx / name).write_bytes(b"x")
    (idx / "notes.txt").write_text("the user's")
    (idx / "mine").mkdir()
    (idx / "mine" / "data.jsonl").write_text("{}")
    assert foreign_entries(str(idx)) == ["mine", "notes.txt"]
    assert clear(str(idx), keep=("_staging",)) == sorted(
        ["ann", "bm25", "catalog.duckdb", "manifest.json", "manifest.json.tmp-" + "0" * 32, "rejects.parquet", "shards"]
    )
    assert sorted(os.listdir(idx)) == ["_staging", "mine", "notes.txt"]
    assert clear(str(idx)) == ["_staging"]
    assert sorted(os.listdir(idx)) == ["mine", "notes.txt"] and (idx / "notes.txt").read_text() == "the user's"
    assert (idx / "mine" / "data.jsonl").exists()
