"""ColBERTv2's residual codec: nearest centroid id + residual at N bits a value."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mvr.operators.codecs.base import BLOCK, HELDOUT_FRACTION, Codec, _use_gpu, default_centroids, id_dtype, is_unit, residual_centroids

# k-means iterations of the residual codebook: ColBERTv2's and PLAID's own (kmeans_niters = 4).
# Measured with pca-192+residual-1 on the three shared collections (2026-11-27): nDCG@10 and
# overlap@10 as with 20 iterations (every Δ within ±0.003), a 3.5x shorter training (8 s
# against 26-33 s for 62,259 vectors and 8,192 centroids on 2 cores, on FAISS's SSE3 kernels
# of then: operators/openblas.py; docs/codecs.md).
KMEANS_ITERATIONS = 4


def _kmeans(x: np.ndarray, k: int, seed: int, niter: int, gpu: Optional[bool]) -> np.ndarray:
    """(k, d) float32 centroids of ``x`` by FAISS k-means, seeded."""
    import faiss

    km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed, gpu=_use_gpu(gpu), verbose=False)
    km.train(np.ascontiguousarray(x, dtype=np.float32))
    return np.ascontiguousarray(km.centroids, dtype=np.float32)


def quantile_buckets(values: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """(cutoffs (levels - 1,), weights (levels,)) of a scalar quantiser of ``values`` (any
    shape, float): the cutoffs at the 1/levels … (levels-1)/levels quantiles, a bucket being
    the number of cutoffs ≤ a value, and each bucket's weight the mean of its values (its
    quantile midpoint, ColBERTv2's weight, when it holds none)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    cutoffs = np.quantile(v, np.arange(1, levels) / levels)
    mid = np.quantile(v, (np.arange(levels) + 0.5) / levels)
    b = np.searchsorted(cutoffs, v, side="right")
    counts = np.bincount(b, minlength=levels)
    sums = np.bincount(b, weights=v, minlength=levels)
    return cutoffs, np.where(counts > 0, sums / np.maximum(counts, 1), mid)


