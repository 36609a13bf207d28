"""First-m vectors as a refinement of their token codes: one copy of the first m tokens.

A passage's first m token vectors are already stored as token codes (``pca-192+residual-1``
by default: 26 B a vector), which alone cost first-m 0.013–0.033 nDCG@10 (docs/codecs.md).
Instead of a second code of each vector, the first m positions keep their token codes and
add only what those miss: the anchor a = α·lift(token decode) (lift: the token codec's PCA
matrix transposed, back to the full dimension; α a least-squares scale fitted on the sample)
and a FAISS product code of the residual r = x − a (``refine-M``: M bytes, and 2 for the
float16 1 / |a + r̂|). Decoded: (a + r̂) / |a + r̂|.

- ``Refinement`` (family ``refine``, the ``first_m`` codec group's file): the product
  quantizer of r and α. Its codes (M PQ bytes and the vector's float16 inverse norm) alone
  are no vector.
- ``Refined``: a token codec and a refinement, a codec whose code is the token code
  followed by the refinement's (``anchor.bytes_per_vector + M`` bytes): what the first-m
  reader hands the scorers (``StoredVectors`` joined with the token codes,
  ``operators/retrieval/stored_vectors.py``). Built when the files are loaded, never stored.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mvr.operators.codecs.base import Codec, _f32
from mvr.operators.codecs.quantizers import PQ, Composed
from mvr.operators.kernels import matmul


def lift_matrix(anchor: Codec) -> Optional[np.ndarray]:
    """(dim_out, dim_in) float32: the anchor's PCA matrix, whose product with its decoded
    vectors is their lift back to the input dimension; None when the anchor has no transform
    (its decodes are at the input dimension already)."""
    if isinstance(anchor, Composed):
        return getattr(anchor.transform, "matrix", None)
    return None


def lifted(anchor: Codec, codes: np.ndarray, lift: Optional[np.ndarray]) -> np.ndarray:
    """(n, anchor.dim_in) float32: the anchor's codes decoded (unit length where the anchor's
    are) and lifted to its input dimension."""
    decoded = anchor.decode(codes)
    return matmul(decoded, lift) if lift is not None else decoded


def anchor_scale(anchor: Codec, x: np.ndarray) -> tuple[float, np.ndarray]:
    """(α, a): the least-squares scale α = <x, a> / <a, a> of the lifted decodes a of
    ``x`` ((n, dim) float32 vectors) under ``anchor``, and a itself ((n, dim) float32)."""
    a = lifted(anchor, anchor.encode(x), lift_matrix(anchor))
    alpha = float(np.einsum("ij,ij->", x, a, dtype=np.float64) / max(float(np.einsum("ij,ij->", a, a, dtype=np.float64)), 1e-12))
    return alpha, a


class Refinement(Codec):
    """``refine-M``: a product quantizer (``pq``: M sub-vectors, 8 bits each) of the residual
    a token codec leaves, r = x − α·lift(decode(encode(x))), and the scale α. Trained by
    ``fit`` on the token codec's own sample, given that codec (``anchor``). Its stored code a
    vector is the M PQ bytes and the float16 1 / |α·lift(â) + r̂| (``bytes_per_vector`` = M +
    2), made and read by ``Refined``: on its own it encodes and decodes nothing."""

    family = "refine"
    example_arg = 96
    # the inverse norm after the PQ bytes, a float16: relative error ≤ 2^-11, so a decoded
    # vector is unit length to 5e-4, far inside the PQ's error (a code's squared error ~0.03)
    NORM_BYTES = 2
    NORM_DTYPE = "<f2"

    def __init__(self, m: int, centroids: np.ndarray, alpha: float) -> None:
        self.pq = PQ(m, centroids, normalize=False)
        self.m = m
        self.alpha = float(alpha)
        self.dim_in = self.dim_out = self.pq.dim_in
        self.bytes_per_vector = m + self.NORM_BYTES

    @property
    def name(self) -> str:
        return f"refine-{self.m}"

    @staticmethod
    def spec_bytes(arg: Optional[int], dim: int, **_: Any) -> int:
        assert arg is not None  # refine-M
        return int(arg) + Refinement.NORM_BYTES

    @classmethod
    def fit(cls, arg: Optional[int], sample: np.ndarray, seed: int = 0, anchor: Optional[Codec] = None, niter: Optional[int] = None, **_: Any) -> "Refinement":
        """Train on ``sample`` ((n, dim) unit vectors, n ≥ 256) given the trained token codec
        ``anchor``: α = <x, a> / <a, a> over the sample (a: its lifted decodes), then the
        product quantizer of x − α·a (FAISS, seeded)."""
        if anchor is None:
            raise ValueError(f"refine-{arg} refines a token codec's codes: train it with anchor=<the token codec> (the first_m codec group's)")
        x = _f32(sample, anchor.dim_in, f"refine-{arg} fit")
        alpha, a = anchor_scale(anchor, x)
        pq = PQ.fit(arg, x - np.float32(alpha) * a, seed=seed, normalize=False, niter=niter)
        return cls(pq.m, pq.centroids, alpha)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        raise TypeError(f"{self.name} codes what a token code misses: encode with Refined (the token codec and this)")

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        raise TypeError(f"{self.name} codes alone are no vectors: decode with Refined (the token codec and this)")

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"m": self.m, "alpha": self.alpha}, {"centroids": self.pq.centroids}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Refinement":
        return cls(int(params["m"]), arrays["centroids"], float(params["alpha"]))


class Refined(Codec):
    """A token codec (``anchor``) and its ``refinement``: a code is the anchor's code, the
    refinement's PQ bytes and a float16 1 / |v| (``anchor.bytes_per_vector +
    refinement.bytes_per_vector`` bytes); the vector is v = α·lift(â) + r̂ rescaled to unit
    length, at the anchor's input dimension, and queries are scored as they are (``project``:
    a float32 copy; the pooled query vector at the model's dimension).

    ``similarities`` scores from the codes (``scores_codes``, which ``JoinedVectors`` also
    scans in): q · v = (α·(Mq)·â + q·r̂) / |v|,
    the first term the anchor's own scoring of its codes against the query lifted down
    (Mq: the PCA matrix times q, no rescaling), the second a sum of M table lookups (q's
    product with each sub-centroid, ``pq_scoring``), the norm stored: no (candidates, dim)
    matrix and no lift of each candidate."""

    family = "refine"
    normalize = True
    scores_codes = True

    def __init__(self, anchor: Codec, refinement: Refinement) -> None:
        if refinement.dim_in != anchor.dim_in:
            raise ValueError(f"{refinement.name} refines {refinement.dim_in}-dimensional vectors, {anchor.name} codes {anchor.dim_in}")
        self.anchor, self.refinement = anchor, refinement
        self.lift = lift_matrix(anchor)
        self.dim_in = self.dim_out = anchor.dim_in
        self.split = anchor.bytes_per_vector
        self.bytes_per_vector = anchor.bytes_per_vector + refinement.bytes_per_vector

    @property
    def name(self) -> str:
        return f"{self.anchor.name}+{self.refinement.name}"

    def _anchors(self, anchor_codes: np.ndarray) -> np.ndarray:
        return np.float32(self.refinement.alpha) * lifted(self.anchor, anchor_codes, self.lift)

    def refine(self, x: np.ndarray, anchor_codes: np.ndarray) -> np.ndarray:
        """(n, refinement.bytes_per_vector) uint8: the refinement codes (PQ bytes, float16
        1 / |v|) of vectors ``x`` (n, dim_in) whose token codes ``anchor_codes`` are already
        made (the encode stage's)."""
        x = _f32(x, self.dim_in, f"{self.name} refine")
        a = self._anchors(anchor_codes)
        pq_codes = self.refinement.pq.encode(x - a)
        v = a + self.refinement.pq.decode(pq_codes)
        inv = (np.float32(1.0) / np.maximum(np.linalg.norm(v, axis=1), np.float32(1e-12))).astype(self.refinement.NORM_DTYPE)
        return np.concatenate([pq_codes, inv[:, None].view(np.uint8)], axis=1)

    def _parts(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(anchor codes, PQ codes, (n,) float32 1 / |v|: the stored float16) of joined codes."""
        m = self.refinement.m
        inv = np.ascontiguousarray(codes[:, self.split + m :]).view(self.refinement.NORM_DTYPE).reshape(-1).astype(np.float32)
        return codes[:, : self.split], np.ascontiguousarray(codes[:, self.split : self.split + m]), inv

    def _encode(self, x: np.ndarray) -> np.ndarray:
        anchor_codes = self.anchor.encode(x)
        return np.concatenate([anchor_codes, self.refine(x, anchor_codes)], axis=1)

    def decode_scaled(self, codes: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        anchor_codes, pq_codes, inv = self._parts(self._check_codes(codes))
        v = self._anchors(anchor_codes)
        v += self.refinement.pq.decode(pq_codes)
        return v, inv

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        v, inv = self.decode_scaled(codes)
        assert inv is not None
        v *= inv[:, None]
        return v

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(m, n) float32 q · decode(code) without lifting any code to the full dimension
        (class docstring): for up to ``residual_scoring.MAX_QUERY_VECTORS`` query vectors
        (a query's) from the codes, the anchor's kernel and the product code's table
        lookups; for more (a batch of queries scanning a partition) the anchor's codes
        decoded at its own dimension and the residual's at the full one, each multiplied
        with the queries (the lift of every code, a 192 × 384 product, is what decoding
        costs). Both equal decode-then-score up to float rounding."""
        from mvr.operators.codecs import pq_scoring, residual_scoring  # numba: loaded by the first scoring

        q = _f32(query_vectors, self.dim_in, f"{self.name} similarities")
        anchor_codes, pq_codes, inv = self._parts(self._check_codes(codes))
        lowered = np.ascontiguousarray(matmul(q, self.lift.T) if self.lift is not None else q, dtype=np.float32)
        if len(q) <= residual_scoring.MAX_QUERY_VECTORS:
            inner = self.anchor.inner if isinstance(self.anchor, Composed) else self.anchor
            sims = inner.similarities(lowered, np.ascontiguousarray(anchor_codes))
            sims *= np.float32(self.refinement.alpha)
            sims += pq_scoring.pq_similarities(q, pq_codes, self.refinement.pq.centroids)
        else:
            anchors = self.anchor.decode(np.ascontiguousarray(anchor_codes))  # (n, anchor dim), unit where the anchor's are
            sims = matmul(lowered, anchors.T)
            sims *= np.float32(self.refinement.alpha)
            sims += matmul(q, self.refinement.pq.decode(pq_codes).T)
        sims *= inv[None, :]
        return sims

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:  # its two codecs have files of their own
        raise TypeError(f"{self.name} is stored as its two codecs (the tokens and first_m groups' files), not as one")

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Refined":
        raise TypeError("a refined codec is built from the token codec and its refinement (storage.codec_file.codec_of)")
