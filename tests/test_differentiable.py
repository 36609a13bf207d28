"""The differentiable scores ``mvr train`` puts in its loss (``operators/retrieval/
differentiable.py``) equal what indexing and search compute for the same vectors
(``Compressor`` then ``scoring.score``), for every mode and both centroid spaces, with
passages shorter and longer than k and than m; and gradients reach the vectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mvr.operators.encode.compress import Compressor, l2_normalize, pad
from mvr.operators.encode.compress import pooled as np_pooled
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.packed import Packed
from mvr.operators.retrieval import differentiable
from mvr.operators.retrieval.scoring import MODE_VECTORS, MODES, score

DIM, K, M = 16, 4, 8


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    # clustered raw vectors of varied lengths (norms vary, as a model's raw vectors do)
    passages = [(rng.standard_normal((n, DIM)) * rng.uniform(0.5, 3.0, (n, 1))).astype(np.float32) for n in (2, 4, 5, 9, 17, 40, 3, 60)]
    queries = [rng.standard_normal((n, DIM)).astype(np.float32) for n in (5, 12, 32)]
    return passages, queries


@pytest.mark.parametrize("space", ["unit", "raw"])
def test_every_mode_equals_index_and_search(batch, space):
    passages, queries = batch
    stored = Compressor(first_m=M, centroids=K, kmeans_iterations=10, centroid_space=space)(passages)
    packed = {
        "tokens": Packed.from_list(stored["tokens"], DIM),
        "centroids": Packed.from_list(stored["centroids"], DIM),
        "first-m": Packed.from_list(stored["first_m"], DIM),
        "pooled": np.stack(stored["pooled"]),
    }
    encoded = [EncodedQuery("q", l2_normalize(q), np_pooled([q])[0]) for q in queries]
    p_raw, p_mask = pad(passages)
    q_raw, q_mask = pad(queries)
    p_rep = differentiable.represent(p_raw, p_mask, first_m=M, centroids=K, kmeans_iterations=10, centroid_space=space)
    q_rep = differentiable.represent(q_raw, q_mask, first_m=M)
    for mode in MODES:
        expected = np.stack([score(mode, q, packed[MODE_VECTORS[mode]]) for q in encoded])
        got = differentiable.score(mode, q_rep, p_rep).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{mode}, {space} centroids")


def test_gradients_reach_every_vector_a_mode_scores(batch):
    passages, queries = batch
    p_raw, p_mask = pad(passages)
    q_raw, q_mask = pad(queries)
    for mode in MODES:
        p = p_raw.clone().requires_grad_(True)
        q = q_raw.clone().requires_grad_(True)
        rep = differentiable.represent(p, p_mask, first_m=M, centroids=K)
        differentiable.score(mode, differentiable.represent(q, q_mask, first_m=M), rep).sum().backward()
        assert p.grad is not None and q.grad is not None
        assert float(q.grad.abs().sum()) > 0 and float(p.grad.abs().sum()) > 0, mode
        assert torch.isfinite(p.grad).all() and torch.isfinite(q.grad).all(), mode
        # padding gets no gradient
        assert float(p.grad[~p_mask].abs().sum()) == 0.0, mode


def test_unknown_mode_is_refused(batch):
    passages, queries = batch
    rep = differentiable.represent(*pad(passages))
    with pytest.raises(ValueError, match="unknown mode 'bm25'"):
        differentiable.score("bm25", rep, rep)
