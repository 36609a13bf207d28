"""Approximate nearest-neighbour (ANN) first stage behind one small interface.

An ``AnnIndex`` holds (n, dim) float32 vectors under int64 ids 0..n-1 (the row positions in
add order, consecutive across ``add`` calls) and answers maximum-inner-product queries. Vectors
are normally L2-normalised (token vectors, first-m, pooled), so inner product = cosine; the
indexes never re-normalise, so unnormalised vectors (k-means centroids) are scored by their
plain inner product. Scores are approximate first-stage scores: exact rescoring happens
elsewhere, where the partition's exact vectors live.

Backends: ``"faiss-ivfpq"`` (``operators/ann/ivfpq.py``), ``"scann"``
(``operators/ann/scann_index.py``) and ``"codec-ivf"`` (``operators/ann/codec_ivf.py``: lists
of vector ids over the codec's own centroids, filled from the codes), each importing only this interface and the light
``defaults``; ``operators/ann/factory.py`` above them: ``make_index`` picks a backend's
defaults from the data size, ``load_index`` opens any saved index. An index is saved to a local directory: ``ann.json`` (backend, dim, ntotal, params)
beside the backend's own files."""

from __future__ import annotations

import json
import math
import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np

if TYPE_CHECKING:
    from mvr.operators.codecs import Codec

META_FILE = "ann.json"
FORMAT_VERSION = 1
# Vectors decoded and added to an index at a time when a partition is built or grown
# (pipeline/indexing/ann_build.py, pipeline/indexing/updates.py); the capacity plan's build-RAM model counts one
# such block (operators/planning/capacity.py).
ADD_BATCH = 65_536


