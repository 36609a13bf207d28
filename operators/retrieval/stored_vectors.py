"""One vector kind of a run of passages as it is stored: codes (or plain float vectors) in
one or more segments that may be memory maps, and the passages' offsets into them. Nothing
is decoded until asked for, and then only the rows asked for.

A segment is a 2-D array: (vectors, bytes_per_vector) uint8 codes of the index's codec, or
(vectors, dim) float16/float32 vectors when there is no codec (``codec=None``). Segment s
holds the global vector rows [starts[s], starts[s + 1]). Passage i owns the vector rows
``offsets[i]:offsets[i + 1]``; for a kind with one vector a passage (``single``: pooled)
offsets are 0..n and ``take`` returns a matrix instead of a Packed."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import numpy as np

from mvr.operators.codecs import Codec
from mvr.operators.kernels import matmul
from mvr.operators.packed import Coded, Packed

DECODE_BLOCK = 4096  # passages decoded at a time by ``blocks``
# float32 bytes a block of ``scan`` holds (decoded vectors and the caller's similarities):
# measured on msmarco-sample's exact MaxSim (2-core VM, float16 and pca-64+residual-2 codes),
# 16-32 MiB blocks were fastest; 2-4 MiB (L2-sized) ones were 1.2-1.8x slower, each block's
# matmul and cast waking the BLAS / OpenMP threads again; 64 MiB ones 1.4x slower again
SCAN_BYTES = 16 << 20


class StoredVectors:
    """``segments``: 2-D arrays of codes (uint8, ``codec`` given) or float vectors, rows in
    order; ``offsets``: (n + 1,) int64 passage → vector rows, offsets[0] == 0, offsets[-1] ==
    total rows; ``single``: one vector a passage (offsets must be 0..n)."""

    def __init__(self, segments: Sequence[np.ndarray], offsets: np.ndarray, codec: Optional[Codec] = None, single: bool = False) -> None:
        self.segments = [s for s in segments if len(s)] or [s for s in segments[:1]]
        self.codec = codec
        self.single = single
        self.offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.array([len(s) for s in self.segments], dtype=np.int64)
        self.starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.starts[1:])
        if len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != self.starts[-1]:
            raise ValueError(f"offsets cover {self.offsets[-1] if len(self.offsets) else 0} vector rows, the segments hold {self.starts[-1]}")
        if single and len(self.offsets) - 1 != self.starts[-1]:
            raise ValueError("one vector a passage: offsets must be 0..n")
        width = {s.shape[1] for s in self.segments if s.ndim == 2}
        if codec is not None:
            if any(s.dtype != np.uint8 for s in self.segments) or width - {codec.bytes_per_vector}:
                raise ValueError(f"codes of {codec.name} are ({codec.bytes_per_vector},) uint8 rows, got {sorted(width)}")
            self.dim = codec.dim_out
        else:
            if len(width) > 1:
                raise ValueError(f"segments of different dimensions {sorted(width)}")
            self.dim = width.pop() if width else 0
        self._scan_bounds: dict[int, np.ndarray] = {}

    @classmethod
    def from_arrays(cls, vectors: "Packed | np.ndarray | StoredVectors") -> "StoredVectors":
        """Plain float vectors already in memory (a Packed, or an (n, dim) matrix: single)."""
        if isinstance(vectors, StoredVectors):
            return vectors
        if isinstance(vectors, Packed):
            return cls([vectors.vectors], vectors.offsets)
        m = np.asarray(vectors)
        return cls([m], np.arange(len(m) + 1, dtype=np.int64), single=True)

    # ---- sizes
    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_vectors(self) -> int:
        return int(self.starts[-1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def owner(self, vector_rows: np.ndarray) -> np.ndarray:
        """(k,) int64: the passage each vector row belongs to (a binary search, no per-vector
        table held in memory)."""
        return np.searchsorted(self.offsets, np.asarray(vector_rows, dtype=np.int64), side="right") - 1

    # ---- reading
    def raw(self, vector_rows: np.ndarray) -> np.ndarray:
        """The stored rows (codes or float vectors) at ``vector_rows``, in that order: only the
        pages holding them are read from a memory-mapped segment."""
        rows = np.asarray(vector_rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.n_vectors):
            raise IndexError(f"vector rows out of range [0, {self.n_vectors})")
        # rows checked above: take(mode="clip") skips numpy's per-item bounds checks (several
        # times faster than fancy indexing on these narrow rows)
        if len(self.segments) == 1:
            return np.take(self.segments[0], rows, axis=0, mode="clip")
        seg = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((len(rows),) + self.segments[0].shape[1:], dtype=self.segments[0].dtype)
        if len(rows) and (seg[1:] >= seg[:-1]).all():  # ascending (candidate rows are): one slice a segment
            cuts = np.r_[0, np.flatnonzero(seg[1:] != seg[:-1]) + 1, len(rows)]
            for a, b in zip(cuts[:-1], cuts[1:]):
                s = seg[a]
                np.take(self.segments[s], rows[a:b] - self.starts[s], axis=0, mode="clip", out=out[a:b])
            return out
        for s in np.unique(seg):  # one step per segment touched, not per vector
            mask = seg == s
            out[mask] = np.take(self.segments[s], rows[mask] - self.starts[s], axis=0, mode="clip")
        return out

    def decode(self, vector_rows: np.ndarray) -> np.ndarray:
        """(k, dim) float32: the vectors at ``vector_rows`` decoded."""
        raw = self.raw(vector_rows)
        return self.codec.decode(raw) if self.codec is not None else raw.astype(np.float32)

    def take(self, passages: np.ndarray, for_scoring: bool = False) -> Packed | np.ndarray:
        """The passages at ``passages`` (in that order), decoded to float32: a Packed, or an
        (k, dim) matrix when ``single``. Decodes only their vectors. ``for_scoring`` (a
        Packed a scorer reads once): their codes as ``Coded`` when the codec
        ``scores_codes`` (nothing decoded: the scorer computes from the codes; ``single``
        too, one row a passage); otherwise
        the codec's vectors before their rescaling to unit length, with the factors as
        ``Packed.row_scale`` (``Codec.decode_scaled``; the scorers apply them)."""
        idx = np.asarray(passages, dtype=np.int64)
        if self.single:
            if for_scoring and self.codec is not None and self.codec.scores_codes:  # one code a passage
                return Coded(self.raw(idx), np.arange(len(idx) + 1, dtype=np.int64), None, self.codec)
            return self.decode(idx)
        starts, lengths = self.offsets[idx], self.offsets[idx + 1] - self.offsets[idx]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rows = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
        if for_scoring and self.codec is not None:
            if self.codec.scores_codes:
                return Coded(self.raw(rows), offsets, None, self.codec)
            vectors, scale = self.codec.decode_scaled(self.raw(rows))
            return Packed(vectors, offsets, scale)
        return Packed(self.decode(rows), offsets)

    def similarities(self, query_vectors: np.ndarray, vector_rows: np.ndarray) -> np.ndarray:
        """(m, k) float32 q · v of (m, dim) query vectors and the vectors at ``vector_rows``
        (decoded, unit length where the codec's are): from the codes when the codec
        ``scores_codes``, else decoded and multiplied."""
        if self.codec is not None and self.codec.scores_codes:
            return self.codec.similarities(query_vectors, self.raw(vector_rows))
        return matmul(np.asarray(query_vectors, dtype=np.float32), self.decode(vector_rows).T)

    def pair_similarities(self, query_vectors: np.ndarray, query_index: np.ndarray, vector_rows: np.ndarray) -> np.ndarray:
        """(k,) float32 ``query_vectors[query_index[t]]`` · v_t of the vectors at
        ``vector_rows`` (each scored by one query vector): the codec's
        ``pair_similarities`` from the codes when it ``scores_codes``, else decoded."""
        if self.codec is not None and self.codec.scores_codes:
            return self.codec.pair_similarities(query_vectors, query_index, self.raw(vector_rows))
        q = np.asarray(query_vectors, dtype=np.float32)[np.asarray(query_index, dtype=np.int64)]
        sims: np.ndarray = np.einsum("ij,ij->i", q, self.decode(vector_rows)).astype(np.float32)
        return sims

    def decode_range(self, lo: int, hi: int) -> np.ndarray:
        """(hi - lo, dim) float32: the vector rows [lo, hi) decoded, read as slices of the
        segments they span (no gather)."""
        return self.decode_range_into(lo, hi, np.empty((hi - lo, self.dim), np.float32))

    def decode_range_into(self, lo: int, hi: int, out: np.ndarray) -> np.ndarray:
        """The vector rows [lo, hi) decoded into ``out`` ((hi - lo, dim) float32), each
        segment's slice straight into its part of ``out`` (no gather, no concatenation)."""
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        for s in range(max(first, 0), len(self.segments)):
            a, b = max(lo, int(self.starts[s])), min(hi, int(self.starts[s + 1]))
            if a >= hi:
                break
            if a < b:
                raw = self.segments[s][a - self.starts[s] : b - self.starts[s]]
                if self.codec is not None:
                    self.codec.decode(raw, out=out[a - lo : b - lo])
                else:
                    np.copyto(out[a - lo : b - lo], raw)
        return out

    def scan_bounds(self, max_rows: int) -> np.ndarray:
        """(blocks + 1,) int64 passage boundaries of ``scan``: consecutive whole passages of
        at most ``max_rows`` vector rows a block (a longer passage is a block alone). One
        binary search a block; remembered per ``max_rows``."""
        bounds = self._scan_bounds.get(max_rows)
        if bounds is None:
            if len(self._scan_bounds) >= 64:  # one entry a batch width: keep a few
                self._scan_bounds.clear()
            n, out = len(self), [0]
            while out[-1] < n:
                stop = int(np.searchsorted(self.offsets, self.offsets[out[-1]] + max_rows, side="right")) - 1
                out.append(min(n, max(stop, out[-1] + 1)))
            bounds = self._scan_bounds[max_rows] = np.asarray(out, dtype=np.int64)
        return bounds

    def scan_rows(self, extra_floats_a_row: int = 0) -> int:
        """Vector rows a ``scan`` block holds so that it and ``extra_floats_a_row`` float32
        a row of the caller's (e.g. the block's similarities) stay within ``SCAN_BYTES``."""
        return max(256, SCAN_BYTES // (4 * (max(self.dim, 1) + extra_floats_a_row)))

    def scan(self, max_rows: Optional[int] = None) -> Iterator[tuple[int, Packed | np.ndarray]]:
        """(first passage, decoded passages) of every passage in order, whole passages of at
        most ``max_rows`` vector rows (default ``scan_rows()``) a block, decoded into one
        float32 buffer reused for every block: a block is overwritten by the next, so score
        it before asking for the next one and keep nothing of it. A Packed, or an
        (k, dim) matrix when ``single``."""
        bounds = self.scan_bounds(max_rows or self.scan_rows())
        rows = self.offsets[bounds]
        buf = np.empty((int(np.diff(rows).max(initial=0)), self.dim), np.float32)
        for start, stop, lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), rows[:-1].tolist(), rows[1:].tolist()):
            block = self.decode_range_into(lo, hi, buf[: hi - lo])
            yield start, (block if self.single else Packed(block, self.offsets[start : stop + 1] - lo))

    def blocks(self, passages: int = DECODE_BLOCK) -> Iterator[tuple[int, Packed | np.ndarray]]:
        """(first passage, decoded passages) of every passage, ``passages`` at a time: the
        whole run scored without holding it decoded (each block read as slices)."""
        for start in range(0, len(self), passages):
            stop = min(start + passages, len(self))
            if self.single:
                yield start, self.decode_range(start, stop)
            else:
                lo, hi = int(self.offsets[start]), int(self.offsets[stop])
                yield start, Packed(self.decode_range(lo, hi), self.offsets[start : stop + 1] - lo)

    def vector_blocks(self, rows: int = 65_536) -> Iterator[np.ndarray]:
        """Every vector decoded, (≤ rows, dim) float32 at a time, in row order."""
        for start in range(0, self.n_vectors, rows):
            yield self.decode_range(start, min(start + rows, self.n_vectors))

    def code_blocks(self, rows: int = 65_536) -> Iterator[np.ndarray]:
        """Every stored row as it is stored (codes, or float vectors without a codec),
        (≤ rows, width) at a time, in row order: a segment's slice, copied only where a
        block spans two segments."""
        for start in range(0, self.n_vectors, rows):
            stop = min(start + rows, self.n_vectors)
            first = int(np.searchsorted(self.starts, start, side="right")) - 1
            if stop <= self.starts[first + 1]:
                yield self.segments[first][start - self.starts[first] : stop - self.starts[first]]
            else:
                yield self.raw(np.arange(start, stop, dtype=np.int64))

    def stored_bytes(self) -> int:
        """Bytes of the stored rows (codes or vectors) this run covers."""
        return sum(int(s.nbytes) for s in self.segments)


