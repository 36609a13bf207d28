"""FAISS product quantization (``pq-M``), the PCA transform (``pca-D``) and a transform
composed with a codec (``pca-D+C``)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Optional

import numpy as np

from mvr.operators.codecs.base import Codec, Transform, _f32, _normalize, is_unit

if TYPE_CHECKING:
    from numpy.typing import NDArray


# FAISS assigns points to centroids on a sequential path below ``distance_compute_blas_threshold``
# points (128,000 in FAISS 1.15), slow at a product quantizer's few dimensions a sub-space.
# ``PQ.fit`` lowers it while it trains: on 8,192 dbpedia-sample token vectors pq-192 trains in
# 2.3 s instead of 15.6, pq-96 in 0.8 instead of 7.7, to the same error
# (``python benchmarks/pq_training.py --index FLOAT16_INDEX``, docs/codecs.md).
PQ_BLAS_THRESHOLD = 20
_BLAS_LOCK = threading.Lock()
# Sample points a centroid FAISS trains a sub-quantizer on (it subsamples above this, 256 by
# default) when the sub-vectors have at most 2 dimensions (pq-192 of 384 dims, the pooled
# group's auto), where its k-means is slowest: on 65,536 dbpedia-sample token vectors 3.3 s
# instead of 13.6, the squared error 7-8 % higher (held-out tokens 0.00913 against 0.00851,
# centroids 0.01067 against 0.00990; benchmarks/pq_training.py), at nDCG@10 measured with it
# (docs/codecs.md: within 0.0038 of float16). Wider sub-vectors keep FAISS's 256 (refine-96:
# 4 dims, first-m's margin is thinner).
LOW_DIM_POINTS_PER_CENTROID = 64


@contextmanager
def blas_assignment() -> Iterator[None]:
    """FAISS's k-means assignment on BLAS for any number of points while the block runs
    (``distance_compute_blas_threshold``, a process-wide setting, restored afterwards; one
    block at a time in a process). It changes how the distances are computed, not which."""
    import faiss

    with _BLAS_LOCK:
        before = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = min(before, PQ_BLAS_THRESHOLD)
        try:
            yield
        finally:
            faiss.cvar.distance_compute_blas_threshold = before


class PQ(Codec):
    """FAISS product quantizer: d split into M sub-vectors of d/M dims, each stored as the
    id (8 bits) of its nearest of 256 sub-centroids (k-means per sub-space on the sample):
    M bytes. Decoded by ``faiss.ProductQuantizer.decode``; with ``normalize`` rescaled to
    unit length."""

    family = "pq"
    example_arg = 48
    MIN_VECTORS = 256  # 256 centroids per sub-space: FAISS k-means needs a point for each
    scores_codes = True

    def __init__(self, m: int, centroids: np.ndarray, normalize: bool) -> None:
        import faiss

        self.m = m
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)  # (M, 256, d/M)
        if self.centroids.shape[:2] != (m, 256):
            raise ValueError(f"pq-{m}: centroids of shape {self.centroids.shape}")
        dim = m * self.centroids.shape[2]
        self.dim_in = self.dim_out = dim
        self.bytes_per_vector = m
        self.normalize = bool(normalize)
        pq = faiss.ProductQuantizer(dim, m, 8)
        # typed as the base class: faiss's stub gives ProductQuantizer.decode the C++ signature
        # (code, x) -> None, while the Python wrapper every Quantizer gets is decode(codes) -> x
        self.pq: faiss.Quantizer = pq
        faiss.copy_array_to_vector(self.centroids.ravel(), pq.centroids)

    @property
    def name(self) -> str:
        return f"pq-{self.m}"

    @staticmethod
    def spec_bytes(arg: Optional[int], dim: int, **_: Any) -> int:
        assert arg is not None  # pq-M: parse_name gives the family its M
        return int(arg)

    @classmethod
    def fit(cls, arg: Optional[int], sample: np.ndarray, seed: int = 0, normalize: Optional[bool] = None, niter: Optional[int] = None, **_: Any) -> "PQ":
        import faiss

        assert arg is not None  # pq-M: parse_name gives the family its M
        m = int(arg)
        x = np.ascontiguousarray(sample, dtype=np.float32)
        dim = x.shape[1]
        if m < 1 or dim % m:
            raise ValueError(f"pq-{m}: the dimension {dim} is not divisible by {m}")
        if len(x) < PQ.MIN_VECTORS:
            raise ValueError(f"pq-{m}: a sample of at least {PQ.MIN_VECTORS} vectors is needed (256 centroids per sub-space), got {len(x)}")
        pq = faiss.ProductQuantizer(dim, m, 8)
        pq.cp.seed = seed
        # FAISS warns once a sub-space below 39 points a centroid (9,984 vectors): pq-192 (the
        # pooled group's auto) would print 192 lines for a small corpus. The setting only
        # gates that warning; the centroids are the same.
        pq.cp.min_points_per_centroid = 1
        if dim // m <= 2:
            pq.cp.max_points_per_centroid = LOW_DIM_POINTS_PER_CENTROID
        if niter:
            pq.cp.niter = niter
        with blas_assignment():
            pq.train(x)
        centroids = faiss.vector_to_array(pq.centroids).reshape(m, 256, dim // m)
        return cls(m, centroids, is_unit(x) if normalize is None else normalize)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        codes: NDArray[np.uint8] = self.pq.compute_codes(x)
        return codes

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        x: NDArray[np.float32] = self.pq.decode(codes)
        return _normalize(x) if self.normalize else x

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(m, n) float32 q · decode(code): for up to ``residual_scoring.MAX_QUERY_VECTORS``
        query vectors from the codes (``pq_scoring``: M table lookups a code, the norm from
        the sub-centroids' squared norms), for more decoded and multiplied. Both equal up to
        float rounding."""
        from mvr.operators.codecs import pq_scoring, residual_scoring  # numba: loaded by the first scoring

        if len(query_vectors) > residual_scoring.MAX_QUERY_VECTORS:
            return super().similarities(query_vectors, codes)
        return pq_scoring.pq_similarities(query_vectors, self._check_codes(codes), self.centroids, self.normalize)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"m": self.m, "normalize": self.normalize}, {"centroids": self.centroids}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "PQ":
        return cls(int(params["m"]), arrays["centroids"], bool(params["normalize"]))


