"""Indexing refuses what it cannot do with a clear error, before starting any work."""

import pytest

from jobs import index_corpus as index_job
from pipeline.config import IndexConfig
from pipeline.indexing import index_corpus
from storage.corpus import CorpusError


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