class JoinedVectors(StoredVectors):
    """A kind whose code is split between two stored runs of the same passages: row j of a
    passage here is ``anchor``'s row j of that passage (another kind's codes: the token codes)
    followed by this run's own row (``segments``: the rest of the code), decoded by ``codec``
    (``anchor``'s width plus this run's). First-m with a refinement
    (``operators/codecs/refinement.py``): each passage's first m token codes and their
    refinement codes, with no code held twice. Each passage has at most as many rows here as
    in ``anchor``."""

    def __init__(self, segments: Sequence[np.ndarray], offsets: np.ndarray, codec: Codec, anchor: StoredVectors) -> None:
        own = codec.bytes_per_vector - (anchor.codec.bytes_per_vector if anchor.codec is not None else 0)
        part = [np.asarray(s).reshape(len(s), own) for s in segments]
        super().__init__(part, offsets)
        if len(anchor) != len(self) or np.any(self.lengths > anchor.lengths):
            raise ValueError(f"{len(self)} passages joined with {len(anchor)} whose codes hold fewer rows")
        self.codec, self.dim, self.anchor = codec, codec.dim_out, anchor

    def raw(self, vector_rows: np.ndarray) -> np.ndarray:
        """The joined codes at ``vector_rows``: the anchor's rows then this run's, side by side."""
        rows = np.asarray(vector_rows, dtype=np.int64)
        own = super().raw(rows)
        p = self.owner(rows)
        return np.concatenate([self.anchor.raw(self.anchor.offsets[p] + rows - self.offsets[p]), own], axis=1)

    def decode_range_into(self, lo: int, hi: int, out: np.ndarray) -> np.ndarray:
        assert self.codec is not None  # set in __init__
        return self.codec.decode(self.raw(np.arange(lo, hi, dtype=np.int64)), out=out)

    def code_blocks(self, rows: int = 65_536) -> Iterator[np.ndarray]:
        for start in range(0, self.n_vectors, rows):
            yield self.raw(np.arange(start, min(start + rows, self.n_vectors), dtype=np.int64))

    def scan(self, max_rows: Optional[int] = None) -> Iterator[tuple[int, Packed | np.ndarray]]:
        """(first passage, passages) of every passage in order, as ``StoredVectors.scan``
        but each block as its joined codes (``Coded``): the codec scores them without the
        decode that would lift every code to the full dimension (``Refined.similarities``)."""
        assert self.codec is not None  # set in __init__
        bounds = self.scan_bounds(max_rows or self.scan_rows())
        rows = self.offsets[bounds]
        for start, stop, lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), rows[:-1].tolist(), rows[1:].tolist()):
            yield start, Coded(self.raw(np.arange(lo, hi, dtype=np.int64)), self.offsets[start : stop + 1] - lo, None, self.codec)
