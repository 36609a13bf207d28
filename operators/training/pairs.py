"""Training pairs: a query, the passage that answers it, and optionally hard negatives.

From any corpus, without labels (``unsupervised_pairs``):

- **Inverse Cloze Task** (Lee et al. 2019): one sentence of a document, drawn uniformly among
  its sentences of at least ``MIN_WORDS`` words, is the query; the document without that
  sentence (its title kept) is the positive. The sentence is always removed (the paper keeps
  it in 10% of pairs; mvr's queries are short and never copy a passage).
- **title → text**: a document's title is the query, its text the positive (documents with a
  title and a text of at least ``MIN_WORDS`` words).

A document gives at most one pair of each kind; the draws are a function of the document id
and the seed, so the same corpus and seed give the same pairs on any number of workers.
Queries are compared with an evaluation set's by ``query_key`` (case and spacing folded)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

MIN_WORDS = 4
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Pair:
    """One training example: ``query`` text, ``positive`` passage text and its ``positive_id``
    (the document id, to keep it out of mined negatives), ``negatives`` passage texts, and
    ``source`` (ict, title, labelled)."""

    query: str
    positive: str
    positive_id: str
    source: str
    negatives: tuple[str, ...] = field(default_factory=tuple)


def sentences(text: str) -> list[str]:
    """``text`` cut after '.', '!' or '?' followed by white space; empty pieces dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _rng(doc_id: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(doc_id.encode("utf-8", "surrogatepass")), seed])


def ict_pair(doc_id: str, title: str, text: str, seed: int, title_separator: str = " ") -> Pair | None:
    """The Inverse Cloze Task pair of one document, or None when it has fewer than two
    sentences or none of ``MIN_WORDS`` words."""
    parts = sentences(text)
    candidates = [i for i, s in enumerate(parts) if len(s.split()) >= MIN_WORDS]
    if len(parts) < 2 or not candidates:
        return None
    pick = candidates[int(_rng(doc_id, seed).integers(len(candidates)))]
    rest = " ".join(s for i, s in enumerate(parts) if i != pick)
    return Pair(parts[pick], f"{title}{title_separator}{rest}" if title else rest, doc_id, "ict")


def title_pair(doc_id: str, title: str, text: str) -> Pair | None:
    """(title, text) of one document, or None without a title or a text of ``MIN_WORDS`` words."""
    if not title.strip() or len(text.split()) < MIN_WORDS:
        return None
    return Pair(title.strip(), text, doc_id, "title")


def unsupervised_pairs(docs: Iterable[tuple[str, str, str]], seed: int, kinds: Sequence[str] = ("ict", "title")) -> list[Pair]:
    """The pairs of ``kinds`` (``ict``, ``title``) of each (doc_id, title, text), in order."""
    out: list[Pair] = []
    for doc_id, title, text in docs:
        if "ict" in kinds and (p := ict_pair(doc_id, title, text, seed)) is not None:
            out.append(p)
        if "title" in kinds and (p := title_pair(doc_id, title, text)) is not None:
            out.append(p)
    return out


def query_key(text: str) -> str:
    """A query as compared with an evaluation set's: case folded, white space collapsed."""
    return " ".join(text.casefold().split())


def overlap(train_queries: Iterable[str], eval_queries: Iterable[str]) -> list[str]:
    """The training queries that are also evaluation queries (``query_key``), sorted."""
    held = {query_key(q) for q in eval_queries}
    return sorted({q for q in train_queries if query_key(q) in held})


def pick_negatives(ranked: Sequence[str], positive_id: str, n: int, rng: np.random.Generator, skip: int = 0) -> list[str]:
    """``n`` document ids drawn from a ranking (best first) of the positive's query, never the
    positive itself, leaving out the first ``skip`` (likely unjudged positives)."""
    pool = [d for d in ranked[skip:] if d != positive_id]
    if len(pool) <= n:
        return pool
    return [pool[i] for i in sorted(rng.choice(len(pool), size=n, replace=False))]
