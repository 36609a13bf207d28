"""FAISS IVFPQ backend: coarse inverted lists + product-quantized residuals, inner product.

Vectors are (n, dim) float32, normally L2-normalised. Scores are FAISS's asymmetric PQ
estimates of the inner product (query exact, database vector PQ-coded), so they are
approximate and only the ranking is meaningful; rescore exactly downstream.

Defaults from the expected number of vectors n (``default_params``):

- fewer than 4,096 vectors: a flat ``IndexFlatIP`` (exact; nothing to train);
- ``nlist`` = 4·sqrt(n) rounded to the nearest power of two, capped at the largest power of
  two ≤ n/39 (FAISS wants ≥ 39 training points a centroid);
- ``m`` sub-quantizers: the divisor of dim ≤ 96 that makes sub-vectors closest to 8 dims
  (64 → 8, 128 → 16 as in ColBERT, 384 → 48, 768 → 96); 96 bytes is also the GPU IVFPQ
  limit. (4-dim sub-vectors train 21x slower in FAISS: 141 s against 6.7 s for 20,000
  384-dim vectors, m = 96 against 48, one thread; ``python benchmarks/ann_build.py``);
- ``nbits`` = 8, or floor(log2(sample / 39)) (≥ 1) when the training sample holds fewer than
  39 · 256 vectors, so each sub-quantizer still has ≥ 39 points a code;
- ``training_sample_size`` = all vectors up to 65,536, else 64 a coarse cell;
- ``nprobe`` (search knob) = nlist/64 rounded up, at least 8 (or nlist if smaller): about
  1/64 of the vectors scanned a query; with the search core's over-fetching and exact
  rescoring this gives overlap@10 ≥ 0.99 with exact search on the sample collections, and
  1/16 scanned 4x the codes for no gain there (docs/search.md).

Ranking by PQ estimates alone loses near-ties: on the clustered test data (dim 64, m = 16) the
index's own top-10 holds 73% of the exact top-10 while its top-100 holds all of them, so ask
for more candidates (k') than the final k and rescore them exactly.

Residual encoding (``by_residual``) is FAISS's default and kept: it makes codes far more
accurate. Precomputed residual tables apply only to the L2 metric, so none are used here.
When faiss-gpu sees a GPU, ``train`` and ``add`` run on it and the index moves back to the
CPU before it is searched or saved."""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

import faiss
import numpy as np

from mvr.operators.ann.base import AnnIndex, check_params, check_positive_int, check_vectors
from mvr.operators.ann.defaults import (
    BRUTE_FORCE_BELOW,
    MAX_M,
    MIN_POINTS_PER_CENTROID,
    default_m,
    default_nbits,
    default_nlist,
    default_probes,
    training_sample_size,
)

INDEX_FILE = "index.faiss"
PQ_POINTS_PER_CODE = 64
PQ_ITERATIONS = 10  # GPU IVFPQ supports at most 96 bytes a code (with float16 lookup tables)
PARAMS = {"brute_force", "nlist", "m", "nbits", "training_sample_size", "nprobe", "use_gpu", "seed"}


def default_params(dim: int, n_vectors: int) -> dict[str, Any]:
    """Size-based defaults for about ``n_vectors`` (dim)-dimensional vectors (module docstring)."""
    nlist = default_nlist(n_vectors)
    sample = training_sample_size(n_vectors, nlist)
    return {
        "brute_force": n_vectors < BRUTE_FORCE_BELOW,
        "nlist": nlist,
        "m": default_m(dim),
        "nbits": default_nbits(sample),
        "training_sample_size": sample,
        "nprobe": default_probes(nlist),
        "use_gpu": None,
        "seed": 0,
    }


