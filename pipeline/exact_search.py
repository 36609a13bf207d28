"""Exact (brute-force) search over an index's shards, in-process: every passage is scored
with the mode's exact scorer, passages are aggregated to documents by max."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from operators import scoring
from operators.compress import projection_matrix
from operators.encoder import TokenEncoder
from operators.packed import Packed
from operators.query import EncodedQuery, QueryEncoder
from operators.tokenizer import PassageTokenizer
from pipeline.config import IndexConfig
from storage.manifest import Manifest, load_manifest
from storage.schema import arrow_to_matrix, arrow_to_packed
from storage.shards import iter_shards

MODES = ("maxsim", "softmax-centroid", "first-m", "pooled")
MODE_COLUMN = {"maxsim": "tokens", "softmax-centroid": "centroids", "first-m": "first_m", "pooled": "pooled"}
MAX_K = 1000


@dataclass
class Hit:
    doc_id: str
    score: float
    passage_idx: int


def load_query_encoder(manifest: Manifest, encoder: Optional[TokenEncoder] = None) -> QueryEncoder:
    """The query encoder an index was built for (same model, conventions and projection)."""
    config = IndexConfig.model_validate(manifest.config)
    encoder = encoder or TokenEncoder(config.model.name, config.model.device, config.model.dtype)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    c = config.compress
    projection = projection_matrix(encoder.dim, c.projection_dim, c.projection_seed) if c.projection_dim else None
    return QueryEncoder(encoder, tokenizer, projection, c.pooling)


class ExactSearcher:
    """Loads the vectors of the requested modes into memory and scores all passages."""

    def __init__(self, index_url: str, modes: Sequence[str] = MODES, encoder: Optional[TokenEncoder] = None) -> None:
        unknown = set(modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown mode(s) {sorted(unknown)}; choose from {', '.join(MODES)}")
        self.manifest = load_manifest(index_url)
        self.modes = tuple(modes)
        columns = ["doc_id", "passage_idx"] + [MODE_COLUMN[m] for m in self.modes]
        doc_ids, passage_idx, parts = [], [], {m: [] for m in self.modes}
        for table in iter_shards(index_url, [s.path for s in self.manifest.shards], columns):
            doc_ids.extend(table["doc_id"].to_pylist())
            passage_idx.append(table["passage_idx"].to_numpy())
            for m in self.modes:
                col = table[MODE_COLUMN[m]]
                parts[m].append(arrow_to_matrix(col) if m == "pooled" else arrow_to_packed(col))
        self.doc_ids = np.asarray(doc_ids, dtype=object)
        self.passage_idx = np.concatenate(passage_idx) if passage_idx else np.zeros(0, np.int32)
        self.vectors = {}  # float32 once, so queries do not convert float16 each time
        for m, p in parts.items():
            if m == "pooled":
                self.vectors[m] = np.concatenate(p).astype(np.float32) if p else np.zeros((0, self.manifest.dim), np.float32)
            else:
                packed = Packed.concat(p) if p else Packed(np.zeros((0, self.manifest.dim), np.float32), np.zeros(1, np.int64))
                self.vectors[m] = Packed(packed.vectors.astype(np.float32), packed.offsets)
        self.query_encoder = load_query_encoder(self.manifest, encoder)

    def passage_scores(self, query: EncodedQuery, mode: str) -> np.ndarray:
        """(n_passages,) exact scores of every passage."""
        v = self.vectors[mode]
        if mode == "maxsim":
            return scoring.maxsim(query.tokens, v)
        if mode == "first-m":
            return scoring.first_m_max(query.pooled, v)
        if mode == "softmax-centroid":
            return scoring.softmax_centroid(query.pooled, v)
        return scoring.dot(query.pooled, v)

    def search(self, queries: Sequence[str], k: int = 10, mode: str = "maxsim") -> list[list[Hit]]:
        if mode not in self.modes:
            raise ValueError(f"mode {mode!r} not loaded; this searcher has {', '.join(self.modes)}")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")
        out = []
        for q in self.query_encoder(list(queries)):
            scores = self.passage_scores(q, mode)
            out.append(top_documents(scores, self.doc_ids, self.passage_idx, k))
        return out


def top_documents(scores: np.ndarray, doc_ids: np.ndarray, passage_idx: np.ndarray, k: int) -> list[Hit]:
    """Best ``k`` documents, a document scoring as its best passage."""
    order = np.argsort(-scores, kind="stable")
    hits, seen = [], set()
    for i in order:
        d = doc_ids[i]
        if d in seen:
            continue
        seen.add(d)
        hits.append(Hit(d, float(scores[i]), int(passage_idx[i])))
        if len(hits) == k:
            break
    return hits
