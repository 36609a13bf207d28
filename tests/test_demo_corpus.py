"""The offline demo corpus (stdlib docs): deterministic, well-formed, and on topic. No Ray."""

from __future__ import annotations

import json

from mvr.pipeline.studies.demo_corpus import MIN_CHARS, build_demo_corpus, clip
from mvr.storage.jsonl import encode_jsonl, write_jsonl


def test_deterministic_and_sorted() -> None:
    rows = build_demo_corpus()
    assert rows == build_demo_corpus()
    ids = [r["_id"] for r in rows]
    assert ids == sorted(ids)
    assert len(rows) == 600


def test_ids_unique_and_texts_nonempty() -> None:
    rows = build_demo_corpus(limit=10_000)
    ids = [r["_id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert all(set(r) == {"_id", "title", "text"} for r in rows)
    assert all(len(r["text"].strip()) >= MIN_CHARS and r["title"] for r in rows)
    assert len({r["text"] for r in rows}) == len(rows)


def test_contains_json_docs_and_topics() -> None:
    rows = {r["_id"]: r for r in build_demo_corpus()}
    assert rows["doc:json.loads"]["title"] == "json.loads"
    assert "JSON" in rows["doc:json.loads"]["text"]
    assert "topic:with" in rows
    modules = {i.split(":", 1)[1].split(".")[0] for i in rows if i.startswith("doc:")}
    assert {"json", "subprocess", "zipfile", "contextlib", "functools"} <= modules


def test_limit_is_a_prefix_of_the_ranking() -> None:
    small = build_demo_corpus(limit=150)
    assert len(small) == 150
    assert {r["_id"] for r in small} <= {r["_id"] for r in build_demo_corpus(limit=600)}


def test_clip_cuts_at_a_word_boundary() -> None:
    text = "word " * 100
    clipped = clip(text, 42)
    assert len(clipped) <= 42 and clipped.endswith("word")
    assert clip("short", 42) == "short"


def test_jsonl_roundtrip_and_unchanged_file_not_rewritten(tmp_path) -> None:
    rows = build_demo_corpus(limit=20)
    url = str(tmp_path / "corpus.jsonl")
    assert write_jsonl(url, rows) is True
    mtime = (tmp_path / "corpus.jsonl").stat().st_mtime_ns
    assert write_jsonl(url, rows) is False
    assert (tmp_path / "corpus.jsonl").stat().st_mtime_ns == mtime
    lines = (tmp_path / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == rows
    assert encode_jsonl(rows) == (tmp_path / "corpus.jsonl").read_bytes()
