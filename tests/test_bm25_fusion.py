"""The sparse side's operators on real text (msmarco-sample passages): partitioned BM25 with
collection statistics scores exactly like one bm25s index over every passage; fusion keeps
the global n-best of each side whatever the partitioning; bad settings are refused."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest
import Stemmer

from helpers import read_jsonl
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.retrieval.bm25 import Analyzer, BM25Partition, TermStats
from mvr.operators.retrieval.fusion import HybridParams, ScoredPassages, fuse, union_of_best
from mvr.operators.retrieval.partition import Partition

N = 800
QUERIES = ["what is the definition of a bank", "how long does it take to boil an egg", "causes of high blood pressure"]


@pytest.fixture(scope="module")
def passages(datasets):
    corpus = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[:N]
    return [c["_id"] for c in corpus], [(c.get("title") or "") + " " + c["text"] for c in corpus]


def partitions(terms: list, ids: list, bounds: list[int]) -> list[BM25Partition]:
    stats = sum((TermStats.of(terms[a:b]) for a, b in zip(bounds, bounds[1:])), TermStats())
    return [BM25Partition.build(terms[a:b], ids[a:b], np.zeros(b - a, np.int32), stats) for a, b in zip(bounds, bounds[1:])]


def test_partitioned_bm25_equals_one_bm25s_index(passages, tmp_path):
    ids, texts = passages
    stemmer = Stemmer.Stemmer("english")
    reference = bm25s.BM25()
    reference.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    analyzer = Analyzer()
    parts = partitions(analyzer(texts), ids, [0, 250, 251, 600, N])
    parts[2].save(str(tmp_path))  # and through bm25s's own save / load
    parts[2] = BM25Partition.load(str(tmp_path), parts[2].doc_ids, parts[2].passage_idx)
    for q in QUERIES:
        expected = reference.get_scores(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)[0])
        got = np.concatenate([p.scores(analyzer([q])[0]) for p in parts])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert (expected > 0).sum() > 0
        top = np.argsort(-expected, kind="stable")[:10]
        merged = sorted(
            (d for p in parts for d in zip(p.rank(analyzer([q])[0], 10).ranked.doc_ids, p.rank(analyzer([q])[0], 10).ranked.scores)), key=lambda x: -x[1]
        )[:10]
        np.testing.assert_allclose([s for _, s in merged], expected[top], rtol=1e-5)
    assert analyzer(["the and of"]) == [[]] and not parts[0].rank([], 10).ranked.doc_ids


def test_bad_bm25_and_hybrid_settings_are_refused():
    with pytest.raises(ValueError, match="stemmer"):
        Analyzer(stemmer="klingon")
    for bad in ({"lam": 1.5}, {"lam": -0.1}, {"fusion": "max"}, {"dense": "bm25"}, {"n_best": 0}, {"norm_depth": 0}):
        with pytest.raises(ValueError):
            HybridParams(**bad)
    with pytest.raises(ValueError, match="partitioned"):
        BM25Partition.build([["a"]], ["d"], np.zeros(1, np.int32), TermStats.of([["a"]]), method="bm25+")


def test_fusion_is_independent_of_partitioning(passages):
    """Dense pooled vectors and BM25 over the same passages, fused from 1 and from 3
    partitions: the same union and the same ranking, for weighted and RRF fusion."""
    ids, texts = passages
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((N, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    analyzer = Analyzer()
    terms = analyzer(texts)
    query = EncodedQuery("q", vectors[:1], vectors[7])
    q_terms = analyzer([QUERIES[0]])[0]

    def union(bounds):
        from mvr.operators.retrieval.fusion import side_by_side

        bm = partitions(terms, ids, bounds)
        out = []
        for (a, b), p in zip(zip(bounds, bounds[1:]), bm):
            dense = Partition("pooled", vectors[a:b], ids[a:b], np.zeros(b - a, np.int32))
            out.append(side_by_side(dense, p.scores(q_terms), a, "pooled", query, None, 20))
        return out

    one, three = union([0, N]), union([0, 300, 301, N])
    for params in (HybridParams("pooled", "weighted", 0.6, n_best=20), HybridParams("pooled", "rrf", n_best=20)):
        r1, n1 = fuse(one, params, 10)
        r3, n3 = fuse(three, params, 10)
        assert n1 == n3 and r1.doc_ids == r3.doc_ids
        np.testing.assert_allclose(r1.scores, r3.scores, rtol=1e-6)
    u = union_of_best(three, 20)
    assert set(u.passages.passages[u.dense_best]) == set(np.argsort(-(vectors @ vectors[7]))[:20])
    assert isinstance(ScoredPassages.concat([]), ScoredPassages)


def test_weighted_fusion_normalises_each_side_over_its_best():
    """λ·d' + (1−λ)·s' with each side's min and max over its ``norm_depth`` best scores
    (an independent loop here); lowering the tail below them changes no fused score."""
    from mvr.operators.retrieval.fusion import Union, fused_scores

    rng = np.random.default_rng(3)
    n = 60
    dense, sparse = rng.normal(10, 2, n).astype(np.float32), np.abs(rng.normal(5, 3, n)).astype(np.float32)
    p = ScoredPassages(np.arange(n), [f"d{i}" for i in range(n)], np.zeros(n, np.int32), dense, sparse)
    union = Union(p, np.arange(0, 50), np.arange(10, 60))  # each side's n-best: 50 passages
    params = HybridParams("maxsim", "weighted", 0.7, n_best=50, norm_depth=20)

    def naive(x, best):
        top = sorted(x[best], reverse=True)[:20]
        return (x - min(top)) / (max(top) - min(top))

    expected = 0.7 * naive(dense, union.dense_best) + 0.3 * naive(sparse, union.sparse_best)
    np.testing.assert_allclose(fused_scores(union, params), expected, rtol=1e-5)
    tail = np.argsort(-dense[:50])[25:]  # dense n-best below its best 20: pushed far down
    lowered = dense.copy()
    lowered[tail] -= 100
    moved = fused_scores(Union(ScoredPassages(p.passages, p.doc_ids, p.passage_idx, lowered, sparse), union.dense_best, union.sparse_best), params)
    keep = np.setdiff1d(np.arange(n), tail)
    np.testing.assert_allclose(moved[keep], expected[keep], rtol=1e-5)


def test_tuned_lambda_follows_the_one_standard_error_rule():
    """``pick_lam``: the best λ by mean when asked; by default, among the λ within one standard
    error of the best (paired per-query differences), the nearest the configured one."""
    from mvr.pipeline.retrieval.hybrid_tuning import pick_lam

    base = np.random.default_rng(0).uniform(0.3, 0.7, 40)
    wobble = np.where(np.arange(40) % 2 == 0, 0.21, -0.19)  # mean +0.01, standard error ~0.03
    noisy = {0.5: dict(enumerate(base - 0.1)), 0.8: dict(enumerate(base)), 0.95: dict(enumerate(base + wobble))}
    assert pick_lam(noisy, 0.8, "best") == 0.95
    assert pick_lam(noisy, 0.8) == 0.8  # 0.95's gain is within the noise: the configured λ stays
    assert pick_lam({k: v for k, v in noisy.items() if k != 0.8}, 0.8) == 0.95  # 0.5 is clearly worse
    clear = {lam: {q: float(base[q] + (0.3 if lam == 0.5 else 0.0)) for q in range(40)} for lam in (0.5, 0.8)}
    assert pick_lam(clear, 0.8) == 0.5  # a gain far beyond the noise moves it
    ties = {lam: {q: 1.0 for q in range(5)} for lam in (0.9, 0.7)}
    assert pick_lam(ties, 0.8) == 0.7 and pick_lam(ties, 0.8, "best") == 0.7  # equally near: the smaller
    with pytest.raises(ValueError, match="rule"):
        pick_lam(ties, 0.8, "median")
