"""The sparse side: BM25 over passages with bm25s, partitioned without changing the scores.

BM25's idf and length normalisation depend on the whole collection (number of passages,
document frequency of each term, mean passage length). A partition built with bm25s on its
own passages would score with its own statistics, so its scores would depend on how the
index is split. Here every partition is built with the collection's statistics
(``TermStats``, summed over the partitions first), so partition p's scores are exactly the
scores of one bm25s index over every passage, restricted to p's passages: merging the
partitions' top-k gives the collection's top-k for any number of partitions.

Text analysis is bm25s's (lower-case, ``\\w\\w+`` tokens, English stopwords) with Snowball
stemming from PyStemmer; both are configurable."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

import bm25s
import numpy as np
import scipy.sparse as sp
from bm25s import scoring as bm25_scoring

from mvr.operators.retrieval.partition import PartitionResult, in_allowed
from mvr.operators.retrieval.ranking import Ranked, top_documents

# methods whose scores need no non-occurrence term (BM25L and BM25+ add one per query term,
# which would not survive partitioning as simply)
METHODS = ("lucene", "robertson", "atire")


class Analyzer:
    """Text → BM25 terms: bm25s's tokenizer (lower-case, ``stopwords`` list name or None) and
    a PyStemmer Snowball ``stemmer`` (language name, or None for none)."""

    def __init__(self, stopwords: Optional[str] = "en", stemmer: Optional[str] = "english") -> None:
        self.stopwords = stopwords
        self.stemmer_language = stemmer
        if stemmer:
            import Stemmer

            try:
                self.stemmer = Stemmer.Stemmer(stemmer)
            except KeyError:
                raise ValueError(f"unknown stemmer language {stemmer!r}; PyStemmer has {', '.join(Stemmer.algorithms())}") from None
        else:
            self.stemmer = None

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        """One list of terms per text (empty when nothing is left after stopwords)."""
        if not texts:
            return []
        terms: list[list[str]] = bm25s.tokenize(list(texts), stopwords=self.stopwords or [], stemmer=self.stemmer, return_ids=False, show_progress=False)
        return terms


@dataclass
class TermStats:
    """Collection statistics BM25 needs: ``df`` {term: passages containing it}, ``n_docs``
    passages, ``n_terms`` terms over all passages (mean length = n_terms / n_docs)."""

    df: Counter[str] = field(default_factory=Counter)
    n_docs: int = 0
    n_terms: int = 0

    @classmethod
    def of(cls, corpus_terms: Iterable[Sequence[str]]) -> "TermStats":
        stats = cls()
        for terms in corpus_terms:
            stats.df.update(set(terms))
            stats.n_docs += 1
            stats.n_terms += len(terms)
        return stats

    def __add__(self, other: "TermStats") -> "TermStats":
        return TermStats(self.df + other.df, self.n_docs + other.n_docs, self.n_terms + other.n_terms)

    @property
    def mean_length(self) -> float:
        return self.n_terms / self.n_docs if self.n_docs else 0.0


class CollectionBM25(bm25s.BM25):  # type: ignore[misc]  # bm25s ships no type information: its BM25 reads as Any
    """A bm25s index over some passages scored with collection-wide ``TermStats`` (bm25s's
    documented extension point: overriding ``build_index_from_tokens``)."""

    def __init__(self, stats: Optional[TermStats] = None, **params: Any) -> None:
        super().__init__(**params)
        self.stats = stats
        self.nonoccurrence_array = None

    def build_index_from_tokens(
        self, corpus_tokens: Sequence[Sequence[str]], show_progress: bool = False, leave_progress: bool = False
    ) -> tuple[dict[str, Any], dict[str, int]]:
        if self.method not in METHODS:
            raise ValueError(f"BM25 method {self.method!r} cannot be partitioned; choose one of {', '.join(METHODS)}")
        stats = self.stats if self.stats is not None else TermStats.of(corpus_tokens)
        vocab = {t: i for i, t in enumerate(dict.fromkeys(t for doc in corpus_tokens for t in doc))}
        ids = [[vocab[t] for t in doc] for doc in corpus_tokens]
        missing = [t for t in vocab if stats.df.get(t, 0) == 0]
        if missing:
            raise ValueError(f"{len(missing)} terms of these passages are not in the collection statistics (e.g. {missing[0]!r})")
        idf = bm25_scoring._build_idf_array(
            {i: stats.df[t] for t, i in vocab.items()}, stats.n_docs, bm25_scoring._select_idf_scorer(self.idf_method), self.dtype
        )
        local_df = Counter(i for doc in ids for i in set(doc))
        data, doc_idx, voc_idx = bm25_scoring._build_scores_and_indices_for_matrix(
            ids,
            idf,
            stats.mean_length,
            local_df,
            self.k1,
            self.b,
            self.delta,
            None,
            method=self.method,
            dtype=self.dtype,
            int_dtype=self.int_dtype,
            show_progress=False,
        )
        m = sp.csc_matrix((data, (doc_idx, voc_idx)), shape=(len(ids), len(vocab)), dtype=self.dtype)
        return {"data": m.data, "indices": m.indices, "indptr": m.indptr, "num_docs": len(ids)}, vocab


class BM25Partition:
    """BM25 over one partition's passages: ``doc_ids`` (n,), ``passage_idx`` (n,) int32 and the
    bm25s index whose rows are those passages in order; ``live`` (n,) bool, False for a
    deleted passage, which scores 0 (None: all live)."""

    def __init__(self, index: bm25s.BM25, doc_ids: Sequence[str], passage_idx: np.ndarray, live: Optional[np.ndarray] = None) -> None:
        if index.scores["num_docs"] != len(doc_ids) or len(passage_idx) != len(doc_ids):
            raise ValueError(f"BM25 index over {index.scores['num_docs']} passages, {len(doc_ids)} doc ids, {len(passage_idx)} passage numbers")
        self.index = index
        self.doc_ids = list(doc_ids)
        self.passage_idx = np.asarray(passage_idx, dtype=np.int32)
        self.live = None if live is None or np.all(live) else np.asarray(live, bool)

    @classmethod
    def build(cls, corpus_terms: Sequence[Sequence[str]], doc_ids: Sequence[str], passage_idx: np.ndarray, stats: TermStats, **params: Any) -> "BM25Partition":
        """Index analysed passages (``Analyzer`` output) with collection ``stats``; ``params``:
        bm25s's ``k1``, ``b``, ``method``."""
        index = CollectionBM25(stats, **params)
        index.index(list(map(list, corpus_terms)), create_empty_token=False, show_progress=False)
        return cls(index, doc_ids, passage_idx)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """(n,) float32 BM25 scores of every passage for an analysed query (0 without a match)."""
        ids = self.index.get_tokens_ids([t for t in terms if t in self.index.vocab_dict])
        if not ids:
            return np.zeros(len(self), np.float32)
        out = np.asarray(self.index.get_scores_from_ids(ids), dtype=np.float32)
        if self.live is not None:
            out[~self.live] = 0.0
        return out

    def rank(self, terms: Sequence[str], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """This partition's top-``k`` documents (a document scores as its best passage) among
        the passages matching at least one query term (and ``allowed``: sorted rows or a bool
        mask, ``operators.retrieval.partition.in_allowed``; None: all)."""
        t0 = time.perf_counter()
        s = self.scores(terms)
        rows = np.flatnonzero(s > 0)
        if allowed is not None:
            rows = rows[in_allowed(rows, allowed)]
        if len(rows) == 0:
            return PartitionResult(Ranked(), 0, (time.perf_counter() - t0) * 1e3)
        rows = top_rows(s, rows, k, self.doc_ids)
        ranked = top_documents(s[rows], [self.doc_ids[r] for r in rows], self.passage_idx[rows], k)
        return PartitionResult(ranked, len(rows), (time.perf_counter() - t0) * 1e3)

    def save(self, directory: str) -> None:
        self.index.save(directory, show_progress=False)

    @classmethod
    def load(cls, directory: str, doc_ids: Sequence[str], passage_idx: np.ndarray, live: Optional[np.ndarray] = None) -> "BM25Partition":
        index = bm25s.BM25.load(directory, show_progress=False, verbosity=0)
        return cls(index, doc_ids, passage_idx, live)


def top_rows(scores: np.ndarray, rows: np.ndarray, k: int, doc_ids: Sequence[str]) -> np.ndarray:
    """The best-scoring ``rows`` (unsorted) holding at least ``k`` distinct documents (or all
    of them): the top 2k first, widened while passages of the same documents crowd it."""
    m = min(len(rows), 2 * k)
    while True:
        picked = rows[np.argpartition(-scores[rows], m - 1)[:m]] if m < len(rows) else rows
        if m == len(rows) or len({doc_ids[r] for r in picked}) >= k:
            return picked
        m = min(len(rows), 2 * m)
