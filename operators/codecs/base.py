"""The codec interface (``Codec``, ``Transform``) and the helpers the codecs share."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np

from mvr.operators.kernels import matmul
from mvr.operators.packed import Packed

BLOCK = 1 << 15  # rows encoded / decoded at a time: bounds the temporaries of a batch
HELDOUT_FRACTION = 0.05  # share of a residual codec's sample kept out of k-means to fit its buckets
UNIT_TOLERANCE = 1e-2  # a sample whose norms are all within this of 1 is "unit vectors"


class CodecFileError(ValueError):
    """A codec file (or byte string) that is not a complete, intact mvr codec."""


def default_centroids(n_vectors: int) -> int:
    """ColBERTv2's codebook size for a collection of ``n_vectors`` vectors:
    2^floor(log2(16·sqrt(n_vectors)))."""
    k: int = 2 ** int(math.floor(math.log2(16 * math.sqrt(max(1, n_vectors)))))  # exponent >= 4: an int
    return k


def residual_centroids(train_rows: int, n_vectors: Optional[int] = None, n_centroids: Optional[int] = None) -> int:
    """The codebook size a residual codec's k-means trains on ``train_rows`` sample rows:
    ``n_centroids``, by default ``default_centroids(n_vectors or train_rows)``, never more than
    ``train_rows`` (FAISS k-means needs a point for each centroid: ``default_centroids(n)``
    exceeds n below 128 vectors, 16 for one) and at least 1."""
    k = int(n_centroids or default_centroids(n_vectors or train_rows))
    return max(1, min(k, int(train_rows)))


def id_dtype(n_centroids: int) -> np.dtype:
    """The narrowest little-endian unsigned integer type that holds ids 0..n_centroids-1."""
    for dt in ("u1", "<u2", "<u4"):
        if n_centroids - 1 <= np.iinfo(np.dtype(dt)).max:
            return np.dtype(dt)
    raise ValueError(f"{n_centroids} centroids do not fit uint32 ids")


def is_unit(x: np.ndarray, tol: float = UNIT_TOLERANCE) -> bool:
    """Whether every row of ``x`` has L2 norm within ``tol`` of 1."""
    return bool(len(x)) and bool(np.all(np.abs(np.linalg.norm(x, axis=1) - 1.0) <= tol))


def _normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in place (zero rows stay zero)."""
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x


