"""ScaNN backend: k-means tree partitioning + anisotropic asymmetric hashing (+ an optional
exact reorder).

Vectors are (n, dim) float32, normally L2-normalised; the distance is ScaNN's dot product, so
returned scores are inner products: AH estimates by default, exact for every result that went
through the reorder when the index is built with one (the top ``reorder_k`` AH candidates,
which include all k returned).

ScaNN's builder trains on, and indexes, the whole dataset at once. So ``add`` buffers vectors
(in one array of the ``n_vectors`` given to ``create`` while they fit it, so the builder gets
no concatenated copy) and the searcher is built lazily, by the first ``search`` or ``save``; ``train(sample)`` only
checks the sample (ScaNN draws its own ``training_sample_size`` from the data at build).
Vectors added after the build go through ScaNN's online insertion (``upsert``): they join the
nearest existing leaf and are coded with the existing codebooks, like FAISS's add after train;
vectors unlike the built data are routed less well (rebuild from scratch to re-partition).

Defaults are computed from the number of vectors present at build (the ``n_vectors`` given to
``create`` only previews them):

- fewer than 4,096 vectors: brute force (``score_brute_force``, exact float32);
- ``num_leaves`` = round(sqrt(n)), at most n/50 (ScaNN's minimum partition size);
- ``leaves_to_search`` (search knob) = num_leaves/64 rounded up, at least 8 (or num_leaves if
  smaller): about 1/64 of the data scanned a query, as FAISS's ``nprobe``;
- ``reorder_k`` = 0: no reorder stage, so ScaNN keeps no float32 copy of the vectors (4·dim B
  a vector, 8x the rest of the index at 64 dims) and returns AH scores; mvr's exact rescoring
  from the codes is the reorder. Measured on both sample collections at the default codec
  (``benchmarks/scann_reorder.py``, docs/codecs.md): the same nDCG@10 and overlap@10 for every
  mode as ``reorder_k`` = 100 and the same latency, at 37 instead of 293 B a token vector. A
  build with ``reorder_k`` > 0 keeps the copy and rescores that many AH candidates exactly
  (the search knob, raised to k when k is larger);
- AH: 2 dimensions a block, 16 centres a block (lut16), anisotropic threshold 0.2
  (ScaNN's recommendation for normalised data; None turns anisotropic quantization off,
  which halves the build: 11.6 s → 6.1 s for 93,131 384-dim token vectors, one thread,
  ``python benchmarks/ann_build.py``);
- ``training_sample_size`` = all vectors up to 65,536, else 64 a leaf;
- ``spherical`` tree (spherical k-means: leaf centres normalised): on msmarco-sample's 5,000
  pooled vectors the exact top-10 within ScaNN's top-100 rose from 0.86 to 0.96 at 8 of 71
  leaves (``python benchmarks/ann_build.py``)."""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np
import scann

from mvr.operators.ann.base import AnnIndex, build_threads, check_params, check_positive_int, check_vectors
from mvr.operators.ann.defaults import AH_CENTERS, BRUTE_FORCE_BELOW, default_num_leaves, default_probes, training_sample_size

ASSETS_FILE = "scann_assets.pbtxt"
PARAMS = {
    "brute_force",
    "num_leaves",
    "leaves_to_search",
    "reorder_k",
    "dims_per_block",
    "anisotropic_quantization_threshold",
    "training_sample_size",
    "spherical",
}
PARALLEL_BATCH = 256  # queries a thread when searching in parallel
UPSERT_BATCH = 256  # vectors an insertion batch after the build
DEFAULT_REORDER_K = 0  # no reorder stage (module docstring); > 0: AH candidates rescored exactly from a float32 copy


