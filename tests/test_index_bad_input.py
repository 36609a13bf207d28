"""A messy corpus: malformed lines, empty texts, duplicate ids, invalid UTF-8 and a
5,000-word document (over 30 passages). Nothing crashes, every row is indexed or rejected with a reason.
A hostile one (lone surrogates, 100,000 nested brackets, byte order marks, a TSV header,
invalid UTF-8 in a Parquet string column): one bad row is one reject, never a failed job.
A corpus with no row to index is refused, nothing committed; ``--overwrite`` replaces only
what an index wrote, and only once the new corpus has a row to index."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import read_jsonl
from mvr.jobs import index_corpus as index_job
from mvr.jobs import stats as stats_job
from mvr.operators.encode.checkpoint import load_tokenizer
from mvr.pipeline.config import IndexConfig
from mvr.pipeline.indexing.corpus_job import IndexExistsError, index_corpus
from mvr.storage.catalog import Catalog
from mvr.storage.corpus import CorpusError
from mvr.storage.index_dir import IndexTargetError
from mvr.storage.manifest import load_manifest, read_manifest
from mvr.storage.verify import verify_index

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def messy(tmp_path_factory, datasets):
    real = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    good = real[:30]
    words: list[str] = []
    for d in real[30:]:
        words.extend(d["text"].split())
        if len(words) >= 5_000:
            break
    long_doc = {"_id": "long-1", "title": "Many passages", "text": " ".join(words[:5_000])}
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
        rows = cat.con.execute("SELECT passage_idx, n_tokens, char_start, char_end, text FROM passages WHERE doc_id = 'long-1' ORDER BY passage_idx").fetchall()
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


BOM = b"\xef\xbb\xbf"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, datasets):
    """A directory corpus: a.jsonl, b.tsv, c.parquet and a gzip-compressed d.jsonl.gz, each with
    good and hostile rows."""
    real = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:9]
    d = tmp_path_factory.mktemp("hostile")
    row = lambda doc: json.dumps({"_id": doc["_id"], "title": "", "text": doc["text"]}).encode()  # noqa: E731
    jsonl = [
        BOM + row(real[0]),  # 1: a BOM before the first row
        rb'{"_id": "sur-id-\ud800", "text": "a lone surrogate in the id"}',  # 2
        rb'{"_id": "sur-text", "text": "a lone \udc00 surrogate in the text"}',  # 3
        rb'{"_id": "sur-title", "title": "\ud83d", "text": "a lone surrogate in the title"}',  # 4
        b'{"_id": "deep", "text": "t", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # 5
        b"[" * 100_000,  # 6
        row(real[1]),  # 7
        rb'{"_id": "pair", "text": "a surrogate pair is fine: \ud83d\ude00"}',  # 8
    ]
    (d / "a.jsonl").write_bytes(b"\n".join(jsonl) + b"\n")
    tsv = [
        BOM + b"_id\ttext\ttitle",
        f"{real[2]['_id']}\t{real[2]['text']}\t".encode(),
        b"tsv-bad\tan encoded surrogate \xed\xa0\x80",
        f"{real[3]['_id']}\t{real[3]['text']}".encode(),
    ]
    (d / "b.tsv").write_bytes(b"\r\n".join(tsv) + b"\r\n")
    raw = pa.array([real[4]["text"].encode(), b"invalid \xff utf-8", real[5]["text"].encode()], pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # unvalidated, as a foreign writer may leave it
    buf = io.BytesIO()
    pq.write_table(pa.table({"_id": [real[4]["_id"], "pq-bad", real[5]["_id"]], "text": text}), buf)
    (d / "c.parquet").write_bytes(buf.getvalue())
    (d / "d.jsonl.gz").write_bytes(gzip.compress(b"\n".join([row(real[6]), b'{"_id": "gz-bad", "text": "invalid \xff utf-8"}', row(real[7])]) + b"\n"))
    index = str(tmp_path_factory.mktemp("idx") / "hostile")
    result = index_corpus(str(d), index, IndexConfig(), log=lambda _: None)
    return {"corpus": d, "index": index, "result": result, "real": real}


def test_hostile_rows_are_rejects_and_the_others_are_indexed(hostile):
    c = load_manifest(hostile["index"]).counts
    # 8 JSON lines + 3 TSV rows (the header is not a row) + 3 Parquet rows + 3 gzipped JSON lines
    assert (c["input_rows"], c["indexed_documents"], c["rejected"]) == (17, 9, 8)
    rejects = pq.read_table(os.path.join(hostile["index"], "rejects.parquet")).to_pylist()
    got = {(os.path.basename(r["source"]), r["line"]): (r["doc_id"], r["reason"].split(":")[0]) for r in rejects}
    assert got == {
        ("a.jsonl", 2): ("sur-id-\\ud800", "invalid unicode"),  # the id kept, its surrogate escaped
        ("a.jsonl", 3): ("sur-text", "invalid unicode"),
        ("a.jsonl", 4): ("sur-title", "invalid unicode"),
        ("a.jsonl", 5): (None, "JSON nested too deeply"),
        ("a.jsonl", 6): (None, "JSON nested too deeply"),
        ("b.tsv", 3): (None, "invalid UTF-8"),  # line 3 of the file: the header is line 1
        ("c.parquet", 2): (None, "invalid UTF-8"),
        ("d.jsonl.gz", 2): (None, "invalid UTF-8"),
    }
    real = hostile["real"]
    cat = Catalog(hostile["index"])
    try:
        ids = {r[0] for r in cat.con.execute("SELECT DISTINCT doc_id FROM passages").fetchall()}
        assert ids == {real[i]["_id"] for i in range(8)} | {"pair"}  # no BOM in an id, no "_id" header document
        assert dict(cat.rejects_by_reason()) == {"invalid unicode": 3, "JSON nested too deeply": 2, "invalid UTF-8": 3}
        assert cat.documents([real[7]["_id"]])[real[7]["_id"]]["text"] == real[7]["text"]  # read through the gzip stream
        assert cat.documents(["pair"])["pair"]["text"] == "a surrogate pair is fine: \U0001f600"
        assert cat.documents([real[2]["_id"]])[real[2]["_id"]]["text"] == real[2]["text"]  # CRLF and empty title dropped
    finally:
        cat.close()
    assert verify_index(hostile["index"]).ok


def _tiny(path, docs) -> str:
    path.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in docs))
    return str(path)


def test_a_corpus_without_rows_commits_nothing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    index = tmp_path / "idx"
    with pytest.raises(CorpusError, match="no passage to index: .*empty.jsonl has no rows; nothing was committed"):
        index_corpus(str(empty), str(index), IndexConfig(), log=lambda _: None)
    assert not index.exists()  # created by the run, removed again


def test_a_corpus_whose_every_row_is_rejected_commits_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"_id": "a", "text": "  "}\n{"_id": "b"}\nnot json\n{"text": "no id"}\n{"_id": "c", "text": "   "}\n')
    index = tmp_path / "idx"
    assert index_job.main([str(bad), str(index)]) == 2
    err = capsys.readouterr().err
    assert "no passage to index: 5 input row(s), all rejected (2 empty text," in " ".join(err.split())
    assert "Traceback" not in err
    assert sorted(os.listdir(index)) == ["rejects.parquet"]  # the reasons, nothing committed, no staging left
    rejects = pq.read_table(index / "rejects.parquet").to_pylist()
    assert [r["line"] for r in rejects] == [1, 2, 3, 4, 5] and rejects[1]["reason"].startswith("missing text")
    assert read_manifest(str(index)) is None


def test_overwrite_keeps_user_files_and_the_old_index_until_the_new_corpus_is_valid(tmp_path, datasets):
    real = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:5]
    first = _tiny(tmp_path / "first.jsonl", [(d["_id"], d["text"]) for d in real[:3]])
    second = _tiny(tmp_path / "second.jsonl", [(d["_id"], d["text"]) for d in real[3:5]])
    rejected = _tiny(tmp_path / "rejected.jsonl", [("x", " "), ("y", "")])
    index = tmp_path / "idx"
    index.mkdir()
    (index / "notes.txt").write_text("the user's notes")

    # an existing directory of other files is not an index: refused unless --overwrite
    with pytest.raises(IndexTargetError, match="is not an mvr index .it holds notes.txt.*--overwrite"):
        index_corpus(first, str(index), IndexConfig(), log=lambda _: None)
    index_corpus(first, str(index), IndexConfig(), overwrite=True, log=lambda _: None)
    before = load_manifest(str(index))
    assert before.counts["indexed_documents"] == 3 and (index / "notes.txt").read_text() == "the user's notes"
    old_files = sorted(os.listdir(index))

    # --overwrite with a corpus of rejects only: refused, the old index untouched
    with pytest.raises(CorpusError, match="no passage to index: 2 input row.s., all rejected .2 empty text.; nothing was committed"):
        index_corpus(rejected, str(index), IndexConfig(), overwrite=True, log=lambda _: None)
    assert sorted(os.listdir(index)) == old_files and load_manifest(str(index)) == before
    assert verify_index(str(index)).ok

    # --overwrite with a valid corpus: the old index is replaced, the user's file kept
    index_corpus(second, str(index), IndexConfig(), overwrite=True, log=lambda _: None)
    after = load_manifest(str(index))
    assert after.counts["indexed_documents"] == 2 and after.input["url"] == second
    assert {p for s in after.shards for p in (s.path, s.codes)} == {"shards/" + f for f in os.listdir(index / "shards")}  # no shard of the first index left
    assert sorted(os.listdir(index)) == ["catalog.duckdb", "codecs", "manifest.json", "notes.txt", "rejects.parquet", "shard-lists", "shards", "versions"]
    assert (index / "notes.txt").read_text() == "the user's notes" and verify_index(str(index)).ok

    # a corpus inside INDEX: refused before anything is deleted, --overwrite or not
    inside = index / "corpus.jsonl"
    shutil.copy(first, inside)
    for extra in ([], ["--overwrite"]):
        assert index_job.main([str(inside), str(index), *extra]) == 2
    assert inside.read_text() == open(first).read() and load_manifest(str(index)) == after
    assert sorted(os.listdir(index)) == [
        "catalog.duckdb",
        "codecs",
        "corpus.jsonl",
        "manifest.json",
        "notes.txt",
        "rejects.parquet",
        "shard-lists",
        "shards",
        "versions",
    ]
