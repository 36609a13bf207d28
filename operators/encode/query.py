"""Query encoding: ColBERT query tokens (markers, text prefix, [MASK] augmentation, attended
to or not) through the same model and projection as the passages, giving every query-side
representation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import numpy as np

from mvr.operators.codecs import Codec
from mvr.operators.encode.compress import l2_normalize, pooled
from mvr.operators.encode.tokenizer import PassageTokenizer

if TYPE_CHECKING:  # the model (torch, transformers) is not loaded by what only reads EncodedQuery
    from mvr.operators.encode.encoder import TokenEncoder


@dataclass
class EncodedQuery:
    """``tokens``: (n_q, dim) float32 L2-normalised; ``pooled``: (dim,) float32 L2-normalised."""

    text: str
    tokens: np.ndarray
    pooled: np.ndarray

    @classmethod
    def text_only(cls, text: str) -> "EncodedQuery":
        """A query for ``bm25`` alone: its text, no vectors."""
        return cls(text, np.zeros((0, 1), np.float32), np.zeros(1, np.float32))


class QueryEncoder:
    """Texts → EncodedQuery in the spaces of the index's decoded vectors: the model, the
    index's projection, then the codecs' ``project`` (a PCA, unit length) when given:
    ``codecs["tokens"]`` for the query's token vectors, ``codecs["pooled"]`` for its pooled
    vector (what the pooled, first-m and centroid vectors are scored against)."""

    def __init__(
        self,
        encoder: TokenEncoder,
        tokenizer: PassageTokenizer,
        projection: Optional[np.ndarray] = None,
        pooling: str = "mean",
        codecs: Optional[Mapping[str, Codec]] = None,
    ) -> None:
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.projection = projection
        self.pooling = pooling
        self.codecs = codecs

    def __call__(self, texts: Sequence[str], batch_size: int = 32) -> list[EncodedQuery]:
        ids, attention = self.tokenizer.query_inputs(texts)
        raw = self.encoder.encode(ids, batch_size, self.tokenizer.pad_id, attention)
        if self.projection is not None:
            raw = [r @ self.projection for r in raw]
        pools = pooled(raw, self.pooling)
        tokens = [l2_normalize(r) for r in raw]
        if self.codecs is not None:
            tokens = [self.codecs["tokens"].project(t) for t in tokens]
            pools = self.codecs["pooled"].project(pools)
        return [EncodedQuery(t, v, p) for t, v, p in zip(texts, tokens, pools)]
