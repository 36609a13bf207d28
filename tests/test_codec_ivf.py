"""The codec-ivf first stage (``operators/ann/codec_ivf.py``): lists read from the codes of a
real residual codec, whole lists answered in order of the query's centroid scores, 4 bytes a
vector on disk, growth and emptying, the k-means cells of a codec without centroids, and the
partition's rescoring of its coarse hits (IVF-flat over the decoded codes) against numpy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mvr.operators import codecs
from mvr.operators.ann import list_probe
from mvr.operators.ann.codec_ivf import LISTS_FILE, CodecIVFIndex
from mvr.operators.ann.factory import load_index, make_index
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.stored_vectors import StoredVectors
from test_ann_backends import clustered

N, DIM = 6_000, 64


@pytest.fixture(scope="module")
def coded():
    """Clustered unit vectors, a ``pca-32+residual-2`` codec trained on them (1,024
    centroids), their codes, and queries."""
    x, q = clustered(N, DIM, seed=1, nq=20)
    codec = codecs.train("pca-32+residual-2", x, seed=0)
    return x, q, codec, codec.encode(x)


def _filled(codec, codes, splits=(2_500,)) -> CodecIVFIndex:
    index = make_index("codec-ivf", codec.dim_out, len(codes))
    assert index.use_codec(codec) and index.takes_codes and index.is_trained
    for part in np.split(codes, list(splits)):
        index.add_codes(part)
    index.finalize()
    return index


def test_lists_are_the_codes_centroid_ids(coded):
    x, _, codec, codes = coded
    index = _filled(codec, codes)
    centroids = codec.coarse_centroids()
    assert index.cells == len(centroids) == 1024 and index.ntotal == N
    # independent: the nearest centroid (L2) of each PCA-projected vector, as the codec encodes
    projected = codec.project(x)
    distances = ((projected[:, None, :] - centroids[None]) ** 2).sum(-1)
    nearest = np.argmin(distances, axis=1)
    two = np.sort(distances, axis=1)[:, :2]
    clear = two[:, 1] - two[:, 0] > 1e-4  # not a tie that another BLAS may break the other way
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(codec.coarse_ids(codes)[clear], nearest[clear])
    assert (codec.coarse_ids(codes) == nearest).mean() > 0.999  # and the ties too, all but 0.1%: the bound before
    cells = codec.coarse_ids(codes)
    for c in np.unique(cells)[:50]:
        lo, hi = index._offsets[c], index._offsets[c + 1]
        assert np.array_equal(np.asarray(index._lists[lo:hi]), np.flatnonzero(cells == c))


@pytest.mark.parametrize("bfloat16", [True, False], ids=["bfloat16-product", "float32-product"])
def test_search_answers_whole_lists_best_centroid_first(coded, monkeypatch, bfloat16):
    """The lists chosen by exact float32 scores, whether the probe's product is bfloat16 (a
    shortlist of 32 of the 1,024 cells rescored exactly) or float32 (the CPU has no bfloat16)."""
    monkeypatch.setattr(list_probe, "bfloat16_native", lambda: bfloat16)
    _, q, codec, codes = coded
    index = _filled(codec, codes)
    cells, centroids = codec.coarse_ids(codes), index.centroids
    np.testing.assert_allclose(centroids, codec.coarse_centroids(), atol=1e-3)  # the codebook, kept as float16
    pq = codec.project(q)
    for nprobe, k in ((1, 1), (3, 1), (1, 40)):
        ids, scores = index.search(pq, k, nprobe=nprobe)
        assert ids.shape[1] >= k
        for i in range(len(pq)):
            sims = pq[i] @ centroids.T
            order = np.argsort(-sims, kind="stable")
            sizes = np.bincount(cells, minlength=len(centroids))[order]
            visit = (np.arange(len(order)) < nprobe) | (np.cumsum(sizes) - sizes < k)
            expected = np.concatenate([np.flatnonzero(cells == c) for c in order[visit]])
            got = ids[i][ids[i] >= 0]
            assert np.array_equal(got, expected)
            np.testing.assert_allclose(scores[i][ids[i] >= 0], sims[cells[got]], rtol=1e-5, atol=1e-6)
            assert np.isneginf(scores[i][ids[i] < 0]).all()
    assert index._product is not None and index._product.exact is not bfloat16  # the product this case is about


def test_files_hold_four_bytes_a_vector_and_round_trip(coded, tmp_path):
    _, q, codec, codes = coded
    index = _filled(codec, codes)
    index.save(str(tmp_path))
    assert os.path.getsize(tmp_path / LISTS_FILE) == 128 + 4 * N  # npy header + uint32 ids
    loaded = load_index(str(tmp_path))
    assert isinstance(loaded._lists, np.memmap)  # mapped, not read
    pq = codec.project(q)
    for a, b in zip(index.search(pq, 30), loaded.search(pq, 30)):
        np.testing.assert_array_equal(a, b)
    # grown from codes after opening (a live update), emptied (compaction): the same lists
    assert loaded.use_codec(codec) and loaded.takes_codes
    loaded.add_codes(codes[:100])
    loaded.finalize()
    grown = _filled(codec, np.concatenate([codes, codes[:100]]))
    np.testing.assert_array_equal(np.asarray(loaded._lists), np.asarray(grown._lists))
    empty = loaded.emptied()
    assert empty.ntotal == 0 and empty.takes_codes and empty.cells == 1024


def test_codec_without_centroids_trains_kmeans_cells(coded):
    x, q, _, _ = coded
    index = make_index("codec-ivf", DIM, N)
    assert not index.use_codec(codecs.train("float16", x)) and not index.is_trained
    index.train(x)
    index.add(x)
    assert index.cells == 128 and index.default_nprobe == 8  # default_nlist(6000): 6000/39 → 128; 1/64, at least 8
    nearest = np.argmin(((x[:, None, :] - index.centroids[None]) ** 2).sum(-1), axis=1)
    ids, _ = index.search(index.centroids[nearest[:5]], 1, nprobe=1)
    for i, c in enumerate(nearest[:5]):
        assert np.array_equal(np.sort(ids[i][ids[i] >= 0]), np.flatnonzero(nearest == c))


def test_partition_rescores_coarse_hits_with_the_decoded_vectors(coded):
    _, q, codec, codes = coded
    index = _filled(codec, codes)
    offsets = np.arange(0, N + 1, 3, dtype=np.int64)  # passages of 3 vectors
    vectors = StoredVectors([codes], offsets, codec)
    part = Partition("tokens", vectors, [f"d{i}" for i in range(N // 3)], np.zeros(N // 3, np.int32), index)
    pq = codec.project(q)
    hits = part.hits(pq, 5, {"nprobe": 2})
    decoded = codec.decode(codes)
    ids, _ = index.search(pq, 5, nprobe=2)
    for i in range(len(pq)):
        found = ids[i][ids[i] >= 0]
        exact = decoded[found] @ pq[i]
        best = np.sort(exact)[::-1][:5]
        mine = np.sort(hits.scores[hits.query_vector == i])[::-1]
        np.testing.assert_allclose(mine, best, rtol=1e-5, atol=1e-5)
        assert set(hits.rows[hits.query_vector == i]) <= set(found // 3)


def test_bad_use_is_refused(tmp_path):
    index = make_index("codec-ivf", 8, 100)
    with pytest.raises(ValueError, match="add_codes needs cells"):
        index.add_codes(np.zeros((2, 4), np.uint8))
    with pytest.raises(ValueError, match="without cells cannot be saved"):
        index.save(str(tmp_path))
    with pytest.raises(ValueError, match="unknown codec-ivf parameter"):
        make_index("codec-ivf", 8, 100, m=4)
    with pytest.raises(ValueError, match="nprobe must be a positive integer"):
        make_index("codec-ivf", 8, 100, nprobe=0)


def test_lists_are_built_by_a_counting_sort_in_blocks(coded, monkeypatch):
    """``finalize`` sorts the ids by cell a block at a time (blocks of 997 here, not one of 4M),
    holding each pending cell in 2 bytes: every list is exactly the ids whose code names its
    cell, ascending, after a first fill and after growing."""
    from mvr.operators.ann import codec_ivf

    _, _, codec, codes = coded
    monkeypatch.setattr(codec_ivf, "SCATTER_ROWS", 997)
    index = make_index("codec-ivf", codec.dim_out, len(codes))
    index.use_codec(codec)
    index.add_codes(codes[:4_000])
    assert [p.dtype for p in index._pending] == [np.uint16]
    index.finalize()
    index.add_codes(codes[4_000:])
    index.finalize()  # grows: the first fill's lists and the new ids sorted together
    cells = codec.coarse_ids(codes)
    np.testing.assert_array_equal(index._offsets, np.concatenate([[0], np.cumsum(np.bincount(cells, minlength=index.cells))]))
    np.testing.assert_array_equal(np.asarray(index._lists), np.argsort(cells, kind="stable"))  # by cell, ids ascending in each
