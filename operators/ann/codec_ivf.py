"""Codec-IVF backend: PLAID's candidate generation on mvr's own codec, the first stage whose
lists are the codes.

The cells are the coarse centroids of the stored vectors' codec (the residual codebook of
``pca-D+residual-N``, ``Codec.coarse_centroids``), and cell c's list holds the ids (vector
rows) of the vectors whose code names centroid c, read from the codes themselves
(``add_codes``): 4 bytes a vector (``uint32`` ids), no second copy of the vectors. A query
vector picks its ``nprobe`` best centroids by inner product, and every vector of their lists
is a hit scored q · c, the best list first (and further lists until k ids: whole lists, so
a search may return more than k); the product and the choice are ``list_probe``'s (a bfloat16
product and an exact shortlist where the CPU has bfloat16). Those scores are coarse (``coarse_scores``): the partition
scores each hit again against its own vector, by the query vector that found it
(``Partition.hits``: a few hundred to a few thousand codes a query, scored from the
memory-mapped codes) before the candidate stage keeps each query vector's best k' (IVF-flat
over the codes). There is no PQ code and no training when the
codec has centroids.

For a codec without centroids (``float16``, ``int8``, ``pq-M``) the cells are trained with
FAISS k-means (``nlist`` = ``defaults.default_nlist``) and vectors are assigned to their
nearest centroid (L2, as the residual codec assigns) by ``add``.

Files: ``centroids.npy`` (float16, (nlist, dim): a small copy of the codebook, per
partition, so the index opens without the codec), ``lists.npy`` ((ntotal,) uint32 ids, list
by list, ascending within a list; memory-mapped when opened) and ``list_offsets.npy``
((nlist + 1,) int64). Search knob: ``nprobe`` (lists a query vector visits; over a codec's
centroids 1 by default: PLAID's ``ncells`` for k = 10, and msmarco-sample's 403k token
vectors in 8,192 lists average 49 a list; over k-means cells 1/64 of them, at least 8, as
FAISS; ``default_nprobe``)."""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from mvr.operators.ann.base import AnnIndex, check_params, check_positive_int, check_vectors
from mvr.operators.ann.defaults import SCATTER_ROWS, cell_bytes, default_nlist, default_probes, training_sample_size
from mvr.operators.ann.list_probe import SHORTLIST, CentroidProduct, probe_lists
from mvr.operators.codecs import Codec

CENTROIDS_FILE = "centroids.npy"
LISTS_FILE = "lists.npy"
OFFSETS_FILE = "list_offsets.npy"
DEFAULT_NPROBE = 1
PARAMS = {"nlist", "nprobe", "training_sample_size", "seed"}
KMEANS_ITERATIONS = 10
ASSIGN_ROWS = 4096  # rows a block of the nearest-centroid search in ``add``


def cell_dtype(cells: int) -> type[np.unsignedinteger]:
    """The dtype a vector's cell is held in until the lists are built (``defaults.cell_bytes``)."""
    return np.uint16 if cell_bytes(cells) == 2 else np.uint32


def _stored(centroids: np.ndarray) -> np.ndarray:
    """The cells as the index keeps them: float16 values (its file's), as float32 for the
    products, so that a built index answers as the one opened from its files."""
    return np.ascontiguousarray(np.asarray(centroids).astype(np.float16), dtype=np.float32)


