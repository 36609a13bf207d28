"""Compressors and exact scorers against straightforward per-passage reference code."""

import numpy as np
import pytest

from mvr.operators.encode.compress import Compressor, kmeans_centroids, projection_matrix
from mvr.operators.packed import Packed
from mvr.operators.retrieval import scoring


def _reference_kmeans(x, k, iterations):
    c = x[np.floor(np.linspace(0, len(x) - 1, k)).astype(int)].copy()
    for _ in range(iterations):
        a = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        for j in range(k):
            if (a == j).any():
                c[j] = x[a == j].mean(0)
    return c


def _passages(seed=0, n=12, dim=16):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((int(rng.integers(1, 40)), dim)).astype(np.float32) for _ in range(n)]


def test_batched_kmeans_equals_per_passage_loop():
    arrays = _passages()
    got = kmeans_centroids(arrays, k=4, iterations=10)
    for a, c in zip(arrays, got):
        expected = a if len(a) <= 4 else _reference_kmeans(a, 4, 10)
        np.testing.assert_allclose(c, expected, atol=1e-4)


def test_compressor_representations():
    arrays = _passages(1)
    reps = Compressor(first_m=3, centroids=2)(arrays, [np.arange(len(a)) % 2 == 0 for a in arrays])
    for a, tok, pool, fm in zip(arrays, reps["tokens"], reps["pooled"], reps["first_m"]):
        normed = a / np.linalg.norm(a, axis=1, keepdims=True)
        np.testing.assert_allclose(tok, normed[::2], atol=1e-6)
        np.testing.assert_allclose(pool, a.mean(0) / np.linalg.norm(a.mean(0)), atol=1e-6)
        np.testing.assert_allclose(fm, normed[:3], atol=1e-6)
    for a, c in zip(arrays, reps["centroids"]):  # the default space: k-means over unit vectors, unit centroids
        normed = a / np.linalg.norm(a, axis=1, keepdims=True)
        expected = normed if len(a) <= 2 else _reference_kmeans(normed, 2, 10)
        np.testing.assert_allclose(c, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-4)
    raw = Compressor(first_m=3, centroids=2, centroid_space="raw")(arrays)["centroids"]
    for a, c in zip(arrays, raw):  # the paper's form: k-means over the raw vectors, centroids as they come
        np.testing.assert_allclose(c, a if len(a) <= 2 else _reference_kmeans(a, 2, 10), atol=1e-4)
    with pytest.raises(ValueError, match="unknown centroid space 'cosine'; choose one of unit, raw"):
        Compressor(centroid_space="cosine")
    p = projection_matrix(16, 8, seed=3)
    np.testing.assert_allclose(p.T @ p, np.eye(8), atol=1e-5)
    assert np.array_equal(p, projection_matrix(16, 8, seed=3))


def test_scorers_equal_naive_loops():
    docs = _passages(2)
    packed = Packed.from_list(docs, 16)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    qp = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(scoring.maxsim(q, packed), [(q @ d.T).max(1).sum() for d in docs], rtol=1e-5)
    np.testing.assert_allclose(scoring.first_m_max(qp, packed), [(d @ qp).max() for d in docs], rtol=1e-5)
    expected = []
    for d in docs:
        s = d @ qp
        a = np.exp(s - s.max())
        a /= a.sum()
        expected.append(qp @ (a @ d))
    np.testing.assert_allclose(scoring.softmax_centroid(qp, packed), expected, rtol=1e-4)
    assert len(packed) == len(docs) and np.array_equal(packed[3], docs[3])


def test_row_scale_travels_with_take_and_concat():
    """A Packed with ``row_scale`` (rows standing for ``vectors * row_scale``) keeps each
    row's factor through ``take``; ``concat`` applies the factors (its result has none)."""
    arrays = _passages(seed=4)
    p = Packed.from_list(arrays, 16)
    scale = np.random.default_rng(1).uniform(0.5, 2, len(p.vectors)).astype(np.float32)
    scaled = Packed(p.vectors, p.offsets, scale)
    picked = scaled.take(np.array([7, 2, 2]))
    want = Packed(scaled.scaled(), p.offsets).take(np.array([7, 2, 2]))
    np.testing.assert_allclose(picked.scaled(), want.vectors, rtol=1e-6)
    both = Packed.concat([scaled, p])
    assert both.row_scale is None
    np.testing.assert_allclose(both.vectors[: len(p.vectors)], p.vectors * scale[:, None], rtol=1e-6)
    q = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(scoring.maxsim(q, scaled), scoring.maxsim(q, Packed(scaled.scaled(), p.offsets)), rtol=1e-5)