class PCA(Transform):
    """Dimension reduction to D dims fitted on the sample with ``faiss.PCAMatrix``:
    y = A·(x - mean), A the top D principal directions (D × dim_in). ``center=False`` fits
    the directions of the uncentred second moment E[x xᵀ] instead (mean 0: dot products
    x·x' ≈ y·y' best preserved) — trained as a PCA of the sample and its negation. With
    ``normalize`` (unit inputs) outputs are rescaled to unit length."""

    family = "pca"
    example_arg = 128

    def __init__(self, matrix: np.ndarray, mean: np.ndarray, normalize: bool, center: bool) -> None:
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)  # (D, dim_in)
        self.mean = np.ascontiguousarray(mean, dtype=np.float32)  # (dim_in,)
        self.dim_out, self.dim_in = self.matrix.shape
        self.normalize = bool(normalize)
        self.center = bool(center)

    @property
    def name(self) -> str:
        return f"pca-{self.dim_out}"

    @classmethod
    def fit(cls, arg: Optional[int], sample: np.ndarray, normalize: Optional[bool] = None, center: bool = False, **_: Any) -> "PCA":
        import faiss

        assert arg is not None  # pca-D: parse_name gives the family its D
        d_out = int(arg)
        x = np.ascontiguousarray(sample, dtype=np.float32)
        if not 1 <= d_out <= x.shape[1]:
            raise ValueError(f"pca-{d_out}: output dimension must be 1..{x.shape[1]}")
        rows = x if center else np.concatenate([x, -x])
        if len(rows) < d_out:  # FAISS's own limit, said in words (its error: "PCA matrix cannot output …")
            raise ValueError(
                f"pca-{d_out}: a sample of {len(x)} vectors is too small to fit it (FAISS needs {d_out if center else -(-d_out // 2)}; "
                "codecs.choose falls back to a codec the sample can train)"
            )
        pca = faiss.PCAMatrix(x.shape[1], d_out)
        pca.train(rows)
        matrix = faiss.vector_to_array(pca.A).reshape(d_out, x.shape[1])  # prepare_Ab keeps the top d_out rows
        mean = faiss.vector_to_array(pca.mean) if center else np.zeros(x.shape[1], np.float32)
        return cls(matrix, mean, is_unit(x) if normalize is None else normalize, center)

    def apply(self, x: np.ndarray) -> np.ndarray:
        x = _f32(x, self.dim_in, f"{self.name} apply")
        y = (x - self.mean) @ self.matrix.T if self.center else x @ self.matrix.T
        return _normalize(y) if self.normalize else y

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"center": self.center, "normalize": self.normalize}, {"matrix": self.matrix, "mean": self.mean}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "PCA":
        return cls(arrays["matrix"], arrays["mean"], bool(params["normalize"]), bool(params["center"]))


class Composed(Codec):
    """A transform (PCA) followed by a codec: ``encode`` applies the transform first,
    ``project`` applies it to queries; codes and decodes are the inner codec's."""

    def __init__(self, transform: Transform, inner: Codec) -> None:
        if transform.dim_out != inner.dim_in:
            raise ValueError(f"{transform.name} outputs {transform.dim_out} dims, {inner.name} takes {inner.dim_in}")
        self.transform, self.inner = transform, inner
        self.family = inner.family  # type: ignore[misc]
        self.dim_in, self.dim_out = transform.dim_in, inner.dim_out
        self.bytes_per_vector = inner.bytes_per_vector
        self.normalize = inner.normalize
        self.scores_codes = inner.scores_codes

    @property
    def name(self) -> str:
        return f"{self.transform.name}+{self.inner.name}"

    def project(self, x: np.ndarray) -> np.ndarray:
        return self.transform.apply(x)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        return self.inner._encode(self.transform.apply(x))

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        return self.inner._decode(codes)

    def _decode_into(self, codes: np.ndarray, out: np.ndarray) -> None:
        self.inner._decode_into(codes, out)

    def decode_scaled(self, codes: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        return self.inner.decode_scaled(codes)

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return self.inner.similarities(query_vectors, codes)

    def pair_similarities(self, query_vectors: np.ndarray, query_index: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return self.inner.pair_similarities(query_vectors, query_index, codes)

    def coarse_centroids(self) -> Optional[np.ndarray]:
        return self.inner.coarse_centroids()

    def coarse_ids(self, codes: np.ndarray) -> np.ndarray:
        return self.inner.coarse_ids(codes)

    def stages(self) -> list[Codec | Transform]:
        return [self.transform, self.inner]

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:  # to_bytes writes stages() one by one; a composed codec has no state of its own
        raise TypeError(f"{self.name} is serialised stage by stage: use to_bytes(), not _state()")

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Composed":
        raise TypeError("a composed codec is rebuilt from its stages by codecs.from_bytes(), not _from_state()")
