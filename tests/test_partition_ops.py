"""Partition, candidate selection and merging on small random data (milliseconds, no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from helpers import unit
from mvr.operators.ann.factory import make_index
from mvr.operators.packed import Packed
from mvr.operators.retrieval.candidates import FirstStage, candidates, first_trip, local_share, select
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.ranking import merge, top_documents
from mvr.operators.retrieval.scoring import maxsim

DIM = 16


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, size=300)
    arrays = [unit(rng.standard_normal((n, DIM))) for n in lengths]
    doc_ids = [f"d{i // 2}" for i in range(300)]  # two passages a document
    return arrays, doc_ids, rng


def partitions(arrays, doc_ids, bounds):
    """Partitions over passage ranges, each with a brute-force (exact) inner-product index."""
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        packed = Packed.from_list(arrays[lo:hi], DIM)
        ann = make_index("faiss-ivfpq", DIM, len(packed.vectors), brute_force=True)
        ann.train(packed.vectors)
        ann.add(packed.vectors)
        out.append(Partition("tokens", packed, doc_ids[lo:hi], np.arange(hi - lo) % 2, ann))
    return out


def test_take_gathers_passages_in_order(corpus):
    arrays, _, _ = corpus
    p = Packed.from_list(arrays, DIM)
    rows = np.array([5, 0, 299, 5])
    sub = p.take(rows, np.float32)
    assert len(sub) == 4 and np.array_equal(sub.lengths, p.lengths[rows])
    assert all(np.array_equal(sub[i], arrays[r]) for i, r in enumerate(rows))


def test_merge_keeps_each_documents_best_score():
    a = top_documents(np.array([0.9, 0.5, 0.1]), ["x", "y", "z"], np.zeros(3), 3)
    b = top_documents(np.array([0.7, 0.95]), ["y", "w"], np.zeros(2), 2)
    m = merge([a, b], 3)
    assert m.doc_ids == ["w", "x", "y"] and np.allclose(m.scores, [0.95, 0.9, 0.7])


def test_candidates_and_ranking_do_not_depend_on_partitioning(corpus):
    arrays, doc_ids, rng = corpus
    q = SimpleNamespace(tokens=unit(rng.standard_normal((4, DIM))), pooled=None)
    fs = FirstStage(k_prime=20, candidate_cap=40)
    answers = []
    for bounds in ([0, 300], [0, 70, 71, 300], [0, 100, 200, 300]):
        parts = partitions(arrays, doc_ids, bounds)
        rows, _ = candidates(lambda kp, parts=parts: [p.hits(q.tokens, kp) for p in parts], fs, 10, 300, sum(p.n_vectors for p in parts))
        chosen = sorted(lo + r for lo, rs in zip(bounds, rows) for r in rs)
        ranked = merge([p.rank("maxsim", q, r, 10).ranked for p, r in zip(parts, rows)], 10)
        answers.append((chosen, ranked.doc_ids, ranked.scores))
    for chosen, ids, scores in answers[1:]:
        assert chosen == answers[0][0] and ids == answers[0][1] and np.allclose(scores, answers[0][2])
    # exhaustive first stage: the same top-10 documents as scoring every passage
    parts = partitions(arrays, doc_ids, [0, 100, 200, 300])
    everything = FirstStage(k_prime=10_000, candidate_cap=10_000)
    rows, _ = candidates(lambda kp, parts=parts: [p.hits(q.tokens, kp) for p in parts], everything, 10, 300, sum(p.n_vectors for p in parts))
    assert sum(map(len, rows)) == 300
    ranked = merge([p.rank("maxsim", q, r, 10).ranked for p, r in zip(parts, rows)], 10)
    s = maxsim(q.tokens, Packed.from_list(arrays, DIM))
    assert ranked.doc_ids == top_documents(s, doc_ids, np.zeros(300), 10).doc_ids


@pytest.mark.parametrize("bounds", [[0, 300], [0, 150, 300], [0, 70, 71, 300], [0, 60, 120, 180, 240, 300]])
def test_one_trip_ranks_exactly_as_two_trips(corpus, bounds):
    """``first_trip``: each partition's hits plus its likely share of the candidates scored
    ahead of the merge. Where the merge's candidates of a partition were all scored, the
    result is ``rank``'s on them (same documents, same scores); where some were not,
    ``Scored.result`` says so (None) instead of answering from fewer passages."""
    arrays, doc_ids, rng = corpus
    parts = partitions(arrays, doc_ids, bounds)
    fs = FirstStage(k_prime=20, candidate_cap=40)
    covered = asked_again = 0
    for seed in range(20):
        q = SimpleNamespace(tokens=unit(np.random.default_rng(seed).standard_normal((4, DIM))), pooled=None)
        kp, cap = fs.budget(10)
        trips = [first_trip(p, "maxsim", q, kp, {}, local_share(kp, cap, len(p) / 300)) for p in parts]
        rows, n_hit = select([h for h, _ in trips], kp, cap)
        assert n_hit >= 10  # the first round was enough: no k' growth to discard the scores
        for p, (_, scored), r in zip(parts, trips, rows):
            two_trips = p.rank("maxsim", q, r, 10)
            one = scored.result(r, 10)
            if one is None:
                asked_again += 1
                assert not np.isin(r, scored.rows).all()
                continue
            covered += 1
            assert one.ranked.doc_ids == two_trips.ranked.doc_ids and one.candidates == two_trips.candidates == len(r)
            np.testing.assert_allclose(one.ranked.scores, two_trips.ranked.scores, rtol=1e-6)
            np.testing.assert_array_equal(one.ranked.passage_idx, two_trips.ranked.passage_idx)
    print(f"\nP={len(parts)}: {covered} partition answers from the first trip, {asked_again} asked again")
    assert covered >= 0.8 * (covered + asked_again)
    if len(parts) == 1:  # its share is everything: never asked again
        assert asked_again == 0
    # a share too small to hold the merge's candidates is caught, never ranked from fewer passages
    q = SimpleNamespace(tokens=unit(rng.standard_normal((4, DIM))), pooled=None)
    trips = [first_trip(p, "maxsim", q, 20, {}, (1, 1)) for p in parts]
    rows, _ = select([h for h, _ in trips], 20, 40)
    assert all(sc.result(r, 10) is None for (_, sc), r in zip(trips, rows) if len(r) > 1)


def test_k_prime_grows_until_k_passages_are_hit(corpus):
    arrays, doc_ids, rng = corpus
    parts = partitions(arrays, doc_ids, [0, 150, 300])
    qv = unit(rng.standard_normal((1, DIM)))
    rows, k_prime = candidates(lambda kp: [p.hits(qv, kp) for p in parts], FirstStage(k_prime=1, candidate_cap=1000), 50, 300, 2000)
    assert sum(len(r) for r in rows) >= 50 and k_prime > 1


def test_budget_follows_k_beyond_k_ref(corpus):
    fs = FirstStage(k_prime=32, candidate_cap=1024)
    assert fs.budget(10) == fs.budget(5) == (32, 1024)  # a top-10 search is as configured
    assert fs.budget(100) == (320, 1024) and fs.budget(1000) == (3200, 4000)
    assert FirstStage(k_prime=32, candidate_cap=1024, k_ref=1000).budget(100) == (32, 1024)  # scaling off
    # the first round asks the scaled k'; a top-100 search ranks more candidates than a top-10
    arrays, doc_ids, rng = corpus
    parts = partitions(arrays, doc_ids, [0, 150, 300])
    qv = unit(rng.standard_normal((2, DIM)))
    asked: list[int] = []

    def gather(kp: int):
        asked.append(kp)
        return [p.hits(qv, kp) for p in parts]

    few = FirstStage(k_prime=4, candidate_cap=1000)
    rows10, _ = candidates(gather, few, 10, 300, 2000)
    first10, asked[:] = asked[0], []
    rows100, _ = candidates(gather, few, 100, 300, 2000)
    assert first10 == 4 and asked[0] == 40
    assert sum(map(len, rows100)) >= 100 > sum(map(len, rows10))


def test_candidate_cap_keeps_the_best_estimates():
    from mvr.operators.retrieval.partition import Hits

    hits = [Hits(np.array([0, 0, 0]), np.array([0, 1, 2]), np.array([0.9, 0.2, 0.5], np.float32))]
    rows, n_hit = select(hits, k_prime=10, cap=2)
    assert n_hit == 3 and rows[0].tolist() == [0, 2]


def test_exact_partition_ranks_every_passage(corpus):
    arrays, doc_ids, rng = corpus
    part = Partition("tokens", Packed.from_list(arrays, DIM), doc_ids, np.zeros(300))
    q = SimpleNamespace(tokens=unit(rng.standard_normal((3, DIM))), pooled=None)
    assert part.exact and part.rank("maxsim", q, None, 5).candidates == 300
    with pytest.raises(ValueError, match="no first stage"):
        part.hits(q.tokens, 5)
    with pytest.raises(ValueError, match="holds tokens"):
        part.rank("pooled", q, None, 5)


def test_stored_rows_gather_across_segments_in_any_order():
    from mvr.operators.retrieval.stored_vectors import StoredVectors

    rng = np.random.default_rng(1)
    whole = rng.integers(0, 255, (50, 18), dtype=np.uint8)
    v = StoredVectors([whole[:7], whole[7:30], whole[30:]], np.array([0, 10, 25, 50]))
    for rows in (np.arange(50), np.array([3, 6, 7, 29, 30, 49]), np.array([49, 0, 31, 8, 8, 2]), np.zeros(0, np.int64)):
        assert np.array_equal(v.raw(rows), whole[rows])
    one = StoredVectors([whole], np.array([0, 50]))
    assert np.array_equal(one.raw(np.array([5, 1, 49])), whole[[5, 1, 49]])
    for bad in (np.array([50]), np.array([-1, 3])):
        with pytest.raises(IndexError, match="out of range"):
            v.raw(bad)
