"""The hybrid's unions in batches (issue 47, item 7): several queries' unions taken in one trip
(``QueryPlan.hybrid_parts_batch`` → ``PartitionHost.hybrid`` →
``operators.retrieval.fusion.side_by_side_batch``) are the unions taken one query at a time.

- On random passages (milliseconds, no Ray): every query's part, batched (candidate rows
  gathered a group at a time, or scored in one pass over every passage), with tiny chunk and
  gather budgets (each query a chunk and a group) and one at a time, is an independent
  reference's (each side's n-best among the allowed, live passages, scored one passage at a
  time), for token (Packed) and pooled (matrix) vectors, exact and candidate rows, with and
  without allowed rows; a deleted passage is on neither side.
- On a real index (``msmarco_100``: FAISS partitions of tokens and pooled, BM25), exact and
  ANN, with and without a filter: the batched parts have the same passages, documents and
  BM25 scores as one query at a time, dense scores to float rounding, and the fused answers
  (``Searcher.search_encoded_batch``, ``Searcher.search``) the same rankings. A partition
  runs the ``hybrid`` calls of one ``many`` as one batch (a call that breaks it fails alone),
  and the plan driven as the Serve ingress drives it (coalesced trips) batches concurrent
  queries and answers as in process."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from helpers import read_jsonl, unit
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.packed import Packed
from mvr.operators.retrieval import fusion
from mvr.operators.retrieval.fusion import ScoredPassages, side_by_side, side_by_side_batch
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.scoring import score
from mvr.pipeline.config import SearchConfig
from mvr.pipeline.retrieval.request import request_settings
from mvr.pipeline.retrieval.searcher import Searcher

PASSAGES, DIM, N_BEST, FIRST = 150, 24, 12, 1000


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 12, PASSAGES)
    tokens = Packed(unit(rng.standard_normal((int(lengths.sum()), DIM))), np.r_[0, np.cumsum(lengths)].astype(np.int64))
    pooled = unit(rng.standard_normal((PASSAGES, DIM)))
    live = rng.random(PASSAGES) > 0.15
    doc_ids = [f"d{i // 2}" for i in range(PASSAGES)]
    queries = [EncodedQuery(f"q{i}", unit(rng.standard_normal((int(rng.integers(1, 6)), DIM))), unit(rng.standard_normal(DIM))) for i in range(7)]
    sparse = np.where(rng.random((len(queries), PASSAGES)) < 0.3, rng.uniform(0.5, 9, (len(queries), PASSAGES)), 0).astype(np.float32)
    rows = [np.sort(rng.choice(PASSAGES, int(rng.integers(0, 60)), replace=False)) for _ in queries]
    rows[2] = rows[2][:0]  # a query with no candidate here
    return SimpleNamespace(tokens=tokens, pooled=pooled, live=live, doc_ids=doc_ids, queries=queries, sparse=sparse, rows=rows, rng=rng)


def reference(part: Partition, vectors, mode: str, query, sparse: np.ndarray, rows, allowed: np.ndarray | None) -> ScoredPassages:
    """Each side's n-best among the live, allowed passages (and the candidate rows), every
    passage scored on its own, with both scores."""
    ok = part.live.copy() if part.live is not None else np.ones(PASSAGES, bool)
    if allowed is not None:
        ok &= np.isin(np.arange(PASSAGES), np.flatnonzero(allowed) if allowed.dtype == bool else allowed)
    dense = np.array(
        [score(mode, query, vectors.take(np.array([r])) if isinstance(vectors, Packed) else vectors[r : r + 1])[0] for r in range(PASSAGES)], np.float32
    )
    cand = np.flatnonzero(ok) if rows is None else np.intersect1d(rows, np.flatnonzero(ok))
    best_dense = cand[np.argsort(-dense[cand], kind="stable")[:N_BEST]]
    s = np.where(ok, sparse, 0)
    positive = np.flatnonzero(s > 0)
    best_sparse = positive[np.argsort(-s[positive], kind="stable")[:N_BEST]]
    union = np.union1d(best_dense, best_sparse)
    return ScoredPassages(union + FIRST, [part.doc_ids[r] for r in union], part.passage_idx[union], dense[union], s[union])


def same(a: ScoredPassages, b: ScoredPassages, rtol: float = 1e-5) -> None:
    np.testing.assert_array_equal(a.passages, b.passages)
    assert list(a.doc_ids) == list(b.doc_ids)
    np.testing.assert_array_equal(a.passage_idx, b.passage_idx)
    np.testing.assert_array_equal(a.sparse, b.sparse)
    np.testing.assert_allclose(a.dense, b.dense, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("mode", ["maxsim", "pooled"])
@pytest.mark.parametrize("candidates", ["every passage", "rows", "mixed"])
@pytest.mark.parametrize("allowed", [None, "rows", "mask"])
def test_a_batch_is_each_query_alone_and_the_reference(data, monkeypatch, mode, candidates, allowed):
    vectors = data.tokens if mode == "maxsim" else data.pooled
    part = Partition("tokens" if mode == "maxsim" else "pooled", vectors, data.doc_ids, np.arange(PASSAGES, dtype=np.int32) % 3, live=data.live)
    keep = np.sort(data.rng.choice(PASSAGES, 90, replace=False))
    allow = None if allowed is None else keep if allowed == "rows" else np.isin(np.arange(PASSAGES), keep)
    rows = {"every passage": [None] * len(data.queries), "rows": data.rows, "mixed": [r if i % 2 else None for i, r in enumerate(data.rows)]}[candidates]
    sparse = data.sparse.copy()
    sparse[:, ~data.live] = 0.0  # BM25 partitions score a deleted passage 0
    expected = [reference(part, vectors, mode, q, sparse[i], rows[i], allow) for i, q in enumerate(data.queries)]
    batched = side_by_side_batch(part, lambda i: sparse[i], FIRST, mode, data.queries, rows, N_BEST, allowed=allow)
    alone = [side_by_side(part, sparse[i], FIRST, mode, q, rows[i], N_BEST, allowed=allow) for i, q in enumerate(data.queries)]
    monkeypatch.setattr(fusion, "DECODE_COST", 1e9)  # candidate rows scored in one pass over every passage
    scanned = side_by_side_batch(part, lambda i: sparse[i], FIRST, mode, data.queries, rows, N_BEST, allowed=allow)
    monkeypatch.setattr(fusion, "DECODE_COST", 3.0)
    monkeypatch.setattr(fusion, "CHUNK_SCORE_BYTES", 1)  # one query a chunk
    monkeypatch.setattr(fusion, "GATHER_BYTES", 1)  # each query's candidates gathered alone
    small = side_by_side_batch(part, lambda i: sparse[i], FIRST, mode, data.queries, rows, N_BEST, allowed=allow)
    for e, b, a, sc, sm in zip(expected, batched, alone, scanned, small):
        for got in (b, a, sc, sm):
            same(got, e)
        assert not set(b.passages - FIRST) & set(np.flatnonzero(~data.live))  # deleted: on neither side
    assert side_by_side_batch(part, lambda i: sparse[i], FIRST, mode, [], [], N_BEST) == []
    with pytest.raises(ValueError, match="BM25 scores of shape"):
        side_by_side_batch(part, lambda i: sparse[i, :-1], FIRST, mode, data.queries[:1], [None], N_BEST)
    with pytest.raises(ValueError, match="candidate row sets"):
        side_by_side_batch(part, lambda i: sparse[i], FIRST, mode, data.queries, [None], N_BEST)
    with pytest.raises(ValueError, match="this partition holds"):
        side_by_side_batch(part, lambda i: sparse[i], FIRST, "first-m", data.queries[:1], [None], N_BEST)


# ---- a real index: msmarco_100 (FAISS partitions of tokens and pooled, BM25) ----------------


@pytest.fixture(scope="module")
def real(msmarco_100, datasets):
    texts = [q["text"] for q in read_jsonl(datasets / "msmarco-sample" / "queries.jsonl")[:20]]
    searchers, encoder = {}, None
    for path in ("exact", "ann"):
        for dense in ("maxsim", "pooled"):
            config = SearchConfig(exact=path == "exact", hybrid={"dense": dense})
            s = searchers[path, dense] = Searcher(msmarco_100, modes=(dense, "bm25", "hybrid"), config=config, encoder=encoder)
            encoder = s.query_encoder.encoder
    some = sorted({d for p in searchers["exact", "maxsim"].partitions["maxsim"] for d in p.doc_ids})[::2]  # half the documents
    encoded = searchers["exact", "maxsim"].encode(texts)
    yield SimpleNamespace(searchers=searchers, texts=texts, encoded=encoded, some=some)
    for s in searchers.values():
        s.close()


@pytest.mark.parametrize("path", ["exact", "ann"])
@pytest.mark.parametrize("dense", ["maxsim", "pooled"])
@pytest.mark.parametrize("filtered", [False, True])
def test_batched_hybrid_equals_one_query_at_a_time_on_a_real_index(real, monkeypatch, path, dense, filtered):
    s = real.searchers[path, dense]
    assert s.paths[dense] == path
    restriction = s.restriction(doc_ids=real.some) if filtered else None
    for knobs in ({}, {"n_best": 8, "norm_depth": 4}, {"fusion": "rrf", "n_best": 20}):
        fs, params = request_settings(s.config, "hybrid", knobs)
        batched = s.hybrid_passages(real.encoded, params, fs, restriction)
        for e, parts in zip(real.encoded, batched):
            (alone,) = s.hybrid_passages([e], params, fs, restriction)
            assert len(parts) == len(alone) == s.partition_count("hybrid")
            for a, b in zip(parts, alone):
                same(a, b)
                if filtered:
                    assert set(a.doc_ids) <= set(real.some)
        one = [s.search_encoded(e, 10, "hybrid", 0.0, restriction, **knobs) for e in real.encoded]
        many = s.search_encoded_batch(real.encoded, 10, "hybrid", 0.0, restriction, **knobs)
        for a, b in zip(one, many):
            assert a.ranked.doc_ids == b.ranked.doc_ids and len(a.ranked) > 0
            np.testing.assert_allclose(a.ranked.scores, b.ranked.scores, rtol=1e-5, atol=1e-5)  # min-max normalised: the dense side's rounding, scaled up
            assert (a.path, a.candidates, a.partitions_answered, a.allowed_passages) == (b.path, b.candidates, b.partitions_answered, b.allowed_passages)
    # candidate rows scored in one pass over every passage; gathered a query at a time, each
    # query a chunk of its own: the same answers again
    default = [s.search_encoded(e, 10, "hybrid", 0.0, restriction) for e in real.encoded]
    for cost, chunk, gather in ((1e9, fusion.CHUNK_SCORE_BYTES, fusion.GATHER_BYTES), (0.0, 1, 1)):
        monkeypatch.setattr(fusion, "DECODE_COST", cost)
        monkeypatch.setattr(fusion, "CHUNK_SCORE_BYTES", chunk)
        monkeypatch.setattr(fusion, "GATHER_BYTES", gather)
        again = s.search_encoded_batch(real.encoded, 10, "hybrid", 0.0, restriction)
        assert [r.ranked.doc_ids for r in again] == [r.ranked.doc_ids for r in default]


def test_searcher_search_takes_a_list_of_hybrid_queries_at_once(real):
    s = real.searchers["exact", "maxsim"]
    texts = real.texts[:6]
    together = s.search(texts, 10, "hybrid", lam=0.6)
    for text, got in zip(texts, together):
        (alone,) = s.search([text], 10, "hybrid", lam=0.6)
        assert got.ranked.doc_ids == alone.ranked.doc_ids and got.query == text
        np.testing.assert_allclose(got.ranked.scores, alone.ranked.scores, rtol=1e-5, atol=1e-5)
        assert set(got.timings_ms) >= {"encode", "candidates", "rescore", "total"} and got.timings_ms["encode"] > 0  # its own encode, measured


def test_a_partition_runs_the_hybrid_calls_of_a_trip_as_one_batch(real, monkeypatch):
    """The ingress sends a partition the calls of one loop turn together (``many``): its
    ``hybrid`` calls over the same vectors and allowed rows run as one batch, each answered
    with its own parts; a call that cannot join a batch, or breaks one, fails alone."""
    from mvr.pipeline.retrieval.host import run_many

    s = real.searchers["exact", "maxsim"]
    host = s.hosts[0].host
    fs, params = request_settings(s.config, "hybrid", {})
    terms = s.plan.terms_of(real.texts)
    calls = [("hybrid", ("maxsim", "tokens", [e], [t], [None], params.n_best, None)) for e, t in zip(real.encoded[:5], terms[:5])]
    expected = [host.hybrid(*args) for _, args in calls]
    batches = []
    hybrid = host.hybrid
    monkeypatch.setattr(host, "hybrid", lambda *args: batches.append(len(args[2])) or hybrid(*args))
    calls.insert(2, ("hybrid", ("maxsim", "pooled", real.encoded[:1], terms[:1], [None], params.n_best, None)))  # no such vectors here
    calls.append(("rank", ("maxsim", "tokens", real.encoded[0], None, 10)))
    got = run_many(host, calls)
    assert batches == [5, 1] and [ok for ok, _ in got] == [True, True, False, True, True, True, True]
    assert "holds no pooled" in str(got[2][1])
    for (_, parts), want in zip(got[:2] + got[3:6], expected):
        for a, b in zip(parts, want):
            same(a, b)
    batches.clear()
    broken = calls[:2] + [("hybrid", ("maxsim", "tokens", real.encoded[:1], [], [None], params.n_best, None))] + calls[3:6]
    got = run_many(host, broken)  # one call's terms are missing: the batch fails, each call runs alone
    assert batches == [6, 1, 1, 1, 1, 1, 1] and [ok for ok, _ in got] == [True, True, False, True, True, True]
    assert "term lists" in str(got[2][1])


def test_the_ingress_driver_batches_concurrent_hybrid_queries(real, monkeypatch):
    """The plan driven as the Serve ingress drives it (``run_trips_async``, each trip's calls
    coalesced per partition by ``CoalescedHandle`` into one ``many``): concurrent hybrid
    queries reach each partition as one batch and answer as in process."""
    import asyncio

    from mvr.pipeline.retrieval.plan import run_trips_async
    from mvr.pipeline.serving.fanout import CoalescedHandle

    s = real.searchers["exact", "maxsim"]
    expected = [s.search_encoded(e, 10, "hybrid") for e in real.encoded]
    batches = []
    for h in s.hosts:
        hybrid = h.host.hybrid
        monkeypatch.setattr(h.host, "hybrid", lambda *args, hybrid=hybrid: batches.append(len(args[2])) or hybrid(*args))

    class Handle:  # a deployment handle answering at once, in this process
        def __init__(self, host) -> None:
            self.host = host

        def __getattr__(self, method: str):
            def remote(*args):
                future = asyncio.get_running_loop().create_future()
                future.set_result(getattr(self.host, method)(*args))
                return future

            return type("Method", (), {"remote": staticmethod(remote)})()

    async def main():
        handles = [CoalescedHandle(Handle(h.host), timeout_s=60) for h in s.hosts]

        async def trip(calls):
            got = await asyncio.gather(*(handles[i].call(c.method, *c.args) for i, c in calls.items()))
            return dict(zip(calls, got))

        return await asyncio.gather(*(run_trips_async(s.plan.search(e, 10, "hybrid"), trip) for e in real.encoded))

    got = asyncio.run(main())
    assert batches == [len(real.encoded)] * len(s.hosts)  # one batch a partition
    for a, b in zip(got, expected):
        assert a.ranked.doc_ids == b.ranked.doc_ids
        np.testing.assert_allclose(a.ranked.scores, b.ranked.scores, rtol=1e-5, atol=1e-5)