class AnnIndex(ABC):
    """Maximum-inner-product index over (n, dim) float32 vectors with ids 0..n-1.

    Lifecycle: ``train(sample)`` once, then ``add(vectors)`` any number of times, then
    ``search``; ``save(directory)`` / ``load(directory)`` at any point after construction."""

    backend: ClassVar[str]
    knobs: ClassVar[tuple[str, ...]]  # keyword arguments ``search`` accepts
    probe_knob: ClassVar[str]  # the knob that sets how many cells a query visits
    # True: ``search`` scores are only the cell's (codec-ivf: q · centroid), to be replaced by
    # the exact similarity of each hit's stored vector (``Partition.hits``), and a search may
    # return more than k ids (whole lists)
    coarse_scores: ClassVar[bool] = False

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = int(dim)

    @classmethod
    @abstractmethod
    def create(cls, dim: int, n_vectors: int, **params: Any) -> "AnnIndex":
        """New untrained index for about ``n_vectors`` vectors; ``params`` override defaults."""

    @property
    @abstractmethod
    def cells(self) -> int:
        """Coarse cells (FAISS lists, ScaNN leaves) a query chooses from; 1 for brute force."""

    def probes(self, fraction: float) -> int:
        """``probe_knob`` value visiting about ``fraction`` of the cells (at least 8, at most all)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"probe fraction must be in (0, 1], got {fraction!r}")
        return int(min(self.cells, max(8, math.ceil(fraction * self.cells))))

    @property
    @abstractmethod
    def ntotal(self) -> int:
        """Number of vectors added so far (the next id ``add`` assigns)."""

    @property
    @abstractmethod
    def is_trained(self) -> bool:
        """Whether ``add`` may be called."""

    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Build parameters and default search knobs, JSON-serialisable."""

    @abstractmethod
    def train(self, sample: np.ndarray) -> None:
        """Learn the quantizers from a (n_sample, dim) sample of the vectors to be added."""

    @abstractmethod
    def _add(self, vectors: np.ndarray) -> None:
        """Append validated (n, dim) float32 C-contiguous rows."""

    @abstractmethod
    def _search(self, queries: np.ndarray, k: int, knobs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Validated queries → raw (ids, scores), each (nq, k); missing entries -1 / -inf."""

    @abstractmethod
    def _save(self, directory: str) -> None:
        """Write the backend's files into an existing local directory."""

    @classmethod
    @abstractmethod
    def _load(cls, directory: str, meta: dict[str, Any]) -> "AnnIndex":
        """Rebuild from the backend's files and the parsed ``ann.json``."""

    def _extra_meta(self) -> dict[str, Any]:
        """Backend-specific entries for ``ann.json`` (JSON-serialisable)."""
        return {}

    def add(self, vectors: np.ndarray) -> np.ndarray:
        """Append (n, dim) vectors; returns their ids, (n,) int64 = ntotal_before + arange(n)."""
        x = check_vectors(vectors, self.dim, "vectors")
        if not self.is_trained:
            raise ValueError(f"{self.backend} index is not trained: call train(sample) before add()")
        start = self.ntotal
        if len(x):
            self._add(x)
        return np.arange(start, start + len(x), dtype=np.int64)

    @property
    def build_device(self) -> str:
        """Where this object trained and filled its index: "cuda" or "cpu" (an index loaded
        from disk, or one that trained nothing, says "cpu")."""
        return "cpu"

    @property
    def takes_codes(self) -> bool:
        """Whether ``add_codes`` fills this index (its cells are the stored vectors' codec's:
        ``use_codec``)."""
        return False

    def use_codec(self, codec: Optional["Codec"]) -> bool:
        """Take the cells from the stored vectors' codec instead of training them (codec-ivf);
        True when it did. Other backends train on decoded vectors: False."""
        return False

    def add_codes(self, codes: np.ndarray) -> np.ndarray:
        """Append vectors given as codes of the codec given to ``use_codec``; their ids."""
        raise ValueError(f"{self.backend} indexes are filled with decoded vectors (add), not codes")

    def emptied(self) -> Optional["AnnIndex"]:
        """A copy of this index's trained state holding no vectors (to fill with other vectors
        without retraining, ``mvr compact``), or None when the backend cannot make one."""
        return None

    def finalize(self) -> None:  # noqa: B027 - an optional hook: most backends need nothing
        """Finish building after the last ``add`` (ScaNN builds its searcher here; otherwise
        the first search or save would). No-op for backends that need nothing."""

    def search(self, queries: np.ndarray, k: int, **knobs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product for (nq, dim) queries.

        Returns ids (nq, k) int64 and scores (nq, k) float32, best first; when fewer than k
        vectors are found the row is padded with id -1 and score -inf. Knobs are the backend's
        ``knobs`` (None = the index's default); an unknown knob raises ValueError."""
        q = check_vectors(queries, self.dim, "queries")
        k = check_k(k)
        unknown = sorted(set(knobs) - set(self.knobs))
        if unknown:
            raise ValueError(f"unknown search knob(s) {unknown} for {self.backend}; accepted: {list(self.knobs)}")
        if len(q) == 0 or self.ntotal == 0:
            return empty_results(len(q), k)
        ids, scores = self._search(q, k, {name: v for name, v in knobs.items() if v is not None})
        return np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(scores, dtype=np.float32)

    def save(self, directory: str) -> None:
        """Write the index to a local directory (created if missing; files overwritten)."""
        os.makedirs(directory, exist_ok=True)
        self._save(directory)
        meta = {
            "format_version": FORMAT_VERSION,
            "backend": self.backend,
            "dim": self.dim,
            "ntotal": self.ntotal,
            "trained": self.is_trained,
            "params": self.params,
            **self._extra_meta(),
        }
        tmp = os.path.join(directory, META_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
        os.replace(tmp, os.path.join(directory, META_FILE))

    @classmethod
    def load(cls, directory: str) -> "AnnIndex":
        """Open an index this backend saved (``operators.ann.factory.load_index`` opens one of
        any backend)."""
        if cls is AnnIndex:
            raise TypeError("AnnIndex.load opens a backend's own index; operators.ann.factory.load_index opens any")
        meta = read_meta(directory)
        target = cls
        if meta["backend"] != target.backend:
            raise ValueError(f"{directory} holds a {meta['backend']} index, not {target.backend}")
        index = target._load(directory, meta)
        if index.ntotal != meta["ntotal"]:
            raise ValueError(f"{directory}: index holds {index.ntotal} vectors, {META_FILE} says {meta['ntotal']}")
        return index

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, ntotal={self.ntotal}, params={self.params})"


_build_threads = 0  # 0: each backend's own default


def set_build_threads(threads: int) -> None:
    """Threads FAISS (OpenMP) and ScaNN (training) use from now on in this process."""
    global _build_threads
    _build_threads = max(1, int(threads))
    try:
        import faiss

        faiss.omp_set_num_threads(_build_threads)
    except ImportError:  # pragma: no cover - faiss is a dependency
        pass


def build_threads() -> int:
    """Threads set by ``set_build_threads`` (0 = not set)."""
    return _build_threads


def read_meta(directory: str) -> dict[str, Any]:
    """Parsed ``ann.json`` of a saved index; ValueError when missing or of another format."""
    path = os.path.join(directory, META_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{directory} is not a saved ANN index: {META_FILE} is missing")
    with open(path) as f:
        meta: dict[str, Any] = json.load(f)
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported format_version {meta.get('format_version')!r}")
    return meta


def check_vectors(x: Any, dim: int, what: str) -> np.ndarray:
    """``x`` as (n, dim) float32 C-contiguous; ValueError naming ``what`` when it is not a 2-D
    real array of width ``dim`` with finite values."""
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D (n, {dim}) array, got shape {a.shape}")
    if a.shape[1] != dim:
        raise ValueError(f"{what} have dimension {a.shape[1]}, the index has dimension {dim}")
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what} must be real numbers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{what} contain NaN or infinite values")
    return a


def check_k(k: Any) -> int:
    """``k`` as a positive int; ValueError otherwise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def check_positive_int(name: str, value: Any) -> int:
    """A parameter that must be a positive int; ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def empty_results(nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """All-missing results: ids (nq, k) = -1, scores (nq, k) = -inf."""
    return np.full((nq, k), -1, dtype=np.int64), np.full((nq, k), -np.inf, dtype=np.float32)


def check_params(backend: str, given: dict[str, Any], allowed: set[str]) -> None:
    """ValueError for parameter names a backend does not know."""
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ValueError(f"unknown {backend} parameter(s) {unknown}; accepted: {sorted(allowed)}")
