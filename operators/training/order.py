"""Which pairs each training step takes: a seeded order a pass over the pairs, the same for a
resumed run, optionally grouped by length.

Step s of rank r (of ``workers``) takes the ``batch_size`` positions from
(s · workers + r) · batch_size of the concatenated passes, so a run resumed at step s sees
exactly the batches the lost one would have, and the workers together take every pair once
a pass. With ``lengths``, each window of ``window`` batches of a pass is sorted longest
first (Hugging Face's length-grouped sampler): a batch's passages have similar lengths, so
little of its padded (batch, tokens) tensor is padding."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from numpy.typing import NDArray


class BatchOrder:
    """The pairs of each (step, rank).

    Parameters
    ----------
    n_pairs : int
        Rows of the pairs file.
    batch_size, workers, seed : int
        Pairs a step a worker, data-parallel workers, the order's seed.
    lengths : (n_pairs,) array, optional
        A pair's size (tokens of its longest passage: ``pair_lengths``); None: no grouping.
    window : int
        Batches sorted together when grouping.

    Examples
    --------
    >>> order = BatchOrder(6, batch_size=2, workers=1, seed=0)
    >>> sorted(np.concatenate([order.indices(s, 0) for s in range(3)]).tolist())
    [0, 1, 2, 3, 4, 5]
    >>> grouped = BatchOrder(6, 2, 1, 0, lengths=np.array([5, 900, 7, 800, 6, 850]), window=3)
    >>> [sorted(grouped.indices(s, 0).tolist()) for s in range(3)]
    [[1, 5], [2, 3], [0, 4]]
    """

    def __init__(self, n_pairs: int, batch_size: int, workers: int, seed: int, lengths: Optional[np.ndarray] = None, window: int = 50) -> None:
        if lengths is not None and len(lengths) != n_pairs:
            raise ValueError(f"{len(lengths)} lengths for {n_pairs} pairs")
        self.n_pairs, self.batch_size, self.workers, self.seed, self.window = n_pairs, batch_size, workers, seed, window
        self.lengths = None if lengths is None else np.asarray(lengths)

    def indices(self, step: int, rank: int) -> np.ndarray:
        """(batch_size,) int64 rows of the pairs file."""
        first = (step * self.workers + rank) * self.batch_size
        positions = np.arange(first, first + self.batch_size)
        passes = positions // self.n_pairs
        out = np.empty(self.batch_size, dtype=np.int64)
        for p in np.unique(passes):
            sel = passes == p
            out[sel] = self._pass(int(p))[positions[sel] % self.n_pairs]
        return out

    @functools.lru_cache(maxsize=2)  # noqa: B019 - two passes held; the order lives as long as its run
    def _pass(self, epoch: int) -> np.ndarray:
        """The pairs' order in one pass: (n_pairs,) a seeded permutation, length-grouped."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.n_pairs)
        if self.lengths is None:
            return order
        span = self.window * self.batch_size
        for start in range(0, self.n_pairs, span):  # one iteration per window of batches, not per pair
            chunk = order[start : start + span]
            order[start : start + span] = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
        return order


def pair_lengths(pairs: pa.Table, count: Optional[Callable[[list[str]], Sequence[int] | np.ndarray]] = None, chunk: int = 8192) -> np.ndarray:
    """(n_pairs,) the longest of each pair's positive and negatives (what its batch pads to),
    by ``count`` (texts → (n,) lengths, e.g. tokens; None: characters), ``chunk`` texts a call."""

    def measure(texts: pa.Array) -> np.ndarray:
        if count is None:
            chars: NDArray[np.int64] = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
            return chars
        parts = [np.asarray(count(texts.slice(i, chunk).to_pylist()), dtype=np.int64) for i in range(0, len(texts), chunk)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    negatives = pairs.column("negatives").combine_chunks()
    lengths = measure(pairs.column("positive").combine_chunks())
    np.maximum.at(lengths, pc.list_parent_indices(negatives).to_numpy(zero_copy_only=False), measure(pc.list_flatten(negatives)))
    return lengths