class CodecIVFIndex(AnnIndex):
    """Inverted lists of vector ids over coarse centroids (module docstring)."""

    backend = "codec-ivf"
    knobs = ("nprobe",)
    probe_knob = "nprobe"
    coarse_scores = True

    def __init__(
        self,
        dim: int,
        params: dict[str, Any],
        centroids: Optional[np.ndarray] = None,
        lists: Optional[np.ndarray] = None,
        offsets: Optional[np.ndarray] = None,
        from_codec: bool = False,
    ) -> None:
        super().__init__(dim)
        self._params = dict(params)
        self.centroids = None if centroids is None else np.ascontiguousarray(centroids, dtype=np.float32)
        self._from_codec = from_codec
        self._codec: Optional[Codec] = None
        n = 0 if self.centroids is None else len(self.centroids)
        self._lists = np.zeros(0, np.uint32) if lists is None else lists
        self._offsets = np.zeros(n + 1, np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
        self._pending: list[np.ndarray] = []  # cells (``cell_dtype``) of the vectors added since the lists were last built
        self._product: Optional[CentroidProduct] = None  # the centroids in the probe's product dtype, made on first search
        self._list_stats: Optional[tuple[np.ndarray, np.ndarray, float]] = None  # (the offsets they are of, list sizes, mean non-empty size)

    @classmethod
    def create(cls, dim: int, n_vectors: int, **params: Any) -> "CodecIVFIndex":
        """New index without cells; ``params`` ⊆ {nlist (k-means cells when the codec has no
        centroids), nprobe, training_sample_size, seed}. ``use_codec`` or ``train`` gives it
        its cells."""
        check_params(cls.backend, params, PARAMS)
        dim = check_positive_int("dim", dim)
        if isinstance(n_vectors, bool) or not isinstance(n_vectors, (int, np.integer)) or n_vectors < 0:
            raise ValueError(f"n_vectors must be a non-negative integer, got {n_vectors!r}")
        nlist = check_positive_int("nlist", params.get("nlist", default_nlist(int(n_vectors))))
        resolved = {"nlist": nlist, "nprobe": None, "training_sample_size": training_sample_size(int(n_vectors), nlist), "seed": 0, **params}
        for name in ("nlist", "training_sample_size") + (("nprobe",) if resolved["nprobe"] is not None else ()):
            resolved[name] = check_positive_int(name, resolved[name])
        return cls(dim, resolved)

    # ---- state
    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def cells(self) -> int:
        return 0 if self.centroids is None else len(self.centroids)

    @property
    def ntotal(self) -> int:
        return int(self._offsets[-1]) + sum(len(p) for p in self._pending)

    @property
    def is_trained(self) -> bool:
        return self.centroids is not None

    @property
    def default_nprobe(self) -> int:
        """Lists a query vector visits unless asked: the ``nprobe`` parameter when given, else
        ``DEFAULT_NPROBE`` over a codec's centroids (token vectors: a query has 32 of them), and
        1/64 of k-means cells (at least 8, ``defaults.default_probes``: the kinds scored with one
        query vector) otherwise."""
        given = self._params.get("nprobe")
        if given is not None:
            return int(given)
        return DEFAULT_NPROBE if self._from_codec else default_probes(self.cells)

    @property
    def takes_codes(self) -> bool:
        return self._codec is not None

    def use_codec(self, codec: Optional[Codec]) -> bool:
        """Take the cells from ``codec``'s coarse centroids, when it has them in the index's
        dimension: an empty index adopts them, one holding vectors (opened from its files,
        to grow or to be emptied) only when its cells are that codebook (its float16 copy);
        ``add_codes`` then fills the lists from the codes. False, and nothing changed,
        otherwise."""
        centroids = None if codec is None else codec.coarse_centroids()
        if centroids is None or centroids.shape[1] != self.dim:
            return False
        if self.centroids is not None and np.array_equal(self.centroids, _stored(centroids)):
            self._codec, self._from_codec = codec, True  # its own cells: it grows from the codes
            return True
        if self.ntotal:  # other cells list its vectors
            return False
        self.centroids, self._product = _stored(centroids), None
        self._offsets = np.zeros(len(centroids) + 1, np.int64)
        self._params["nlist"] = len(centroids)
        self._codec, self._from_codec = codec, True
        return True

    def train(self, sample: np.ndarray) -> None:
        """FAISS k-means of ``nlist`` cells on the (n_sample, dim) sample (subsampled to
        ``training_sample_size``, seeded); fewer cells when the sample is smaller."""
        import faiss

        x = check_vectors(sample, self.dim, "training sample")
        if self.ntotal:
            raise ValueError("cannot retrain a codec-ivf index that already holds vectors")
        if len(x) == 0:
            raise ValueError("training sample is empty")
        p = self._params
        if len(x) > p["training_sample_size"]:
            x = x[np.sort(np.random.default_rng(p["seed"]).choice(len(x), p["training_sample_size"], replace=False))]
        k = min(p["nlist"], len(x))
        km = faiss.Kmeans(self.dim, k, niter=KMEANS_ITERATIONS, seed=p["seed"], verbose=False)
        km.train(x)
        assert km.centroids is not None
        self.centroids, self._product = _stored(km.centroids), None
        self._offsets = np.zeros(k + 1, np.int64)
        self._params["nlist"] = k
        self._from_codec = False

    # ---- filling
    def _add(self, vectors: np.ndarray) -> None:
        import faiss

        assert self.centroids is not None
        quantizer = faiss.IndexFlatL2(self.dim)
        quantizer.add(self.centroids)
        cells = np.concatenate([quantizer.search(vectors[s : s + ASSIGN_ROWS], 1)[1][:, 0] for s in range(0, len(vectors), ASSIGN_ROWS)])
        self._pending.append(cells.astype(cell_dtype(self.cells)))

    def add_codes(self, codes: np.ndarray) -> np.ndarray:
        """Append vectors given as their codes ((n, bytes_per_vector) uint8 of the codec given
        to ``use_codec``): each goes to the list of the centroid its code names. Returns
        their ids, as ``add``."""
        if self._codec is None:
            raise ValueError("add_codes needs cells taken from the vectors' codec (use_codec)")
        start = self.ntotal
        cells = self._codec.coarse_ids(np.asarray(codes, dtype=np.uint8))
        if len(cells):
            self._pending.append(cells.astype(cell_dtype(self.cells)))
        return np.arange(start, start + len(cells), dtype=np.int64)

    def finalize(self) -> None:
        """Fold the vectors added since the last call into the lists (ids ascending in a
        list), by a counting sort: each vector's cell (2 B up to 65,536 cells) and the new
        lists (4 B an id) are all it holds a vector, besides one block's temporaries; the
        pending blocks are freed as they are copied (the plan's build RAM,
        ``operators.planning.capacity.ann_build_ram``, counts the same)."""
        if not self._pending:
            return
        n_old, nlist = int(self._offsets[-1]), self.cells
        n = n_old + sum(len(p) for p in self._pending)
        cells = np.empty(n, cell_dtype(nlist))
        if n_old:
            cells[np.asarray(self._lists)] = np.repeat(np.arange(nlist, dtype=cells.dtype), np.diff(self._offsets))
        at = n_old
        while self._pending:
            block = self._pending.pop(0)
            cells[at : at + len(block)] = block
            at += len(block)
        offsets = np.zeros(nlist + 1, np.int64)
        np.cumsum(np.bincount(cells, minlength=nlist), out=offsets[1:])
        lists = np.empty(n, np.uint32 if n < 2**32 else np.int64)
        free = offsets[:-1].copy()  # each list's next free slot
        for s in range(0, n, SCATTER_ROWS):
            block = cells[s : s + SCATTER_ROWS]
            order = np.argsort(block, kind="stable")  # the block's ids by cell, ascending within one
            by_cell = block[order]
            counts = np.bincount(by_cell, minlength=nlist)
            rank = np.arange(len(order)) - (np.cumsum(counts) - counts)[by_cell]  # place within its cell in the block
            lists[free[by_cell] + rank] = order + s
            free += counts
        self._lists, self._offsets = lists, offsets

    def emptied(self) -> "CodecIVFIndex":
        """The same cells, no vectors."""
        out = CodecIVFIndex(self.dim, self._params, self.centroids, from_codec=self._from_codec)
        out._codec = self._codec
        return out

    # ---- searching
    def probes(self, fraction: float) -> int:
        """Over a codec's centroids ``default_nprobe`` whatever the fraction: a share of a
        codebook's cells (1/64 of 8,192 is 128 lists) is no measure of the lists a query
        vector needs (PLAID visits 1 to 4); over k-means cells the base rule."""
        if self._from_codec:
            if not 0 < fraction <= 1:
                raise ValueError(f"probe fraction must be in (0, 1], got {fraction!r}")
            return min(self.cells, self.default_nprobe)
        return super().probes(fraction)

    def _search(self, queries: np.ndarray, k: int, knobs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Each query vector's best ``nprobe`` lists, and further ones in order of q · c until
        they hold k ids, every id of each list visited, each scored q · c of its centroid
        (coarse: ``coarse_scores``): ids and scores (nq, width), -1 / -inf past a query
        vector's ids, ``width`` its most ids (at least k)."""
        self.finalize()
        assert self.centroids is not None
        nlist = self.cells
        nprobe = min(check_positive_int("nprobe", knobs.get("nprobe", self.default_nprobe)), nlist)
        _, mean = self._sizes()
        # lists looked at: nprobe, or as many as hold about 2k ids at the mean list size
        look = min(nlist, max(nprobe, int(np.ceil(2 * k / mean)) + 1))
        if self._product is None:
            self._product = CentroidProduct(self.centroids)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        product = self._product(q)  # (nq, nlist): bfloat16 where native, a shortlist then rescored
        return probe_lists(q, self.centroids, product, self._product.exact, SHORTLIST, self._offsets, np.asarray(self._lists), nprobe, int(k), look)

    def _sizes(self) -> tuple[np.ndarray, float]:
        """(nlist,) list sizes and the mean size of a non-empty list (at least 1), computed once
        for the lists as they are (not per query)."""
        if self._list_stats is None or self._list_stats[0] is not self._offsets:
            sizes = np.diff(self._offsets)
            self._list_stats = (self._offsets, sizes, max(1.0, float(self._offsets[-1]) / max(1, int((sizes > 0).sum()))))
        return self._list_stats[1], self._list_stats[2]

    # ---- files
    def _save(self, directory: str) -> None:
        self.finalize()
        if self.centroids is None:
            raise ValueError("a codec-ivf index without cells cannot be saved: train it or give it its codec first")
        for name, array in ((CENTROIDS_FILE, self.centroids.astype(np.float16)), (LISTS_FILE, np.asarray(self._lists)), (OFFSETS_FILE, self._offsets)):
            path = os.path.join(directory, name)
            with open(path + ".tmp", "wb") as f:
                np.save(f, array)
            os.replace(path + ".tmp", path)

    def _extra_meta(self) -> dict[str, Any]:
        return {"cells_from_codec": self._from_codec}

    @classmethod
    def _load(cls, directory: str, meta: dict[str, Any]) -> "CodecIVFIndex":
        paths = [os.path.join(directory, name) for name in (CENTROIDS_FILE, LISTS_FILE, OFFSETS_FILE)]
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(f"{directory}: {os.path.basename(path)} is missing")
        centroids, offsets = np.load(paths[0]), np.load(paths[2])
        lists = np.load(paths[1], mmap_mode="r")
        if centroids.ndim != 2 or centroids.shape[1] != meta["dim"]:
            raise ValueError(f"{paths[0]} holds {centroids.shape} centroids, {directory}/ann.json says dimension {meta['dim']}")
        if offsets.shape != (len(centroids) + 1,) or offsets[0] != 0 or offsets[-1] != len(lists) or (np.diff(offsets) < 0).any():
            raise ValueError(f"{paths[2]}: list offsets do not cover the {len(lists)} ids of {paths[1]}")
        # the codec is not at hand here: ``use_codec`` gives it back (to grow from codes)
        return cls(meta["dim"], meta["params"], centroids, lists, offsets, from_codec=bool(meta.get("cells_from_codec")))
