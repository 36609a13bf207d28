"""BM25 and hybrid search on msmarco-sample (BM25 in P = 2 partitions, beside FAISS P = 2),
dbpedia-sample and cranfield (P = 1, dense search exact): ``bm25`` within 0.01 of an independent bm25s run with the same settings
(and of the datasets README figure); the default hybrid, and ``mvr tune-hybrid`` (λ tuned on
one half of the queries, reported on the other, both ways round), no more than 0.005 below
the better of its two sides; an index without BM25 and λ outside [0, 1] are refused with the
reason."""

from __future__ import annotations

import json
import shutil

import bm25s
import pytest
import Stemmer

from helpers import REFERENCE_NDCG10, REFERENCE_TOLERANCE, ndcg10, read_jsonl, read_qrels
from mvr.jobs import tune_hybrid as tune_job
from mvr.pipeline.config import SearchConfig
from mvr.pipeline.retrieval.layout import plan_layout
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.manifest import commit_manifest, load_manifest

pytestmark = pytest.mark.ray

# each collection's cached index with BM25 (tests/conftest.py), and its BM25 partitions
COLLECTIONS = {"msmarco-sample": ("msmarco_faiss2", 2), "dbpedia-sample": ("dbpedia_bm25", 1), "cranfield": ("cranfield_bm25", 1)}
BELOW_BETTER_SIDE = 0.005  # issue 36: a hybrid at most this far below the better of its two sides


def independent_bm25(dataset) -> dict[str, list[tuple[str, float]]]:
    """bm25s straight over corpus.jsonl (title + " " + text), English stopwords, Snowball."""
    corpus = read_jsonl(dataset / "corpus.jsonl")
    queries = read_jsonl(dataset / "queries.jsonl")
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([(c.get("title") or "") + " " + c["text"] for c in corpus], stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    docs, scores = retriever.retrieve(
        bm25s.tokenize([q["text"] for q in queries], stopwords="en", stemmer=stemmer, show_progress=False), k=10, show_progress=False
    )
    return {q["_id"]: [(corpus[i]["_id"], float(s)) for i, s in zip(docs[j], scores[j])] for j, q in enumerate(queries)}


@pytest.fixture(scope="module", params=list(COLLECTIONS))
def with_bm25(request, datasets):
    name = request.param
    fixture, partitions = COLLECTIONS[name]
    index = request.getfixturevalue(fixture)
    manifest = load_manifest(index)
    assert len(manifest.bm25["partitions"]) == partitions and manifest.bm25["passages"] == manifest.counts["passages"]
    return {"name": name, "index": index, "dataset": datasets / name}


def test_bm25_matches_an_independent_bm25s_run(with_bm25):
    dataset = with_bm25["dataset"]
    queries = {q["_id"]: q["text"] for q in read_jsonl(dataset / "queries.jsonl")}
    qrels = read_qrels(dataset / "qrels" / "test.tsv")
    searcher = Searcher(with_bm25["index"], modes=("bm25",))
    encoder, encoded = searcher.query_encoder, []
    searcher.query_encoder = lambda texts, *a, **kw: encoded.append(texts) or encoder(texts, *a, **kw)  # counts the model's calls
    results = searcher.search(list(queries.values()), 10, "bm25")
    assert all(r.path == "bm25" for r in results) and encoded == []  # no model call (not a duration: a clock under load is no check)
    ours = ndcg10({q: r.hits() for q, r in zip(queries, results)}, qrels)
    theirs = ndcg10(independent_bm25(dataset), qrels)
    print(f"\n{with_bm25['name']}: bm25 nDCG@10 {ours:.4f}, independent bm25s {theirs:.4f}")
    assert abs(ours - theirs) <= 0.01
    assert abs(ours - REFERENCE_NDCG10[with_bm25["name"]]["bm25"]) <= 0.01


def test_default_and_tuned_hybrid_are_not_below_their_better_side(with_bm25, tmp_path, capsys):
    out = tmp_path / "tune.json"
    assert tune_job.main([with_bm25["index"], "--dataset", str(with_bm25["dataset"]), "--exact", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert (tmp_path / "tune.png").stat().st_size > 10_000 and "hybrid-rrf" in printed
    folds = result["folds"]
    assert len(folds) == 2 and not set(folds[0]["queries"]) & set(folds[1]["queries"])
    reported = {m: f["nDCG@10"] for m, f in result["reported"].items()}
    print(f"\n{with_bm25['name']}: λ per fold {[f['lam'] for f in folds]}, nDCG@10 {reported}")
    assert abs(reported["maxsim"] - REFERENCE_NDCG10[with_bm25["name"]]["maxsim"]) <= REFERENCE_TOLERANCE
    better = max(reported["maxsim"], reported["bm25"])
    assert reported["hybrid"] >= better - BELOW_BETTER_SIDE  # λ tuned on the other fold
    # every setting at its default (fusion, λ, n-best, norm_depth): what a search without knobs answers
    assert reported["hybrid-default"] >= better - BELOW_BETTER_SIDE


def test_hybrid_without_bm25_and_bad_lambda_are_refused(with_bm25, tmp_path):
    index = with_bm25["index"]
    bare = tmp_path / "no-bm25"
    bare.mkdir()
    manifest = load_manifest(index)
    manifest.bm25 = {}
    commit_manifest(str(bare), manifest)  # the manifest and its shard list, no BM25 partitions
    for mode in ("bm25", "hybrid"):
        with pytest.raises(ValueError, match="no BM25 partitions.*mvr build-bm25"):
            Searcher(str(bare), modes=(mode,))
        with pytest.raises(ValueError, match="no BM25 partitions"):
            plan_layout(str(bare), manifest, [mode])
    searcher = Searcher(index, modes=("pooled", "bm25", "hybrid"), config=SearchConfig(hybrid={"dense": "pooled"}))
    for bad, message in (({"lam": 1.5}, "less than or equal to 1"), ({"lam": -0.2}, "greater than or equal to 0"), ({"fusion": "max"}, "fusion")):
        with pytest.raises(ValueError, match=message):
            searcher.search(["a query"], 10, "hybrid", **bad)
    with pytest.raises(ValueError, match="bm25 takes no search knobs"):
        searcher.search(["a query"], 10, "bm25", nprobe=4)
    (fused,) = searcher.search(["what is the definition of a bank"], 10, "hybrid", lam=1.0)
    (dense,) = searcher.search(["what is the definition of a bank"], 10, "pooled")
    assert fused.ranked.doc_ids == dense.ranked.doc_ids  # λ = 1: the dense side's ranking
    assert fused.partitions_answered == fused.partitions and fused.candidates >= 10
    shutil.rmtree(bare)
