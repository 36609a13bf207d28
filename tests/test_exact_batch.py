"""Exact search from codes, one query and several per pass (milliseconds, no Ray).

An exact partition decodes its codes a block at a time into one reused buffer
(``StoredVectors.scan``) and scores each block with one matmul for every query of a batch
(``Partition.rank_batch``, ``Searcher.search_encoded_batch``). Checked on random passages
whose codes span several segments, with blocks small enough that a block crosses a segment
and a passage is longer than a block: every mode gives the same top-k and scores (to float
rounding) as one query at a time, with and without allowed rows (few: gathered; many:
masked) and deleted passages, and the exact answer is an independent brute-force MaxSim
(a Python loop over passages, decoded by the codec)."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import unit
from mvr.operators import codecs
from mvr.operators.ann.factory import make_index
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.packed import Coded, Packed
from mvr.operators.retrieval import stored_vectors as sv_mod
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.ranking import best_first, top_documents
from mvr.operators.retrieval.scoring import MODE_VECTORS, MODES, QueryBatch
from mvr.operators.retrieval.stored_vectors import StoredVectors
from mvr.pipeline.retrieval.host import local_trip
from mvr.pipeline.retrieval.plan import run_trips

DIM, PASSAGES, K = 32, 240, 7


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 30, PASSAGES)
    lengths[17] = 300  # longer than a block (256 rows, the floor, below)
    tokens = unit(rng.standard_normal((int(lengths.sum()), DIM)))
    small = rng.integers(1, 5, PASSAGES)  # first-m / centroid vectors a passage
    centroids = (rng.standard_normal((int(small.sum()), DIM)) * rng.uniform(0.5, 4, (int(small.sum()), 1))).astype(np.float32)
    pooled = unit(rng.standard_normal((PASSAGES, DIM)))
    doc_ids = [f"d{i // 3}" for i in range(PASSAGES)]  # three passages a document
    queries = [EncodedQuery(f"q{i}", unit(rng.standard_normal((int(rng.integers(1, 9)), DIM))), unit(rng.standard_normal(DIM))) for i in range(9)]
    live = rng.random(PASSAGES) > 0.2
    return SimpleNamespace(
        lengths=lengths, tokens=tokens, small=small, centroids=centroids, pooled=pooled, doc_ids=doc_ids, queries=queries, live=live, rng=rng
    )


_CODECS: dict[str, codecs.Codec] = {}


def codec_for(name: str, data) -> codecs.Codec:
    if name not in _CODECS:
        sample = np.concatenate([data.tokens, unit(data.centroids), data.pooled])
        _CODECS[name] = codecs.train(name, sample, seed=0, n_centroids=64, niter=4) if name.startswith("residual") else codecs.train(name, sample)
    return _CODECS[name]


def stored(vectors: np.ndarray, lengths: np.ndarray, codec: codecs.Codec, single: bool = False) -> StoredVectors:
    """Codes of ``vectors`` in three segments cut at arbitrary rows (not passage boundaries)."""
    codes = codec.encode(vectors)
    cuts = [0, len(codes) // 3 + 1, 2 * len(codes) // 3 - 2, len(codes)]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    return StoredVectors([codes[a:b] for a, b in zip(cuts[:-1], cuts[1:])], offsets, codec, single)


def partition(mode: str, data, codec: codecs.Codec, live: bool) -> Partition:
    kind = MODE_VECTORS[mode]
    if kind == "tokens":
        v = stored(data.tokens, data.lengths, codec)
    elif kind == "pooled":
        v = stored(data.pooled, np.ones(PASSAGES, np.int64), codec, single=True)
    else:
        v = stored(data.centroids, data.small, codec)
    return Partition(kind, v, data.doc_ids, np.arange(PASSAGES) % 3, live=data.live if live else None)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(sv_mod, "SCAN_BYTES", 64 * 4 * DIM)  # 256-row blocks at most (the floor): many blocks


def assert_same(got, want):
    assert got.candidates == want.candidates
    assert got.ranked.doc_ids == want.ranked.doc_ids
    np.testing.assert_allclose(got.ranked.scores, want.ranked.scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.ranked.passage_idx, want.ranked.passage_idx)


@pytest.mark.parametrize("codec_name", ["float16", "residual-2", "int8"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("allowed", ["none", "few rows", "many rows", "mask"])
def test_batched_equals_one_query_at_a_time(data, codec_name, mode, live, allowed):
    codec = codec_for(codec_name, data)
    part = partition(mode, data, codec, live)
    rng = np.random.default_rng(1)
    a = {
        "none": None,
        "few rows": np.sort(rng.choice(PASSAGES, PASSAGES // 5, replace=False)),
        "many rows": np.sort(rng.choice(PASSAGES, PASSAGES // 2, replace=False)),
        "mask": rng.random(PASSAGES) > 0.4,
    }[allowed]
    batched = part.rank_batch(mode, data.queries, K, allowed=a)
    assert len(batched) == len(data.queries)
    for q, got in zip(data.queries, batched):
        assert_same(got, part.rank(mode, q, None, K, allowed=a))
    # several passes (a query's vectors never split): the same again
    part.BATCH_COLUMNS = 5
    for got, again in zip(batched, part.rank_batch(mode, data.queries, K, allowed=a)):
        assert_same(again, got)
    keep = np.ones(PASSAGES, bool) if a is None else (a if a.dtype == bool else np.isin(np.arange(PASSAGES), a))
    if live:
        keep &= data.live
    for got in batched:  # nothing deleted or outside the filter comes back
        assert got.candidates == keep.sum()
        assert set(got.ranked.doc_ids) <= {d for d, ok in zip(data.doc_ids, keep) if ok}


@pytest.mark.parametrize("codec_name", ["float16", "residual-2"])
def test_exact_maxsim_is_brute_force_maxsim(data, codec_name):
    codec = codec_for(codec_name, data)
    part = partition("maxsim", data, codec, live=True)
    decoded = codec.decode(codec.encode(data.tokens))
    offsets = np.r_[0, np.cumsum(data.lengths)]
    for q, got in zip(data.queries, part.rank_batch("maxsim", data.queries, K)):
        best: dict[str, float] = {}
        for i in range(PASSAGES):  # the reference: one passage at a time
            if not data.live[i]:
                continue
            s = float((q.tokens @ decoded[offsets[i] : offsets[i + 1]].T).max(axis=1).sum())
            best[data.doc_ids[i]] = max(best.get(data.doc_ids[i], -np.inf), s)
        want = sorted(best.items(), key=lambda kv: -kv[1])[:K]
        assert got.ranked.doc_ids == [d for d, _ in want]
        np.testing.assert_allclose(got.ranked.scores, [s for _, s in want], rtol=1e-5)
        assert part.rank("maxsim", q, None, K).ranked.doc_ids == got.ranked.doc_ids


@pytest.mark.parametrize("codec_name", ["float16", "residual-2", "int8", "pq-8"])
@pytest.mark.parametrize("mode", MODES)
def test_rescoring_rows_equals_a_loop_over_their_decoded_vectors(data, codec_name, mode):
    """The ANN path's rescoring (``Partition.rescore`` of some rows) scores the rows of a codec
    that scores its codes (residual, PQ) from their codes (``Coded``: nothing decoded; the
    pooled kind's one vector a passage too) and the other codecs' from their decoded vectors:
    the scores equal a loop over the rows' vectors as ``decode`` gives them (unit length), one
    passage at a time."""
    codec = codec_for(codec_name, data)
    part = partition(mode, data, codec, live=False)
    v = part.vectors
    rows = np.sort(np.random.default_rng(5).choice(PASSAGES, 70, replace=False))
    taken = v.take(rows, for_scoring=True)
    assert isinstance(taken, Coded) == (codec_name in ("residual-2", "pq-8"))  # only a codec that scores its codes keeps them
    if isinstance(taken, Coded):
        own = np.concatenate([np.arange(v.offsets[r], v.offsets[r + 1]) for r in rows.tolist()])
        np.testing.assert_array_equal(taken.vectors, np.concatenate(v.segments)[own])  # the rows' own codes
        np.testing.assert_array_equal(taken.offsets, np.arange(len(rows) + 1) if v.single else v.take(rows).offsets)
    elif not v.single:
        np.testing.assert_allclose(taken.scaled(), v.take(rows).vectors, rtol=1e-6, atol=1e-6)
    decoded = codec.decode(np.concatenate(v.segments))
    for q in data.queries:
        want = []
        for r in rows.tolist():
            d = decoded[v.offsets[r] : v.offsets[r + 1]]
            if mode == "maxsim":
                want.append((q.tokens @ d.T).max(axis=1).sum())
            elif mode == "first-m" or mode == "pooled":
                want.append((d @ q.pooled).max())
            else:  # softmax-centroid
                s = d @ q.pooled
                a = np.exp(s - s.max())
                want.append((a * s).sum() / a.sum())
        np.testing.assert_allclose(part.rescore(mode, q, rows), want, rtol=1e-5, atol=1e-5)


def test_scan_decodes_every_block_into_one_buffer(data):
    codec = codec_for("float16", data)
    v = stored(data.tokens, data.lengths, codec)
    whole = codec.decode(np.concatenate(v.segments))
    seen, buffers = 0, set()
    for start, block in v.scan(100):
        assert start == seen
        np.testing.assert_array_equal(block.vectors, whole[v.offsets[start] : v.offsets[start + len(block)]])
        assert len(block.vectors) <= 100 or len(block) == 1  # a longer passage alone
        buffers.add(block.vectors.__array_interface__["data"][0])
        seen += len(block)
    assert seen == PASSAGES and len(buffers) == 1
    np.testing.assert_array_equal(v.decode_range(5, 700), whole[5:700])  # across segments


def test_query_batch_split_keeps_queries_whole(data):
    batch = QueryBatch.of("maxsim", data.queries)
    parts = batch.split(10)
    assert sum(len(p) for p in parts) == len(data.queries)
    assert all(p.width <= 10 or len(p) == 1 for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.vectors for p in parts]), batch.vectors)


def test_top_documents_looks_at_a_prefix_only_when_it_is_enough():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 2000))
        scores = np.round(rng.standard_normal(n), int(rng.integers(0, 3))).astype(np.float32)  # many ties
        scores[rng.random(n) < 0.1] = -np.inf
        doc_ids = [f"d{x}" for x in rng.integers(0, int(rng.integers(1, n + 1)), n)]
        k = int(rng.integers(1, 40))
        order = np.argsort(-scores, kind="stable")
        head = best_first(scores, min(n, k))
        np.testing.assert_array_equal(head, order[: len(head)])
        want, seen = [], set()
        for i in order:
            if doc_ids[i] not in seen:
                seen.add(doc_ids[i])
                want.append(doc_ids[i])
            if len(want) == k:
                break
        assert top_documents(scores, doc_ids, np.zeros(n, np.int32), k).doc_ids == want


# ---- the searcher: search_encoded_batch == search_encoded, one query at a time ----------------


def searcher_over(parts: list[Partition]):
    """The query plan over in-memory partitions (no index on disk)."""
    from mvr.pipeline.retrieval.searcher import PartitionSearch

    return PartitionSearch(parts)


@pytest.mark.parametrize("mode", MODES)
def test_searcher_batch_equals_search_encoded(data, mode):
    from mvr.pipeline.retrieval.request import Restriction

    codec = codec_for("residual-2", data)
    s = searcher_over([partition(mode, data, codec, live=True)])
    rng = np.random.default_rng(2)
    for restriction in (None, Restriction(np.sort(rng.choice(PASSAGES, 30, replace=False))), Restriction(np.arange(0, PASSAGES, 2))):
        batched = s.search_batch(data.queries, K, mode, None, restriction, [1.0 + i for i in range(len(data.queries))])
        for i, (q, got) in enumerate(zip(data.queries, batched)):
            want = run_trips(s.plan.search(q, K, mode, None, restriction, 1.0 + i), partial(local_trip, s.hosts))
            assert (got.query, got.mode, got.path, got.candidates, got.allowed_passages) == (
                want.query,
                want.mode,
                want.path,
                want.candidates,
                want.allowed_passages,
            )
            assert got.ranked.doc_ids == want.ranked.doc_ids
            np.testing.assert_allclose(got.ranked.scores, want.ranked.scores, rtol=1e-5, atol=1e-6)
            assert got.timings_ms["encode"] == 1.0 + i and got.timings_ms["total"] >= got.timings_ms["rescore"]


def test_searcher_batch_of_ann_partitions_answers_one_query_at_a_time(data):
    packed = Packed(data.tokens, np.r_[0, np.cumsum(data.lengths)].astype(np.int64))
    ann = make_index("faiss-ivfpq", DIM, len(data.tokens), brute_force=True)
    ann.train(data.tokens)
    ann.add(data.tokens)
    s = searcher_over([Partition("tokens", packed, data.doc_ids, np.zeros(PASSAGES), ann)])
    batched = s.search_batch(data.queries, K, "maxsim")
    for q, got in zip(data.queries, batched):
        want = s.search(q, K, "maxsim")
        assert got.path == "ann" and got.ranked.doc_ids == want.ranked.doc_ids and got.candidates == want.candidates
    with pytest.raises(ValueError, match="encode times"):
        s.search_batch(data.queries, K, "maxsim", encode_ms=[0.0])
