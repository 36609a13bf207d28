"""The ANN backends' size-based defaults, as plain arithmetic: imported by the backends
(``ivfpq``, ``scann_index``) and by the capacity planner (``operators/planning/capacity.py``),
which must not import FAISS or ScaNN (``mvr plan`` runs anywhere). One copy of each rule."""

from __future__ import annotations

import math

# Below this many vectors both backends store the vectors flat and search them exactly: a
# brute-force pass over < 4096 x dim floats costs well under a millisecond a query, and the
# quantizers have too few training points to be accurate anyway.
BRUTE_FORCE_BELOW = 4096
MIN_POINTS_PER_CENTROID = 39  # FAISS warns below this many training points a centroid
SUBVECTOR_DIMS = 8  # dims a sub-quantizer codes by default (ColBERT: 128 dims in 16 bytes)
MAX_M = 96  # GPU IVFPQ supports at most 96 bytes a code (with float16 lookup tables)
MIN_PARTITION_SIZE = 50  # ScaNN's tree default min_partition_size
AH_CENTERS = 16  # ScaNN lut16 asymmetric hashing: 16 centres a block, needs ≥ 16 training points


def nearest_power_of_two(x: float) -> int:
    """The power of two nearest to ``x`` on a log scale (x >= 1)."""
    return 1 << max(0, round(math.log2(max(x, 1.0))))


def default_probes(cells: int) -> int:
    """Cells a query visits by default: 1/64 of them (about 1/64 of the data), at least 8 and
    at most all. With the search core's over-fetching and exact rescoring this already gives
    overlap@10 ≥ 0.99 with exact search on the sample collections (docs/search.md); 1/16
    scanned twice the codes for no gain there."""
    return int(min(cells, max(8, math.ceil(cells / 64))))


def training_sample_size(n_vectors: int, cells: int) -> int:
    """Vectors to train on: all of them up to 65,536, else enough for 64 per coarse cell
    (k-means quality saturates well before FAISS's own cap of 256 a centroid)."""
    return int(min(max(n_vectors, 1), max(65_536, 64 * cells)))


# ---- FAISS IVFPQ


def default_m(dim: int) -> int:
    """Sub-quantizers for ``dim``: the divisor m ≤ 96 whose sub-vector width dim/m is closest
    to 8 on a log scale (ties → more sub-quantizers)."""
    divisors = [m for m in range(1, min(dim, MAX_M) + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(math.log2(dim / m / SUBVECTOR_DIMS)), -m))


def default_nlist(n_vectors: float) -> int:
    """4·sqrt(n) to the nearest power of two, at most the largest power of two ≤ n/39."""
    cap = 1 << max(0, int(math.floor(math.log2(max(n_vectors / MIN_POINTS_PER_CENTROID, 1.0)))))
    return max(1, min(nearest_power_of_two(4 * math.sqrt(max(n_vectors, 1))), cap))


def default_nbits(sample_size: int) -> int:
    """8 bits a code, fewer when the sample has < 39 points for each of the 2^nbits codes."""
    return int(min(8, max(1, math.floor(math.log2(max(sample_size, 1) / MIN_POINTS_PER_CENTROID)))))


# ---- ScaNN


def default_num_leaves(n_vectors: int) -> int:
    """round(sqrt(n)), at least 1 and at most n/50."""
    return int(max(1, min(round(math.sqrt(max(n_vectors, 1))), n_vectors // MIN_PARTITION_SIZE)))


# ---- codec-ivf's build (``CodecIVFIndex.finalize``: a counting sort of the vectors by cell)

SCATTER_ROWS = 1 << 22  # ids a block of the sort
SCATTER_BYTES_PER_ROW = 40  # the block's temporaries a row: int64 order, ranks and slots, its cells


def cell_bytes(cells: int) -> int:
    """Bytes a vector's cell is held in until the lists are built: 2 up to 65,536 cells (a
    residual codebook's at most), else 4."""
    return 2 if cells <= 1 << 16 else 4
