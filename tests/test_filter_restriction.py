"""The allowed-rows restriction on small random data (milliseconds, no Ray): global passage
numbers → a partition's rows, membership by rows or mask, ``Partition.hits`` dropping hits
outside the allowed rows before candidates are chosen, ``Partition.rank`` scoring allowed rows
only (gathered, or masked in place when most rows are allowed), candidate rounds under a
filter, and the query plan's three paths under a filter (``PartitionSearch``)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import unit
from mvr.operators.ann.factory import make_index
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.packed import Packed
from mvr.operators.retrieval.candidates import CandidateRounds, FirstStage
from mvr.operators.retrieval.partition import Partition, allowed_as_rows, allowed_rows, in_allowed
from mvr.pipeline.retrieval.request import Restriction
from mvr.pipeline.retrieval.searcher import PartitionSearch

DIM = 16


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(1)
    arrays = [unit(rng.standard_normal((int(n), DIM))) for n in rng.integers(1, 10, size=400)]
    doc_ids = [f"d{i // 2}" for i in range(400)]
    return arrays, doc_ids, rng


def make_partitions(arrays, doc_ids, bounds, ann=True, live=None):
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        packed = Packed.from_list(arrays[lo:hi], DIM)
        index = None
        if ann:
            index = make_index("faiss-ivfpq", DIM, len(packed.vectors), brute_force=True)
            index.train(packed.vectors)
            index.add(packed.vectors)
        out.append(Partition("tokens", packed, doc_ids[lo:hi], np.arange(hi - lo) % 2, index, None if live is None else live[lo:hi]))
    return out


def test_global_numbers_to_partition_rows_and_membership():
    passages = np.array([3, 9, 10, 15, 40, 41], np.int64)
    np.testing.assert_array_equal(allowed_rows(passages, 10, 30), [0, 5])
    np.testing.assert_array_equal(allowed_rows(passages, 0, 10), [3, 9])
    assert len(allowed_rows(passages, 42, 10)) == 0 and len(allowed_rows(np.zeros(0, np.int64), 0, 5)) == 0
    rows = np.array([0, 3, 4, 9, 9, 11])
    allowed = np.array([3, 9])
    mask = np.zeros(12, bool)
    mask[allowed] = True
    np.testing.assert_array_equal(in_allowed(rows, allowed), [False, True, False, True, True, False])
    np.testing.assert_array_equal(in_allowed(rows, mask), in_allowed(rows, allowed))
    np.testing.assert_array_equal(allowed_as_rows(mask), allowed)
    assert not in_allowed(rows, np.zeros(0, np.int64)).any()


def brute(arrays, doc_ids, q, allowed_rows_):
    ok = set(allowed_rows_.tolist())
    scores = np.array([float((q @ a.T).max(axis=1).sum()) if i in ok else -np.inf for i, a in enumerate(arrays)])  # MaxSim by hand
    best: dict[str, float] = {}
    for d, s in zip(doc_ids, scores):
        if np.isfinite(s):
            best[d] = max(best.get(d, -np.inf), s)
    return sorted(best.items(), key=lambda x: -x[1])


@pytest.mark.parametrize("share", [0.02, 0.6])  # gathered rows; masked in place
def test_rank_scores_allowed_rows_only(corpus, share):
    arrays, doc_ids, rng = corpus
    (part,) = make_partitions(arrays, doc_ids, [0, 400], ann=False)
    allowed = np.sort(rng.choice(400, int(400 * share), replace=False))
    q = unit(rng.standard_normal((5, DIM)))
    query = EncodedQuery("q", q, q[0])
    r = part.rank("maxsim", query, None, 10, allowed=allowed)
    want = brute(arrays, doc_ids, q, allowed)[:10]
    assert r.ranked.doc_ids == [d for d, _ in want]
    np.testing.assert_allclose(r.ranked.scores, [s for _, s in want], rtol=1e-5)
    assert r.candidates == len(allowed)
    # candidate rows outside the allowed set are dropped, the rest scored
    cand = np.arange(0, 400, 3)
    r2 = part.rank("maxsim", query, cand, 400, allowed=allowed)
    assert set(r2.ranked.doc_ids) == {doc_ids[i] for i in np.intersect1d(cand, allowed)}


def test_deleted_and_not_allowed_rows_both_stay_out(corpus):
    arrays, doc_ids, rng = corpus
    live = np.ones(400, bool)
    live[::2] = False
    (part,) = make_partitions(arrays, doc_ids, [0, 400], ann=False, live=live)
    allowed = np.arange(0, 400, 4)  # every allowed row is deleted
    q = unit(rng.standard_normal((5, DIM)))
    assert len(part.rank("maxsim", EncodedQuery("q", q, q[0]), None, 10, allowed=allowed).ranked) == 0
    assert len(part.rank("maxsim", EncodedQuery("q", q, q[0]), None, 10, allowed=np.arange(0, 400, 1)).ranked) == 10


def test_hits_outside_the_allowed_rows_are_dropped_before_candidates(corpus):
    arrays, doc_ids, rng = corpus
    (part,) = make_partitions(arrays, doc_ids, [0, 400])
    q = unit(rng.standard_normal((4, DIM)))
    allowed = np.sort(rng.choice(400, 40, replace=False))
    every = part.hits(q, 50)
    some = part.hits(q, 50, allowed=allowed)
    assert set(every.rows.tolist()) - set(allowed.tolist())  # the unfiltered stage does find others
    assert set(some.rows.tolist()) <= set(allowed.tolist()) and len(some) > 0
    keep = np.isin(every.rows, allowed)
    np.testing.assert_array_equal(some.rows, every.rows[keep])
    np.testing.assert_array_equal(some.query_vector, every.query_vector[keep])


def test_candidate_rounds_start_scaled_and_ask_for_allowed_passages():
    fs = FirstStage(k_prime=100, candidate_cap=1000)
    r = CandidateRounds(fs, 10, n_passages=10_000, n_vectors=500_000, allowed_passages=100)
    assert r.k_prime == 100 * 100 and r.need == 10
    r = CandidateRounds(fs, 10, n_passages=10_000, n_vectors=5_000, allowed_passages=5)
    assert r.k_prime == 5_000 and r.need == 5  # capped at every vector; only 5 passages exist
    assert CandidateRounds(fs, 10, 10_000, 500_000).k_prime == 100


@pytest.mark.parametrize("n_allowed, cap, path", [(15, 1000, "exact"), (300, 20, "ann"), (3, 2, "exact")])
def test_filtered_search_paths_return_k_allowed_documents(corpus, n_allowed, cap, path):
    arrays, doc_ids, rng = corpus
    parts = make_partitions(arrays, doc_ids, [0, 150, 400])
    allowed = np.sort(rng.choice(400, n_allowed, replace=False))
    q = unit(rng.standard_normal((5, DIM)))
    query = EncodedQuery("q", q, q[0])
    fs = FirstStage(k_prime=4, candidate_cap=cap)
    result = PartitionSearch(parts).search(query, 10, "maxsim", restriction=Restriction(allowed), first_stage=fs)
    ranked, got_path = result.ranked, result.path
    want = brute(arrays, doc_ids, q, allowed)
    assert set(ranked.doc_ids) <= {d for d, _ in want}
    assert len(ranked) == min(10, len(want))
    assert got_path == path
    if path == "exact":
        assert ranked.doc_ids == [d for d, _ in want[:10]]


def test_ann_path_falls_back_to_exact_when_the_probed_cells_hold_too_few_allowed_passages(corpus):
    """IVF with one probed cell a query vector: however far k' grows, the first stage only
    sees those cells' vectors, so a filter can leave fewer than k candidates; the allowed
    passages are then scored exactly and k documents come back."""
    arrays, doc_ids, rng = corpus
    packed = Packed.from_list(arrays, DIM)
    ivf = make_index("faiss-ivfpq", DIM, len(packed.vectors), brute_force=False, nlist=64, m=4, nbits=4, nprobe=1, training_sample_size=len(packed.vectors))
    ivf.train(packed.vectors)
    ivf.add(packed.vectors)
    part = Partition("tokens", packed, doc_ids, np.arange(400) % 2, ivf)
    q = unit(rng.standard_normal((1, DIM)))
    query = EncodedQuery("q", q, q[0])
    every = part.hits(q, part.n_vectors).rows
    allowed = np.setdiff1d(np.arange(400), every)[:60]  # none of them in the probed cell
    assert len(allowed) >= 20
    fs = FirstStage(k_prime=8, candidate_cap=10)
    result = PartitionSearch([part]).search(query, 10, "maxsim", restriction=Restriction(allowed), first_stage=fs)
    ranked, path = result.ranked, result.path
    assert path == "exact" and len(ranked) == 10
    assert ranked.doc_ids == [d for d, _ in brute(arrays, doc_ids, q, allowed)[:10]]
