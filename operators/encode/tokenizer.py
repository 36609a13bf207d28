"""Tokenization with ColBERT / PyLate conventions: marker tokens, text prefixes, [MASK] query
augmentation (attended to or not), a skiplist of document tokens, and splitting long
documents into overlapping token windows."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class Passage:
    """One window of a document. ``input_ids``: (n,) int32, specials and marker included;
    ``char_start``/``char_end``: the window's span in the document string (title included)."""

    doc_id: str
    passage_idx: int
    text: str
    input_ids: np.ndarray
    char_start: int
    char_end: int


class PassageTokenizer:
    """Wraps a Hugging Face *fast* tokenizer. Settings mirror ``TokenizerConfig``."""

    def __init__(
        self,
        hf_tokenizer: Any,
        passage_tokens: int = 256,
        stride_tokens: int = 192,
        split_long_documents: bool = True,
        query_tokens: int = 32,
        query_marker: Optional[str] = None,
        document_marker: Optional[str] = None,
        query_augmentation: bool = False,
        skip_punctuation: bool = False,
        title_separator: str = " ",
        query_text_prefix: str = "",
        document_text_prefix: str = "",
        attend_to_expansion_tokens: bool = False,
        skiplist: Sequence[str] = (),
        # recorded in the configuration only (where the conventions came from):
        checkpoint_conventions: bool = True,
        conventions_source: Optional[str] = None,
        conventions_from_checkpoint: Sequence[str] = (),
    ) -> None:
        if not getattr(hf_tokenizer, "is_fast", False):
            raise ValueError("a fast (Rust) tokenizer is required for character offsets")
        self.tok = hf_tokenizer
        self.passage_tokens = passage_tokens
        self.stride_tokens = stride_tokens
        self.split_long_documents = split_long_documents
        self.query_tokens = query_tokens
        self.query_augmentation = query_augmentation
        self.title_separator = title_separator
        self.cls_id = hf_tokenizer.cls_token_id
        self.sep_id = hf_tokenizer.sep_token_id
        self.mask_id = hf_tokenizer.mask_token_id
        self.pad_id = hf_tokenizer.pad_token_id or 0
        if self.cls_id is None or self.sep_id is None:
            raise ValueError("tokenizer needs [CLS]/[SEP]-style special tokens (cls_token, sep_token)")
        self.attend_to_expansion_tokens = attend_to_expansion_tokens
        self.q_marker = self._token_id(query_marker)
        self.d_marker = self._token_id(document_marker)
        self.q_prefix = self._text_ids(query_text_prefix)
        self.d_prefix = self._text_ids(document_text_prefix)
        skip = set(self._punctuation_ids().tolist()) if skip_punctuation else set()
        # PyLate's rule: each skiplist word is looked up as one token (an unknown one maps to
        # the [UNK] id, whose vectors are then dropped, as PyLate drops them)
        skip.update(int(t) for t in (self.tok.convert_tokens_to_ids(w) for w in skiplist) if t is not None)
        self.skip_ids = np.array(sorted(skip), dtype=np.int32)

    def _token_id(self, token: Optional[str]) -> Optional[int]:
        if token is None:
            return None
        tid = self.tok.convert_tokens_to_ids(token)
        if tid is None or tid == self.tok.unk_token_id:
            raise ValueError(f"marker token {token!r} is not in the tokenizer's vocabulary")
        return int(tid)

    def _text_ids(self, text: str) -> list[int]:
        """Token ids of a text prefix (no specials): placed after [CLS] and the marker, as
        tokenizing ``prefix + text`` places them for word-piece / BPE tokenizers when the
        prefix ends at a word boundary."""
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []

    def _punctuation_ids(self) -> np.ndarray:
        ids = set()
        for ch in string.punctuation:
            ids.update(self.tok.encode(ch, add_special_tokens=False))
        return np.array(sorted(ids), dtype=np.int32)

    # -- documents -------------------------------------------------------------------------

    def document_string(self, title: str, text: str) -> str:
        return f"{title}{self.title_separator}{text}" if title else text

    def split(self, doc_ids: Sequence[str], titles: Sequence[str], texts: Sequence[str]) -> list[Passage]:
        """Documents to passages, in order. A document of at most ``passage_tokens`` tokens
        (specials included) is one passage; a longer one becomes windows of that length that
        start every ``stride_tokens`` tokens, the last one ending at the document's end."""
        docs = [self.document_string(t, x) for t, x in zip(titles, texts)]
        if not docs:
            return []
        enc = self.tok(docs, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        prefix = [self.cls_id] + ([self.d_marker] if self.d_marker is not None else []) + self.d_prefix
        budget = self.passage_tokens - len(prefix) - 1
        if budget < 1:
            raise ValueError("passage_tokens leaves no room for text after the special tokens")
        out: list[Passage] = []
        for doc_id, doc, ids, offsets in zip(doc_ids, docs, enc["input_ids"], enc["offset_mapping"]):
            n = len(ids)
            if n <= budget or not self.split_long_documents:
                starts = [0]
            else:
                last = n - budget
                starts = list(range(0, last, self.stride_tokens)) + [last]
            for p, s in enumerate(starts):
                e = min(s + budget, n)
                window = prefix + list(ids[s:e]) + [self.sep_id]
                c0 = offsets[s][0] if e > s else 0
                c1 = offsets[e - 1][1] if e > s else 0
                out.append(Passage(doc_id, p, doc[c0:c1], np.asarray(window, dtype=np.int32), c0, c1))
        return out

    def keep_mask(self, input_ids: np.ndarray) -> np.ndarray:
        """(n,) bool: which document token vectors are stored (punctuation and skiplist
        tokens dropped when set)."""
        if self.skip_ids.size == 0:
            return np.ones(len(input_ids), dtype=bool)
        return ~np.isin(input_ids, self.skip_ids)

    # -- queries ---------------------------------------------------------------------------

    def queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Query token ids, (n,) int32 each: [CLS] [Q]? prefix? tokens [SEP], truncated to
        ``query_tokens``; with augmentation padded with [MASK] to exactly ``query_tokens``."""
        return self.query_inputs(texts)[0]

    def query_inputs(self, texts: Sequence[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(token ids, attention mask) per query, (n,) int32 each. The [MASK] padding of
        augmentation is attended to only with ``attend_to_expansion_tokens`` (ColBERT's
        ``attend_to_mask_tokens``); its vectors are part of the query either way."""
        prefix = [self.cls_id] + ([self.q_marker] if self.q_marker is not None else []) + self.q_prefix
        budget = self.query_tokens - len(prefix) - 1
        if budget < 1:
            raise ValueError("query_tokens leaves no room for text after the special tokens and prefix")
        enc = self.tok(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        ids_out, attention_out = [], []
        for ids in enc:
            q = prefix + list(ids[:budget]) + [self.sep_id]
            attention = [1] * len(q)
            if self.query_augmentation:
                pad = self.query_tokens - len(q)
                q += [self.mask_id] * pad
                attention += [int(self.attend_to_expansion_tokens)] * pad
            ids_out.append(np.asarray(q, dtype=np.int32))
            attention_out.append(np.asarray(attention, dtype=np.int32))
        return ids_out, attention_out