def _f32(x: np.ndarray, dim: int, what: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{what}: expected (n, {dim}) vectors, got shape {x.shape}")
    return x


def _use_gpu(gpu: Optional[bool]) -> bool:
    if gpu is not None:
        return gpu
    import faiss

    return faiss.get_num_gpus() > 0


class Codec(ABC):
    """A trained codec. ``encode``: (n, dim_in) float → (n, bytes_per_vector) uint8;
    ``decode``: codes → (n, dim_out) float32; ``project``: query vectors → the space of the
    decoded vectors. Subclasses implement ``_encode`` / ``_decode`` on one float32 block and
    ``_state`` / ``_from_state`` for serialisation."""

    family: ClassVar[str]  # registry key (the part of the name before "-")
    example_arg: ClassVar[Optional[int]] = None  # the name's parameter in examples ("residual-2"); None: the family takes none

    dim_in: int
    dim_out: int
    bytes_per_vector: int
    normalize: bool = False
    # ``similarities`` reads the codes without decoding them into a matrix: exact scoring
    # then keeps a candidate set as codes (``StoredVectors.take``) instead of decoding it
    scores_codes: bool = False

    if TYPE_CHECKING:  # what every family's class defines (``registry.FAMILIES``; not Composed, which ``registry.train`` builds)

        @classmethod
        def fit(cls, arg: Optional[int], sample: np.ndarray, **options: Any) -> Codec:
            """Train the codec named ``family-arg`` on ``sample`` ((n, dim_in) float vectors)."""

        @staticmethod
        def spec_bytes(arg: Optional[int], dim: int, **options: Any) -> int:
            """Bytes a vector of ``dim`` dims takes under ``family-arg``, without training."""

    # ---- naming
    @property
    @abstractmethod
    def name(self) -> str:
        """The codec's name, as ``train`` takes it and a manifest records it."""

    def __repr__(self) -> str:
        return f"<codec {self.name}: {self.dim_in} → {self.dim_out} dims, {self.bytes_per_vector} B/vector>"

    # ---- batch operations
    def project(self, x: np.ndarray) -> np.ndarray:
        """Query vectors (n, dim_in) → (n, dim_out) float32, the space ``decode`` returns."""
        return _f32(x, self.dim_in, f"{self.name} project").copy()

    def encode(self, x: np.ndarray, block: int = BLOCK) -> np.ndarray:
        """(n, dim_in) float vectors → (n, bytes_per_vector) uint8 codes."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.dim_in:
            raise ValueError(f"{self.name} encode: expected (n, {self.dim_in}) vectors, got shape {x.shape}")
        out = np.empty((len(x), self.bytes_per_vector), dtype=np.uint8)
        for s in range(0, len(x), block):  # float32 a block at a time: float16 input is not copied whole
            out[s : s + block] = self._encode(np.ascontiguousarray(x[s : s + block], dtype=np.float32))
        return out

    def decode(self, codes: np.ndarray, rows: Optional[np.ndarray] = None, out: Optional[np.ndarray] = None, block: int = BLOCK) -> np.ndarray:
        """Codes (n, bytes_per_vector) uint8 → (n, dim_out) float32. With ``rows`` (an index
        array) only ``codes[rows]`` are decoded, in that order; with ``out`` (a float32
        (len, dim_out) array) the result is written there and returned."""
        codes = self._check_codes(codes)
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        n = len(codes) if rows is None else len(rows)
        if out is None:
            out = np.empty((n, self.dim_out), dtype=np.float32)
        elif out.shape != (n, self.dim_out) or out.dtype != np.float32:
            raise ValueError(f"{self.name} decode: out must be ({n}, {self.dim_out}) float32, got {out.dtype} {out.shape}")
        for s in range(0, n, block):
            part = codes[s : s + block] if rows is None else codes[rows[s : s + block]]
            self._decode_into(np.ascontiguousarray(part), out[s : s + len(part)])
        return out

    def coarse_centroids(self) -> Optional[np.ndarray]:
        """(n_centroids, dim_out) float32 centroids that every code names one of (the residual
        codebook: a codec-ivf first stage's cells), or None for a codec without them."""
        return None

    def coarse_ids(self, codes: np.ndarray) -> np.ndarray:
        """(n,) int64: the centroid (row of ``coarse_centroids``) each code names, read from
        the codes (nothing decoded)."""
        raise ValueError(f"{self.name} codes name no centroid")

    def _check_codes(self, codes: np.ndarray) -> np.ndarray:
        """``codes`` as an array; ValueError unless (n, bytes_per_vector) uint8."""
        codes = np.asarray(codes)
        if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != self.bytes_per_vector:
            raise ValueError(f"{self.name} decode: expected (n, {self.bytes_per_vector}) uint8 codes, got {codes.dtype} {codes.shape}")
        return codes

    def decode_scaled(self, codes: np.ndarray) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """(vectors, row_scale): codes (n, bytes_per_vector) decoded to (n, dim_out) float32
        *before* any rescaling to unit length, and the (n,) float32 factor that rescaling
        multiplies each row by (None: no rescaling; ``vectors`` is then ``decode``'s answer).
        ``vectors * row_scale[:, None]`` equals ``decode(codes)`` up to float rounding. A
        scorer applies the factor to its (query vector, row) similarities instead: fewer
        values than the (row, dim) vectors when a query has fewer vectors than dims, and one
        pass over the decoded rows less."""
        return self.decode(codes), None

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(m, n) float32 q · decode(code) of (m, dim_out) query vectors (already in the
        codec's space: ``project``) and (n, bytes_per_vector) codes, as exact scoring needs
        them. Here: ``decode_scaled`` and one matmul, the rescaling applied to the product;
        a codec that can score its codes without a decoded matrix overrides it (residual)."""
        vectors, scale = self.decode_scaled(codes)
        sims = matmul(np.asarray(query_vectors, dtype=np.float32), vectors.T)
        if scale is not None:
            sims *= scale
        return sims

    def pair_similarities(self, query_vectors: np.ndarray, query_index: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(n,) float32 ``query_vectors[query_index[t]]`` · decode(codes[t]): each of n codes
        scored by one of the (m, dim_out) query vectors (a first stage's hits, each by the
        query vector that found it). Here: ``similarities`` for one query vector, else
        ``decode_scaled`` and a row-wise dot; the residual codec overrides it with a kernel
        that decodes nothing (``residual_scoring``)."""
        q = np.asarray(query_vectors, dtype=np.float32)
        if len(q) == 1:
            one: np.ndarray = self.similarities(q, codes)[0]
            return one
        vectors, scale = self.decode_scaled(codes)
        sims: np.ndarray = np.einsum("ij,ij->i", q[np.asarray(query_index, dtype=np.int64)], vectors).astype(np.float32)
        if scale is not None:
            sims *= scale
        return sims

    def decode_into(self, codes: np.ndarray, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``codes[rows]`` decoded into ``out`` ((len(rows), dim_out) float32), block by block:
        the candidate vectors of a query without decoding the rest."""
        return self.decode(codes, rows, out)

    def decode_passages(self, codes: Packed, passages: Optional[np.ndarray] = None) -> Packed:
        """Packed codes (one code row per token vector) → Packed float32 vectors of the
        passages at ``passages`` (None: all), decoding only their rows."""
        sel = codes if passages is None else codes.take(passages)
        return Packed(self.decode(sel.vectors), sel.offsets)

    @abstractmethod
    def _encode(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _decode(self, codes: np.ndarray) -> np.ndarray: ...

    def _decode_into(self, codes: np.ndarray, out: np.ndarray) -> None:
        """One block: C-contiguous (n, bytes_per_vector) uint8 codes decoded into ``out``, a
        (n, dim_out) float32 view (the exact scan's reused buffer). Codecs that can write
        there without a temporary of the block override it; the values equal ``_decode``'s."""
        out[...] = self._decode(codes)

    # ---- serialisation
    def stages(self) -> list["Codec | Transform"]:
        return [self]

    @abstractmethod
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able parameters, named arrays) that ``_from_state`` rebuilds the codec from."""

    @classmethod
    @abstractmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Codec": ...


class Transform(ABC):
    """A trained map applied before a codec (and to queries): ``apply`` (n, dim_in) →
    (n, dim_out) float32."""

    family: ClassVar[str]
    example_arg: ClassVar[Optional[int]] = None  # as Codec's
    dim_in: int
    dim_out: int
    normalize: bool = False

    if TYPE_CHECKING:  # what every transform's class defines (``registry.TRANSFORMS``)

        @classmethod
        def fit(cls, arg: Optional[int], sample: np.ndarray, **options: Any) -> Transform:
            """Train the transform named ``family-arg`` on ``sample`` ((n, dim_in) float vectors)."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def apply(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...

    @classmethod
    @abstractmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Transform": ...