def default_params(dim: int, n_vectors: int, overrides: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Defaults for ``n_vectors`` vectors with ``overrides`` applied (module docstring)."""
    o = dict(overrides or {})
    num_leaves = o.get("num_leaves", default_num_leaves(n_vectors))
    p = {
        "brute_force": n_vectors < BRUTE_FORCE_BELOW,
        "num_leaves": num_leaves,
        "leaves_to_search": default_probes(check_positive_int("num_leaves", num_leaves)),
        "reorder_k": DEFAULT_REORDER_K,
        "dims_per_block": 2,
        "anisotropic_quantization_threshold": 0.2,
        "training_sample_size": training_sample_size(n_vectors, num_leaves),
        "spherical": True,
    }
    p.update(o)
    for name in ("num_leaves", "leaves_to_search", "dims_per_block", "training_sample_size"):
        p[name] = check_positive_int(name, p[name])
    p["reorder_k"] = check_reorder_k(p["reorder_k"])
    if p["dims_per_block"] > dim:
        raise ValueError(f"dims_per_block={p['dims_per_block']} exceeds dim={dim}")
    p["brute_force"] = bool(p["brute_force"])
    p["spherical"] = bool(p["spherical"])
    aq = p["anisotropic_quantization_threshold"]
    p["anisotropic_quantization_threshold"] = None if aq is None or aq != aq else float(aq)  # None: plain AH
    return p


def check_reorder_k(value: Any) -> int:
    """A build's ``reorder_k``: a non-negative int (0: no reorder stage, no float32 copy)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"reorder_k must be a non-negative integer (0: no exact reorder), got {value!r}")
    return int(value)


def _nan_if_none(value: Optional[float]) -> float:
    """ScaNN's spelling of "no anisotropic quantization" is NaN; ours (JSON-safe) is None."""
    return float("nan") if value is None else value


class ScannIndex(AnnIndex):
    """ScaNN tree-AH-reorder (or brute-force) searcher over (n, dim) float32 vectors.
    Search knobs: ``leaves_to_search``, ``reorder_k``."""

    backend = "scann"
    knobs = ("leaves_to_search", "reorder_k")
    probe_knob = "leaves_to_search"

    def __init__(self, dim: int, n_hint: int, overrides: dict[str, Any], trained: bool = False) -> None:
        super().__init__(dim)
        self._overrides = dict(overrides)
        self._params = default_params(self.dim, n_hint, self._overrides)
        self._pending: list[np.ndarray] = []
        self._n_pending = 0
        self._n_hint = n_hint
        # the vectors added before the build, in one (n_hint, dim) float32 buffer while they fit
        # the announced count: the builder then gets a view of it, not a concatenated second copy
        # (at 24 M 64-dim vectors a copy is 6 GB, and ScaNN makes its own: the build went out of
        # memory on 24 GB with the concatenation, benchmarks/scale_curve.py)
        self._buffer: Optional[np.ndarray] = None
        self._searcher: Optional[Any] = None
        self._trained = trained

    @classmethod
    def create(cls, dim: int, n_vectors: int, **params: Any) -> "ScannIndex":
        """New index; ``params`` ⊆ {brute_force, num_leaves, leaves_to_search, reorder_k,
        dims_per_block, anisotropic_quantization_threshold, training_sample_size, spherical}; the rest are
        recomputed from the data at build."""
        check_params(cls.backend, params, PARAMS)
        dim = check_positive_int("dim", dim)
        if isinstance(n_vectors, bool) or not isinstance(n_vectors, (int, np.integer)) or n_vectors < 0:
            raise ValueError(f"n_vectors must be a non-negative integer, got {n_vectors!r}")
        return cls(dim, int(n_vectors), params)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def cells(self) -> int:
        return 1 if self._params["brute_force"] else int(self._params["num_leaves"])

    @property
    def ntotal(self) -> int:
        return int(self._searcher.size()) if self._searcher is not None else self._n_pending

    @property
    def is_trained(self) -> bool:
        return self._trained

    def train(self, sample: np.ndarray) -> None:
        """Check a (n_sample, dim) sample and allow ``add``. ScaNN trains its tree and codebooks
        on ``training_sample_size`` of the indexed vectors when it builds, not on this sample."""
        check_vectors(sample, self.dim, "training sample")
        self._trained = True

    def _add(self, vectors: np.ndarray) -> None:
        if self._searcher is not None:
            self._searcher.searcher.upsert([None] * len(vectors), vectors, UPSERT_BATCH)
            return
        n, filled = len(vectors), self._n_pending
        if not self._pending and filled + n <= self._n_hint:  # within the announced count: into the buffer
            if self._buffer is None:
                self._buffer = np.empty((self._n_hint, self.dim), np.float32)
            self._buffer[filled : filled + n] = vectors
        else:  # more than announced: the buffer's filled rows become the first block, then a list
            if self._buffer is not None:
                self._pending, self._buffer = [self._buffer[:filled]], None
            self._pending.append(vectors)
        self._n_pending += n

    def finalize(self) -> None:
        self._build()

    def _build(self) -> None:
        """Build the searcher from the buffered vectors (no-op once built or when empty)."""
        if self._searcher is not None or self._n_pending == 0:
            return
        if self._buffer is not None:
            data = self._buffer[: self._n_pending]  # C-contiguous rows: no copy
        else:
            data = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        n = len(data)
        self._params = p = default_params(self.dim, n, self._overrides)
        builder = scann.scann_ops_pybind.builder(data, 10, "dot_product")
        if p["brute_force"]:
            self._searcher = builder.score_brute_force().build()
        else:
            need = max(p["num_leaves"], AH_CENTERS)
            if n < need:
                raise ValueError(
                    f"ScaNN tree with num_leaves={p['num_leaves']} and asymmetric hashing needs at least "
                    f"{need} vectors, got {n}; use brute_force=True or fewer leaves"
                )
            sample = min(p["training_sample_size"], n)
            builder = builder.tree(
                p["num_leaves"],
                min(p["leaves_to_search"], p["num_leaves"]),
                training_sample_size=sample,
                spherical=p["spherical"],
                random_init=False,  # k-means++ seeding: the same tree from the same vectors (random init reseeds per process)
            ).score_ah(
                p["dims_per_block"], anisotropic_quantization_threshold=_nan_if_none(p["anisotropic_quantization_threshold"]), training_sample_size=sample
            )
            if p["reorder_k"] > 0:  # keeps a float32 copy of every vector (dataset.npy) to rescore AH candidates
                builder = builder.reorder(p["reorder_k"])
            if build_threads():
                builder.set_n_training_threads(build_threads())
            self._searcher = builder.build()
        self._pending, self._n_pending, self._buffer = [], 0, None

    def _search(self, queries: np.ndarray, k: int, knobs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        self._build()
        p = self._params
        leaves: Optional[int] = check_positive_int("leaves_to_search", knobs.get("leaves_to_search", p["leaves_to_search"]))
        reorder_k = knobs.get("reorder_k", p["reorder_k"])
        if reorder_k != p["reorder_k"]:
            check_positive_int("reorder_k", reorder_k)
        if p["brute_force"]:  # exact: the tree and reorder knobs do not apply
            leaves, pre_reorder = None, None
        elif p["reorder_k"] == 0:  # built without a reorder stage: AH scores, the knob has nothing to reorder with
            leaves, pre_reorder = min(leaves, p["num_leaves"]), None
        else:
            leaves, pre_reorder = min(leaves, p["num_leaves"]), max(reorder_k, k)
        s = self._searcher
        assert s is not None  # built: search asks only an index holding vectors
        search = s.search_batched_parallel if len(queries) > PARALLEL_BATCH else s.search_batched
        ids, scores = search(queries, final_num_neighbors=k, pre_reorder_num_neighbors=pre_reorder, leaves_to_search=leaves)
        ids = np.asarray(ids).astype(np.int64)
        scores = np.asarray(scores, dtype=np.float32).copy()
        missing = ~np.isfinite(scores)  # ScaNN pads with id 0 and NaN
        ids[missing] = -1
        scores[missing] = -np.inf
        return ids, scores

    def _save(self, directory: str) -> None:
        self._build()
        if self._searcher is not None:
            self._searcher.serialize(directory, relative_path=True)  # relocatable directory

    def _extra_meta(self) -> dict[str, Any]:
        return {"overrides": self._overrides}  # an empty index resolves its defaults at build

    @classmethod
    def _load(cls, directory: str, meta: dict[str, Any]) -> "ScannIndex":
        index = cls(meta["dim"], meta["ntotal"], meta["overrides"], trained=meta["trained"])
        if meta["ntotal"] == 0:
            return index
        index._params = dict(meta["params"])
        if not os.path.isfile(os.path.join(directory, ASSETS_FILE)):
            raise ValueError(f"{directory}: {ASSETS_FILE} is missing")
        index._searcher = scann.scann_ops_pybind.load_searcher(directory)
        return index
