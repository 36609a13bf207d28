"""Indexing refuses what it cannot do with a clear error, before starting any work."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mvr.jobs import index_corpus as index_job
from mvr.pipeline.config import IndexConfig
from mvr.pipeline.indexing.corpus_job import index_corpus
from mvr.storage.corpus import CorpusError


def test_memory_urls_are_refused_for_ray_jobs(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "1", "text": "x"}\n')
    with pytest.raises(ValueError, match="Ray workers cannot see it"):
        index_corpus(str(corpus), "memory://idx", IndexConfig())


def test_missing_corpus_exits_with_a_message(tmp_path, capsys):
    assert index_job.main([str(tmp_path / "nothing.jsonl"), str(tmp_path / "idx")]) == 2
    assert "corpus not found" in capsys.readouterr().err
    with pytest.raises(CorpusError):
        index_corpus(str(tmp_path / "nothing.jsonl"), str(tmp_path / "idx"), IndexConfig())


def _corpus(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "1", "text": "x"}\n')
    return corpus


def _refused(argv, capsys, *texts):
    assert index_job.main([str(a) for a in argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    for text in texts:
        assert text in err, (text, err)
    assert "Traceback" not in err


def test_parquet_with_wrong_columns_is_refused_on_the_driver(tmp_path, capsys):
    """The schema is checked while planning, before Ray starts: no task fails remotely."""
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"key": ["a"], "passage": ["x"]}), path)
    _refused(
        [path, tmp_path / "idx"],
        capsys,
        "c.parquet: a Parquet corpus needs an id column (one of _id, id, doc_id, docid) and a text column (one of text, contents, body)",
        "found columns: key, passage (no id and text column)",
    )
    assert not (tmp_path / "idx").exists()
    with pytest.raises(CorpusError, match="found columns: key, passage"):
        index_corpus(str(path), str(tmp_path / "idx"), IndexConfig())


def test_corpus_and_index_must_not_overlap(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    _refused([corpus, corpus], capsys, "the corpus and the index are the same path")
    _refused([tmp_path, tmp_path / "idx", "--overwrite"], capsys, "lies inside the corpus directory")
    index = tmp_path / "idx"
    index.mkdir()
    (index / "manifest.json").write_text("{}")  # whatever it holds, nothing is deleted
    inside = index / "corpus.jsonl"
    inside.write_text('{"_id": "1", "text": "x"}\n')
    _refused([inside, index, "--overwrite"], capsys, "lies inside the index directory")
    assert sorted(p.name for p in index.iterdir()) == ["corpus.jsonl", "manifest.json"]


def test_unusable_index_targets_are_refused_before_any_work(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    afile = tmp_path / "somefile"
    afile.write_text("x")
    _refused([corpus, afile], capsys, "somefile is a file, not a directory")
    _refused([corpus, afile / "idx"], capsys, "cannot create the index directory", "somefile is a file")
    _refused([corpus, "/proc/mvr-idx"], capsys, "cannot write to the index directory /proc/mvr-idx")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt"):
        (foreign / name).write_text(name)
    _refused([corpus, foreign], capsys, "exists and is not an mvr index (it holds a.txt, b.txt, c.txt, d.txt, e.txt and 1 more)", "--overwrite")
    assert sorted(p.name for p in foreign.iterdir()) == ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt"]
