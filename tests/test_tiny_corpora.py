"""Corpora of a few documents (issue 47): 1, 2 and 6 msmarco-sample documents and a 6-row TSV
with quoted fields, each indexed with the defaults (codec ``auto``), searched exactly, added
to, deleted from and compacted. Their token vectors are too few for ``auto``'s PCA (a sample
of at least 2 × 192 vectors, ``codecs.choose``), which made FAISS fail the job; the index
falls back to ``residual-1`` at the full dimension, says so in the job's log, records it in the
manifest and ``mvr stats``, and ``mvr add`` codes with the same codec files. Six whole
documents are enough for the PCA, and keep it. A named codec the sample cannot train
(``pq-48``) falls back too, said in the log line."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mvr
from helpers import read_jsonl
from mvr.jobs import stats as stats_job
from mvr.operators import codecs
from mvr.pipeline.config import IndexConfig
from mvr.storage.manifest import load_manifest

pytestmark = pytest.mark.ray

DIM = 384  # the packaged MiniLM's


def _docs(datasets: Path) -> list[dict]:
    """The first 20 msmarco-sample documents (one passage each: each under 256 tokens)."""
    return read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:20]


def _write_jsonl(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return str(path)


def _quoted_tsv(path: Path, docs: list[dict]) -> tuple[str, list[dict]]:
    """A headed TSV (``id<TAB>text<TAB>title``: the reader's column order) of each document's
    first sentence, with quotes as spreadsheets write them: a title quoted whole, a quoted
    phrase, doubled quotes inside a quoted field. The reader has no quoting rules: every
    field is kept as written (docs/indexing.md). Returns the path and the rows as documents."""
    rows = []
    for i, d in enumerate(docs):
        first = d["text"].split(". ")[0].rstrip(".") + "."
        text = [f'"{first}"', f'He wrote: "{first}"', f'"She said ""{first}"""', first, f'{first} ("quoted")', f"'{first}'"][i % 6]
        rows.append({"_id": f"tsv-{d['_id']}", "title": f'"Row {i}"' if i % 2 else "", "text": text})
    lines = ["id\ttext\ttitle"] + [f"{r['_id']}\t{r['text']}\t{r['title']}" for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path), rows


def _query(doc: dict) -> str:
    return (doc["title"] + " " + doc["text"]).strip()


def _codes_codec(index: str, codes_path: str) -> str:
    """The token codec a shard's codes file names in its schema metadata (storage/schema.py)."""
    with pa.memory_map(str(Path(index) / codes_path)) as source:
        return pa.ipc.open_file(source).schema.metadata[b"mvr.codec.tokens"].decode()


def _assert_found_first(index: str, docs: list[dict]) -> None:
    """Exact MaxSim search (no ANN built) for each document's own text finds it first."""
    with mvr.open(index) as searcher:
        results = searcher.search([_query(d) for d in docs], k=10, mode="maxsim")
    for d, r in zip(docs, results):
        assert r.path == "exact" and r.hits()[0][0] == d["_id"], (d["_id"], r.hits())


def _assert_stats_name(index: str, codec: str, asked: str, capsys, pooled: str) -> None:
    """``mvr.stats`` and the ``mvr stats`` table name the token codec and the name asked for,
    and the pooled codec (``pooled``: what the default ``auto`` gives the sample)."""
    s = mvr.stats(index)
    assert (s["codec"], s["codec_asked"], s["pooled_codec"], s["pooled_codec_asked"]) == (codec, asked, pooled, "auto")
    assert s["bytes_per_token_vector"] == codecs.bytes_per_vector(codec, DIM, n_centroids=1)  # uint8 ids: fewer than 256 centroids
    capsys.readouterr()
    assert stats_job.main([index]) == 0
    rows = {tuple(c.strip() for c in line.strip("│ ").split("│")) for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    assert {("codec", codec), ("codec asked", asked), ("pooled codec", pooled)} <= rows


CASES = {
    # corpus: (documents of _docs, the token codec auto gives them)
    "1-doc": ([0], "residual-1"),
    "2-docs": ([1, 2], "residual-1"),
    "6-docs": ([3, 4, 5, 6, 7, 8], "pca-192+residual-1"),
    "6-row-tsv": ([9, 10, 11, 12, 13, 14], "residual-1"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tiny_corpus_with_the_default_codec(case, datasets, ray_address, tmp_path, capsys):
    picks, codec = CASES[case]
    pool = _docs(datasets)
    docs = [pool[i] for i in picks]
    if case.endswith("tsv"):
        corpus, docs = _quoted_tsv(tmp_path / "corpus.tsv", docs)
    else:
        corpus = _write_jsonl(tmp_path / "corpus.jsonl", docs)
    index, n = str(tmp_path / "index"), len(docs)
    lines: list[str] = []
    m = mvr.index(corpus, index, IndexConfig(), log=lines.append).manifest

    # the codec: what the sample (every token vector of so small a corpus) can train, said in the log
    tokens = m.counts["tokens"]
    assert (m.counts["indexed_documents"], m.counts["rejected"], m.counts["passages"]) == (n, 0, n)
    assert m.config["compress"]["codec"] == "auto" and m.codecs["tokens"]["name"] == codec == codecs.choose("auto", DIM, tokens).name
    assert m.codecs["tokens"]["dim_in"] == DIM and m.dim == m.codecs["tokens"]["dim_out"] == (192 if codec.startswith("pca") else DIM)
    (trained,) = [line for line in lines if line.startswith("trained codecs")]
    pooled = codecs.choose("auto", DIM, tokens, "pooled").name  # pq-192 from 256 sample vectors, int8 below
    assert m.codecs["pooled"]["name"] == pooled and (tokens >= 256) == (pooled == "pq-192") == ("first_m" in m.codecs)
    fell_back = codec == "residual-1"
    assert (tokens < 2 * 192) == fell_back and f"on {tokens:,} token vectors of {n} sampled passages" in trained
    if fell_back:
        assert (
            f"tokens residual-1 instead of auto (pca-192+residual-1): the training sample of {tokens:,} vectors is too small for it (at least 384)" in trained
        )
    else:
        assert "tokens pca-192+residual-1, pooled pq-192, first_m refine-96 on" in trained
        assert m.codecs["first_m"]["name"] == "refine-96"  # first-m: the token codes plus a refinement
    if case.endswith("tsv"):  # the fields as written, quotes included
        stored = pq.read_table(Path(index) / m.shards[0].path, columns=["doc_id", "text"]).to_pylist()
        assert {r["doc_id"]: r["text"] for r in stored} == {d["_id"]: _query(d) for d in docs}
    _assert_found_first(index, docs)
    _assert_stats_name(index, codec, "auto", capsys, pooled)
    assert mvr.stats(index)["passages"] == n

    # mvr add: the index's own codec files, no retraining; the new document is found
    before = {g: e["sha256"] for g, e in m.codecs.items()}
    extra = pool[16]  # in none of the corpora
    m = mvr.add(index, _write_jsonl(tmp_path / "extra.jsonl", [extra])).manifest
    assert {g: e["sha256"] for g, e in m.codecs.items()} == before and m.codecs["tokens"]["name"] == codec
    assert len(m.shards) == 2 and {_codes_codec(index, sh.codes) for sh in m.shards} == {codec}  # the new shard's codes too
    assert mvr.stats(index)["passages"] == n + 1
    _assert_found_first(index, docs + [extra])

    # mvr delete: the first document never comes back
    m = mvr.delete(index, [docs[0]["_id"]]).manifest
    s = mvr.stats(index)
    assert (s["passages"], s["deleted_passages"], m.counts["deleted_passages"]) == (n, 1, 1)
    with mvr.open(index) as searcher:
        (r,) = searcher.search([_query(docs[0])], k=10, mode="maxsim")
    assert docs[0]["_id"] not in dict(r.hits()) and len(r.hits()) == n

    # mvr compact: rewritten without it, the same codecs
    m = mvr.compact(index).manifest
    s = mvr.stats(index)
    assert (s["passages"], s["deleted_passages"], s["documents"]) == (n, 0, n)
    assert {g: e["sha256"] for g, e in m.codecs.items()} == before
    _assert_found_first(index, docs[1:] + [extra])
    _assert_stats_name(index, codec, "auto", capsys, pooled)
    assert load_manifest(index).version == m.version and mvr.verify(index).ok


def test_a_named_codec_the_sample_cannot_train_falls_back_and_says_so(datasets, ray_address, tmp_path, capsys):
    """``--codec pq-48`` on one document: pq needs 256 vectors, the index trains residual-1
    at the full dimension (auto's codec without a PCA) and the log line says why. With
    ``--pooled-codec auto`` the pooled group resolves its own auto (pq-192, not the tokens'
    pca-192+residual-1) and falls back to int8, and says so; first-m's refinement (refine-96)
    falls back to a column in the pooled codec the same way."""
    doc = _docs(datasets)[19]
    lines: list[str] = []
    config = IndexConfig.from_yaml(None, **{"compress.codec": "pq-48", "compress.pooled_codec": "auto"})
    m = mvr.index(_write_jsonl(tmp_path / "one.jsonl", [doc]), str(tmp_path / "index"), config, log=lines.append).manifest
    tokens = m.counts["tokens"]
    assert tokens < 256 and m.config["compress"]["codec"] == "pq-48" and m.codecs["tokens"]["name"] == "residual-1"
    (trained,) = [line for line in lines if line.startswith("trained codecs")]
    assert f"tokens residual-1 instead of pq-48: the training sample of {tokens:,} vectors is too small for it (at least 256)" in trained
    assert f"pooled int8 instead of auto (pq-192): the training sample of {tokens:,} vectors is too small for it (at least 256)" in trained
    assert f"first_m pooled instead of auto (refine-96): the training sample of {tokens:,} vectors is too small for it (at least 256)" in trained
    assert m.config["compress"]["pooled_codec"] == "auto" and m.codecs["pooled"]["name"] == "int8" and "first_m" not in m.codecs
    _assert_found_first(str(tmp_path / "index"), [doc])
    _assert_stats_name(str(tmp_path / "index"), "residual-1", "pq-48", capsys, "int8")