class Residual(Codec):
    """ColBERTv2's residual compression. Each vector x is stored as the id of its nearest
    centroid c (L2; a codebook trained on the sample with FAISS k-means) and its residual
    r = x - c quantised to N bits a value: bucket b of r_i is the number of ``cutoffs`` ≤ r_i
    (the 1/2^N … (2^N-1)/2^N quantiles of the residual values of a held-out part of the
    sample); decoded r̂_i = ``weights[b]``, the mean held-out residual value in bucket b.
    Bits are packed most significant first, 8/N values a byte, after the id (little-endian,
    the narrowest of uint8/16/32 that holds the codebook). Decode looks each byte up in a
    256-row table of its 8/N values, adds the centroid and, with ``normalize``, rescales to
    unit length.

    Bound: the centroids are stored exactly (float32), so before the rescaling the whole
    error is the residual's quantisation: |r_i - r̂_i| ≤ width of r_i's bucket, since a
    bucket's weight (a mean of values in it) lies inside it — for r_i within the sample's
    range [lo, hi] (the outer buckets end there), ≤ ``max_bucket_width``. The rescaling to
    unit length at most doubles the L2 error of a unit vector:
    ||x - y/|y||| ≤ ||x - y|| + | |y| - 1 | ≤ 2||x - y||."""

    family = "residual"
    example_arg = 2
    scores_codes = True
    NBITS = (1, 2, 4, 8)

    def __init__(self, nbits: int, centroids: np.ndarray, cutoffs: np.ndarray, weights: np.ndarray, lo: float, hi: float, normalize: bool) -> None:
        if nbits not in self.NBITS:
            raise ValueError(f"residual codec: {nbits} bits a value; choose one of {self.NBITS}")
        self.nbits = nbits
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.cutoffs = np.ascontiguousarray(cutoffs, dtype=np.float32)
        self.weights = np.ascontiguousarray(weights, dtype=np.float32)
        if len(self.cutoffs) != 2**nbits - 1 or len(self.weights) != 2**nbits:
            raise ValueError(f"residual-{nbits}: {len(self.cutoffs)} cutoffs and {len(self.weights)} weights")
        self.lo, self.hi = float(lo), float(hi)
        self.normalize = bool(normalize)
        self.n_centroids, dim = self.centroids.shape
        if (dim * nbits) % 8:
            raise ValueError(f"residual-{nbits}: {dim} dims × {nbits} bits is not a whole number of bytes")
        self.dim_in = self.dim_out = dim
        self.ids = id_dtype(self.n_centroids)
        self.id_bytes = self.ids.itemsize
        self.per_byte = 8 // nbits
        self.bytes_per_vector = self.id_bytes + dim * nbits // 8
        self.shifts = np.array([8 - nbits * (k + 1) for k in range(self.per_byte)], dtype=np.uint8)
        # byte value v → its per_byte decoded residual values
        buckets = (np.arange(256, dtype=np.uint8)[:, None] >> self.shifts[None, :]) & np.uint8(2**nbits - 1)
        self.table = self.weights[buckets]  # (256, per_byte) float32
        # the same table as one 4·per_byte-byte item a byte value: one gather a code byte
        self._unit = np.dtype((np.void, 4 * self.per_byte))
        self._table_units = np.ascontiguousarray(self.table).view(self._unit).reshape(256)

    @property
    def name(self) -> str:
        return f"residual-{self.nbits}"

    @property
    def max_bucket_width(self) -> float:
        """The widest bucket, the outer ones taken to end at the sample's extreme residuals."""
        edges = np.concatenate([[self.lo], self.cutoffs.astype(np.float64), [self.hi]])
        return float(np.diff(edges).max())

    @staticmethod
    def spec_bytes(arg: Optional[int], dim: int, n_vectors: Optional[int] = None, n_centroids: Optional[int] = None, **_: Any) -> int:
        k = n_centroids or default_centroids(n_vectors or 1)
        id_bytes = id_dtype(k).itemsize
        assert arg is not None  # residual-N: parse_name gives the family its N
        return id_bytes + dim * int(arg) // 8

    @classmethod
    def fit(
        cls,
        arg: Optional[int],
        sample: np.ndarray,
        seed: int = 0,
        n_vectors: Optional[int] = None,
        n_centroids: Optional[int] = None,
        niter: Optional[int] = None,
        gpu: Optional[bool] = None,
        normalize: Optional[bool] = None,
        centroids: Optional[np.ndarray] = None,
        **_: Any,
    ) -> "Residual":
        """Train on ``sample``: k-means on all but a seeded held-out ``HELDOUT_FRACTION``
        (k = ``residual_centroids``: ``n_centroids``, default ``default_centroids(n_vectors or
        len(sample))``, at most the training rows; ``niter`` iterations, default ``KMEANS_ITERATIONS``), buckets on the held-out rows' residuals. ``centroids``: a
        codebook to reuse instead of k-means (e.g. the same one for several N)."""
        assert arg is not None  # residual-N: parse_name gives the family its N
        nbits = int(arg)
        if nbits not in cls.NBITS:
            raise ValueError(f"residual-{nbits}: bits a value must be one of {cls.NBITS}")
        x = np.ascontiguousarray(sample, dtype=np.float32)
        if normalize is None:
            normalize = is_unit(x)
        train_rows, held = cls.split(len(x), seed)
        if centroids is None:
            k = residual_centroids(len(train_rows), n_vectors or len(x), n_centroids)
            centroids = _kmeans(x[train_rows], k, seed, niter or KMEANS_ITERATIONS, gpu)
        r = (x[held] - centroids[_nearest(centroids, x[held])]).ravel().astype(np.float64)
        cutoffs, weights = quantile_buckets(r, 2**nbits)
        return cls(nbits, centroids, cutoffs, weights, r.min(), r.max(), normalize)

    @staticmethod
    def split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Seeded (k-means rows, held-out rows) of a sample of ``n`` rows (held out: 5 %, at
        least one row; with one row, that row is both)."""
        perm = np.random.default_rng(seed).permutation(n)
        h = max(1, int(round(n * HELDOUT_FRACTION)))
        if n <= 1:
            return perm, perm
        return np.sort(perm[h:]), np.sort(perm[:h])

    def nearest(self, x: np.ndarray) -> np.ndarray:
        """(n,) int64 nearest centroid (L2) of each row of ``x`` (float32, dim_in)."""
        return _nearest(self.centroids, x)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        ids = self.nearest(x)
        r = x - self.centroids[ids]
        b = np.searchsorted(self.cutoffs, r, side="right").astype(np.uint8)  # (n, d) buckets
        packed = np.bitwise_or.reduce(b.reshape(len(x), -1, self.per_byte) << self.shifts, axis=2)
        out = np.empty((len(x), self.bytes_per_vector), dtype=np.uint8)
        out[:, : self.id_bytes] = ids.astype(self.ids)[:, None].view(np.uint8)
        out[:, self.id_bytes :] = packed
        return out

    def coarse_centroids(self) -> Optional[np.ndarray]:
        return self.centroids

    def coarse_ids(self, codes: np.ndarray) -> np.ndarray:
        return self.ids_of(self._check_codes(codes))

    def ids_of(self, codes: np.ndarray) -> np.ndarray:
        """(n,) int64 centroid ids of codes."""
        return np.ascontiguousarray(codes[:, : self.id_bytes]).view(self.ids).reshape(-1).astype(np.int64)

    def _decode(self, codes: np.ndarray, normalize: Optional[bool] = None) -> np.ndarray:
        out = np.empty((len(codes), self.dim_out), np.float32)
        self._decode_into(codes, out, normalize)
        return out

    def _decode_into(self, codes: np.ndarray, out: np.ndarray, normalize: Optional[bool] = None) -> None:
        """Residual values gathered straight into ``out`` (each code byte's per_byte values
        copied as one item), the centroid added, rows rescaled to unit length with
        ``normalize``: no (n, dim) temporary besides the centroids' gather. Codes hold valid
        ids (< n_centroids) by construction, so the gathers skip bounds checks."""
        n = len(codes)
        res = codes[:, self.id_bytes :]
        if out.flags.c_contiguous:  # take(mode="clip"): no bounds checks (3x faster than fancy indexing)
            np.take(self._table_units, res, out=out.view(self._unit).reshape(n, -1), mode="clip")
        else:
            out[...] = self.table[res].reshape(n, self.dim_out)
        out += np.take(self.centroids, self.ids_of(codes), axis=0, mode="clip")
        if self.normalize if normalize is None else normalize:
            norms = np.sqrt(np.einsum("ij,ij->i", out, out))
            out /= np.maximum(norms, np.float32(1e-12))[:, None]

    def decode_scaled(self, codes: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Centroid + decoded residual, and with ``normalize`` each row's 1 / L2 norm (the
        rescaling ``decode`` applies), computed without rescaling the rows."""
        codes = np.ascontiguousarray(self._check_codes(codes))
        out = np.empty((len(codes), self.dim_out), np.float32)
        for s in range(0, len(codes), BLOCK):  # BLOCK rows at a time: bounds the centroids' gather
            self._decode_into(codes[s : s + BLOCK], out[s : s + BLOCK], normalize=False)
        if not self.normalize:
            return out, None
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        return out, np.float32(1.0) / np.maximum(norms, np.float32(1e-12))

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(m, n) float32 q · decode(code): for up to ``residual_scoring.MAX_QUERY_VECTORS``
        query vectors (one query's) computed from the codes, no decoded (n, dim) matrix; for
        more (a batch of queries) decoded and multiplied (``Codec.similarities``), which
        costs less there. Both equal up to float rounding."""
        from mvr.operators.codecs import residual_scoring  # numba: loaded by the first scoring

        if len(query_vectors) > residual_scoring.MAX_QUERY_VECTORS:
            return super().similarities(query_vectors, codes)
        codes = self._check_codes(codes)
        return residual_scoring.residual_similarities(query_vectors, codes[:, self.id_bytes :], self.ids_of(codes), self.centroids, self.table, self.normalize)

    def pair_similarities(self, query_vectors: np.ndarray, query_index: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(n,) float32 ``query_vectors[query_index[t]]`` · decode(codes[t]), from the codes
        (``residual_scoring.residual_pair_similarities``: one dot a code)."""
        from mvr.operators.codecs import residual_scoring  # numba: loaded by the first scoring

        codes = self._check_codes(codes)
        return residual_scoring.residual_pair_similarities(
            query_vectors, query_index, codes[:, self.id_bytes :], self.ids_of(codes), self.centroids, self.table, self.normalize
        )

    def decode_raw(self, codes: np.ndarray) -> np.ndarray:
        """Centroid + decoded residual, without the rescaling to unit length."""
        return self._decode(np.ascontiguousarray(codes), normalize=False)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        params = {"nbits": self.nbits, "lo": self.lo, "hi": self.hi, "normalize": self.normalize}
        return params, {"centroids": self.centroids, "cutoffs": self.cutoffs, "weights": self.weights}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Residual":
        return cls(
            int(params["nbits"]), arrays["centroids"], arrays["cutoffs"], arrays["weights"], float(params["lo"]), float(params["hi"]), bool(params["normalize"])
        )


def _nearest(centroids: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(n,) int64 nearest centroid (L2) of each row of ``x`` among ``centroids`` (k, d): FAISS's
    exhaustive search at k = 1 (``faiss.knn``: one BLAS product a block of rows, no index kept,
    so a codec stays plain data). ``python benchmarks/nearest_centroid.py`` (50,000 vectors,
    8,192 centroids of 192 dims, 2026-11-30): 0.85 s against 1.05 s for the numpy product a
    block of rows it replaced on two threads (1.47 s against 1.72 s on one), the same centroid
    for every vector."""
    import faiss

    ids: np.ndarray = faiss.knn(np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(centroids, dtype=np.float32), 1)[1]
    return ids[:, 0].astype(np.int64, copy=False)
