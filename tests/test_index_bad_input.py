"""A messy corpus: malformed lines, empty texts, duplicate ids, invalid UTF-8 and a
20,000-word document. Nothing crashes, every row is indexed or rejected with a reason."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from helpers import read_jsonl
from jobs import stats as stats_job
from operators.checkpoint import load_tokenizer
from pipeline.config import IndexConfig
from pipeline.indexing import IndexExistsError, index_corpus
from storage.catalog import Catalog
from storage.manifest import load_manifest

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def messy(tmp_path_factory, datasets):
    real = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    good = real[:30]
    words: list[str] = []
    for d in real[30:]:
        words.extend(d["text"].split())
        if len(words) >= 20_000:
            break
    long_doc = {"_id": "long-1", "title": "Many passages", "text": " ".join(words[:20_000])}
    lines = [json.dumps(d).encode() for d in good[:10]]
    lines += [
        b'{"_id": "broken", "text": "unterminated',  # malformed JSON
        json.dumps({"_id": "empty", "text": "  "}).encode(),  # empty text
        json.dumps({"_id": "no-text", "title": "t"}).encode(),  # missing text
        json.dumps({"text": "no id here"}).encode(),  # missing id
        b"",  # blank line
        b'{"_id": "latin1", "text": "caf\xe9 au lait"}',  # invalid UTF-8
        json.dumps(long_doc).encode(),
    ]
    lines += [json.dumps(d).encode() for d in good[10:]]
    lines.append(json.dumps({"_id": good[3]["_id"], "text": "a later duplicate of an earlier id"}).encode())
    path = tmp_path_factory.mktemp("messy") / "corpus.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    index = str(tmp_path_factory.mktemp("idx") / "messy")
    # small blocks: the duplicate lies in another block than its first occurrence
    config = IndexConfig.from_yaml(None, **{"runtime.block_bytes": 4096})
    result = index_corpus(str(path), index, config)
    return {"corpus": str(path), "index": index, "config": config, "result": result, "long": long_doc, "good": good}


def test_counts_reconcile(messy):
    c = load_manifest(messy["index"]).counts
    assert c["input_rows"] == 38
    assert c["indexed_documents"] == 31 and c["rejected"] == 7
    assert c["indexed_documents"] + c["rejected"] == c["input_rows"]
    assert messy["result"].summary.startswith("indexed 31, rejected 7 (input rows 38)")


def test_rejects_carry_position_id_and_reason(messy):
    rejects = pq.read_table(f"{messy['index']}/rejects.parquet").to_pylist()
    by_line = {r["line"]: (r["doc_id"], r["reason"].split(":")[0]) for r in rejects}
    assert by_line == {
        11: (None, "malformed JSON"),
        12: ("empty", "empty text"),
        13: ("no-text", "missing text"),
        14: (None, "missing id"),
        15: (None, "empty line"),
        16: (None, "invalid UTF-8"),
        38: (messy["good"][3]["_id"], "duplicate id"),
    }
    cat = Catalog(messy["index"])
    try:
        assert dict(cat.rejects_by_reason())["duplicate id"] == 1
        first = cat.documents([messy["good"][3]["_id"]])[messy["good"][3]["_id"]]
        assert first["text"] == messy["good"][3]["text"]  # the first occurrence won
    finally:
        cat.close()


def test_long_document_is_split_into_passages(messy):
    cat = Catalog(messy["index"])
    try:
        rows = cat.con.execute(
            "SELECT passage_idx, n_tokens, char_start, char_end, text FROM passages WHERE doc_id = 'long-1' ORDER BY passage_idx"
        ).fetchall()
    finally:
        cat.close()
    tok = load_tokenizer("minilm")
    doc = "Many passages " + messy["long"]["text"]
    n_content = len(tok(doc, add_special_tokens=False)["input_ids"])
    expected = -(-(n_content - 254) // 192) + 1  # windows of 254 content tokens every 192
    assert len(rows) == expected > 20
    assert [r[0] for r in rows] == list(range(expected))
    assert all(r[1] == 256 for r in rows)
    assert rows[0][2] == 0 and rows[-1][3] == len(doc)
    assert all(r[4] == doc[r[2] : r[3]] for r in rows)


def test_rerun_is_a_no_op_and_other_corpus_is_refused(messy, tmp_path):
    again = index_corpus(messy["corpus"], messy["index"], messy["config"])
    assert again.up_to_date and again.manifest.version == 1
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"_id": "x", "text": "different corpus"}) + "\n")
    with pytest.raises(IndexExistsError, match="--overwrite"):
        index_corpus(str(other), messy["index"], messy["config"])


def test_stats_command_prints_rejects_by_reason(messy, capsys):
    assert stats_job.main([messy["index"]]) == 0
    out = capsys.readouterr().out
    assert "rejected: duplicate id" in out and "rejected: invalid UTF-8" in out
    assert "passages" in out


def test_limit_keeps_the_first_rows_in_input_order(messy, tmp_path):
    """--limit 12: the ten good rows, then a malformed and an empty-text row."""
    config = IndexConfig.from_yaml(None, **{"runtime.block_bytes": 4096, "limit": 12})
    result = index_corpus(messy["corpus"], str(tmp_path / "limited"), config)
    c = result.manifest.counts
    assert (c["input_rows"], c["indexed_documents"], c["rejected"]) == (12, 10, 2)
    reasons = sorted(r["reason"].split(":")[0] for r in pq.read_table(tmp_path / "limited" / "rejects.parquet").to_pylist())
    assert reasons == ["empty text", "malformed JSON"]
