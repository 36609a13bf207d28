"""Packed variable-length vector sets: one (total, dim) matrix plus (n + 1,) offsets.

Passage i owns rows ``offsets[i]:offsets[i + 1]``. This is how shards, partitions and the
exact scorers hold token vectors, first-m vectors and centroids without padding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

import numpy as np

from mvr.operators.kernels import matmul

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


@dataclass
class Packed:
    """``vectors``: (total, dim); ``offsets``: (n + 1,) int64, offsets[0] == 0;
    ``row_scale``: None, or (total,) float32 factors: row r stands for ``vectors[r] *
    row_scale[r]`` (a codec's decoded vectors before their rescaling to unit length,
    ``Codec.decode_scaled``), which the scorers apply to their similarities instead of the
    vectors."""

    vectors: np.ndarray
    offsets: np.ndarray
    row_scale: Optional[np.ndarray] = None

    @classmethod
    def from_list(cls, arrays: Sequence[np.ndarray], dim: int, dtype: DTypeLike = np.float32) -> "Packed":
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        vectors = np.concatenate(arrays).astype(dtype, copy=False) if len(arrays) else np.zeros((0, dim), dtype)
        return cls(vectors.reshape(-1, dim), offsets)

    @classmethod
    def concat(cls, parts: Sequence["Packed"]) -> "Packed":
        if any(p.row_scale is not None for p in parts):
            parts = [cls(p.scaled(), p.offsets) for p in parts]
        vectors = np.concatenate([p.vectors for p in parts])
        shifts = np.cumsum([0] + [p.offsets[-1] for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, shifts)])
        return cls(vectors, offsets.astype(np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]]

    def take(self, indices: np.ndarray, dtype: Optional[DTypeLike] = None) -> "Packed":
        """The passages at ``indices`` (in that order) as a new Packed, vectors cast to
        ``dtype`` (None: keep). Copies only the selected rows."""
        idx = np.asarray(indices, dtype=np.int64)
        starts = self.offsets[idx]
        lengths = self.offsets[idx + 1] - starts  # not self.lengths[idx]: that diffs every passage
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # row r of the result comes from starts[owner] + (r - offsets[owner])
        rows = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
        vectors = self.vectors[rows]
        scale = None if self.row_scale is None else self.row_scale[rows]
        return Packed(vectors if dtype is None else vectors.astype(dtype, copy=False), offsets, scale)

    def scaled(self) -> np.ndarray:
        """The vectors with ``row_scale`` applied (a copy; ``vectors`` itself when None)."""
        return self.vectors if self.row_scale is None else self.vectors * self.row_scale[:, None]

    def similarities(self, query_vectors: np.ndarray) -> np.ndarray:
        """(m, total) float32 q · row of (m, dim) query vectors and every row,
        ``row_scale`` applied to each row's column."""
        sims = matmul(query_vectors, self.vectors.T)
        if self.row_scale is not None:
            sims *= self.row_scale
        return sims

    def owners(self) -> np.ndarray:
        """(total,) int64: the passage each row belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)


class CodeScorer(Protocol):
    """What ``Coded`` needs of a codec (``operators.codecs.Codec`` is one)."""

    def similarities(self, query_vectors: np.ndarray, codes: np.ndarray) -> np.ndarray: ...


@dataclass
class Coded(Packed):
    """Packed passages kept as a codec's codes for scoring: ``vectors`` are the (total,
    bytes_per_vector) uint8 codes of ``codec`` (in row order, as a Packed's vectors), and
    ``similarities`` is the codec's, computed from the codes (``Codec.similarities``)
    without a decoded matrix. What ``StoredVectors.take`` gives a scorer when the codec
    ``scores_codes``."""

    codec: Optional[CodeScorer] = None

    def similarities(self, query_vectors: np.ndarray) -> np.ndarray:
        assert self.codec is not None, "Coded passages name their codec"
        return self.codec.similarities(query_vectors, self.vectors)

    def take(self, indices: np.ndarray, dtype: Optional[DTypeLike] = None) -> "Coded":
        """The passages at ``indices`` as Coded (their code rows copied; ``dtype`` must be None:
        codes are not cast)."""
        if dtype is not None:
            raise ValueError("codes are not cast: take them without a dtype")
        part = super().take(indices)
        return Coded(part.vectors, part.offsets, None, self.codec)