class FaissIVFPQIndex(AnnIndex):
    """FAISS ``IndexIVFPQ`` (METRIC_INNER_PRODUCT) over (n, dim) float32 vectors, or a flat
    ``IndexFlatIP`` when ``brute_force``. Search knob: ``nprobe`` (cells visited a query)."""

    backend = "faiss-ivfpq"
    knobs = ("nprobe",)
    probe_knob = "nprobe"

    def __init__(self, dim: int, params: dict[str, Any], index: Optional[faiss.Index] = None, trained: bool = False) -> None:
        super().__init__(dim)
        self._params = dict(params)
        self._gpu: Optional[tuple[Any, faiss.Index]] = None  # (resources, GPU index) while building
        self._built_on = "cpu"  # "cuda" once trained (and so filled) on the GPU
        self._index = index if index is not None else self._new_index()
        self._trained = trained  # train() was called (a flat index needs no training, but the contract is kept)

    @classmethod
    def create(cls, dim: int, n_vectors: int, **params: Any) -> "FaissIVFPQIndex":
        """New untrained index; ``params`` ⊆ {brute_force, nlist, m, nbits, training_sample_size,
        nprobe, use_gpu (None = when a GPU is visible), seed (training subsample)}."""
        check_params(cls.backend, params, PARAMS)
        dim = check_positive_int("dim", dim)
        if isinstance(n_vectors, bool) or not isinstance(n_vectors, (int, np.integer)) or n_vectors < 0:
            raise ValueError(f"n_vectors must be a non-negative integer, got {n_vectors!r}")
        resolved = default_params(dim, int(n_vectors))
        if "nlist" in params and "nprobe" not in params:
            resolved["nprobe"] = default_probes(check_positive_int("nlist", params["nlist"]))
        if "training_sample_size" in params and "nbits" not in params:
            sample = min(check_positive_int("training_sample_size", params["training_sample_size"]), max(int(n_vectors), 1))
            resolved["nbits"] = default_nbits(sample)
        resolved.update(params)
        for name in ("nlist", "m", "nbits", "training_sample_size", "nprobe"):
            resolved[name] = check_positive_int(name, resolved[name])
        if dim % resolved["m"]:
            raise ValueError(f"m={resolved['m']} sub-quantizers must divide dim={dim}")
        if resolved["nbits"] > 16:
            raise ValueError(f"nbits must be between 1 and 16, got {resolved['nbits']}")
        resolved["brute_force"] = bool(resolved["brute_force"])
        return cls(dim, resolved)

    def _new_index(self) -> faiss.Index:
        p = self._params
        if p["brute_force"]:
            return faiss.IndexFlatIP(self.dim)
        quantizer = faiss.IndexFlatIP(self.dim)  # faiss's wrapper keeps it alive with the index
        index = faiss.IndexIVFPQ(quantizer, self.dim, p["nlist"], p["m"], p["nbits"], faiss.METRIC_INNER_PRODUCT)
        # PQ codebooks: at most PQ_POINTS_PER_CODE points a code and PQ_ITERATIONS k-means
        # rounds (FAISS's 256 and 25 make PQ training dominate the build, for codes whose
        # errors the exact rescoring removes anyway)
        index.pq.cp.max_points_per_centroid = PQ_POINTS_PER_CODE
        index.pq.cp.niter = PQ_ITERATIONS
        return index

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def cells(self) -> int:
        return 1 if self._params["brute_force"] else int(self._params["nlist"])

    @property
    def _live(self) -> faiss.Index:
        return self._gpu[1] if self._gpu is not None else self._index

    @property
    def ntotal(self) -> int:
        return int(self._live.ntotal)

    @property
    def is_trained(self) -> bool:
        return self._trained and bool(self._live.is_trained)

    def train(self, sample: np.ndarray) -> None:
        """Train the coarse quantizer and PQ codebooks on a (n_sample, dim) sample; a sample
        larger than ``training_sample_size`` is subsampled (seeded). No-op for brute force."""
        x = check_vectors(sample, self.dim, "training sample")
        if self.ntotal:
            raise ValueError("cannot retrain a FAISS index that already holds vectors")
        if self._params["brute_force"]:
            self._trained = True
            return
        p = self._params
        need = max(p["nlist"], 1 << p["nbits"])
        if len(x) < need:
            raise ValueError(
                f"training sample has {len(x)} vectors; IVFPQ with nlist={p['nlist']}, nbits={p['nbits']} "
                f"needs at least {need} (ideally {MIN_POINTS_PER_CENTROID * need})"
            )
        if len(x) > p["training_sample_size"]:
            rng = np.random.default_rng(p["seed"])
            x = x[np.sort(rng.choice(len(x), p["training_sample_size"], replace=False))]
        self._index = self._new_index()
        if self._use_gpu():
            try:
                resources = faiss.StandardGpuResources()
                options = faiss.GpuClonerOptions()
                options.useFloat16 = True  # float16 PQ lookup tables: required for m > 48 at 8 bits
                gpu = faiss.index_cpu_to_gpu(resources, 0, self._index, options)
                gpu.train(x)
                self._gpu = (resources, gpu)
                self._trained = True
                self._built_on = "cuda"
                return
            except RuntimeError as e:  # a shape the GPU kernels do not support
                warnings.warn(f"FAISS GPU training failed ({e}); training on the CPU", RuntimeWarning, stacklevel=2)
                self._gpu = None
        self._index.train(x)
        self._trained = True
        self._built_on = "cpu"

    @property
    def build_device(self) -> str:
        return self._built_on

    def _use_gpu(self) -> bool:
        """GPU training when asked (use_gpu=True) or, by default, when faiss-gpu sees a GPU and
        the code shape is one GPU IVFPQ supports (≤ 8 bits, ≤ 96 bytes)."""
        flag = self._params["use_gpu"]
        has_gpu = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
        if flag and not has_gpu:
            raise ValueError("use_gpu=True but FAISS sees no GPU (is faiss-gpu installed?)")
        if flag is False or not has_gpu:
            return False
        supported: bool = self._params["nbits"] <= 8 and self._params["m"] <= MAX_M
        if not supported:
            warnings.warn(
                f"GPU IVFPQ needs nbits <= 8 and m <= {MAX_M} (got {self._params['nbits']}, {self._params['m']}); training on the CPU",
                RuntimeWarning,
                stacklevel=2,
            )
        return supported

    def _add(self, vectors: np.ndarray) -> None:
        self._live.add(vectors)

    def _to_cpu(self) -> None:
        """Move a GPU-built index back to the CPU (searching and saving use the CPU copy)."""
        if self._gpu is not None:
            self._index = faiss.index_gpu_to_cpu(self._gpu[1])
            self._gpu = None

    def _search(self, queries: np.ndarray, k: int, knobs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        self._to_cpu()
        nprobe = check_positive_int("nprobe", knobs.get("nprobe", self._params["nprobe"]))
        if self._params["brute_force"]:  # exact: nprobe does not apply
            scores, ids = self._index.search(queries, k)
        else:
            search_params = faiss.SearchParametersIVF()  # its nprobe set below, not as a keyword: faiss's stub has no kwargs __init__
            search_params.nprobe = min(nprobe, self._params["nlist"])
            scores, ids = self._index.search(queries, k, params=search_params)
        scores[ids < 0] = -np.inf
        return ids, scores

    def emptied(self) -> "FaissIVFPQIndex":
        """The trained coarse quantizer and PQ codebooks, no vectors (``faiss.clone_index``)."""
        self._to_cpu()
        index = faiss.clone_index(self._index)
        index.reset()
        return FaissIVFPQIndex(self.dim, self._params, index, trained=self._trained)

    def _save(self, directory: str) -> None:
        self._to_cpu()
        path = os.path.join(directory, INDEX_FILE)
        faiss.write_index(self._index, path + ".tmp")
        os.replace(path + ".tmp", path)

    @classmethod
    def _load(cls, directory: str, meta: dict[str, Any]) -> "FaissIVFPQIndex":
        path = os.path.join(directory, INDEX_FILE)
        if not os.path.isfile(path):
            raise ValueError(f"{directory}: {INDEX_FILE} is missing")
        index = faiss.read_index(path)
        expected = faiss.IndexFlatIP if meta["params"]["brute_force"] else faiss.IndexIVFPQ
        if not isinstance(index, expected) or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise ValueError(f"{path} is a {type(index).__name__}, expected an inner-product {expected.__name__}")
        if index.d != meta["dim"]:
            raise ValueError(f"{path} has dimension {index.d}, {directory}/ann.json says {meta['dim']}")
        return cls(meta["dim"], meta["params"], index, trained=meta["trained"])
