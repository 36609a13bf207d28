"""Test helpers: BEIR data loading and an independent evaluation with ir-measures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import ir_measures
from ir_measures import nDCG

# ../shared/datasets/README.md, exact search with the packaged all-MiniLM-L6-v2 weights.
REFERENCE_NDCG10 = {
    "msmarco-sample": {"pooled": 0.798, "maxsim": 0.802, "first-m": 0.778, "softmax-centroid": 0.671, "bm25": 0.727},
    "dbpedia-sample": {"pooled": 0.511, "maxsim": 0.481, "first-m": 0.414, "softmax-centroid": 0.285, "bm25": 0.368},
}


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

    from storage.codec_file import codec_of, load_codecs
    from storage.manifest import load_manifest
    from storage.partitions import exact_partition

    m = load_manifest(index_url)
    codec_set = load_codecs(index_url, m.codecs)
    part = exact_partition(index_url, m, kind, codec_set)
    return part.doc_ids, part.passage_idx, part.vectors.take(np.arange(len(part))), codec_of(codec_set, kind)


# Codecs whose vectors score within the exact-path tolerance of float16 (int8: a per-vector
# scale, measured within it for every mode on both collections, test_search_ann.py).
NEAR_LOSSLESS = ("float16", "int8")
EXACT_TOLERANCE = 0.01  # an exact path further than this from the reference has a bug
CODEC_ALLOWANCE = 0.01  # what a lossy codec may cost on top (issue 15's target for the default)


def reference_tolerance(index_url: str, mode: str) -> float:
    """How far exact search of ``mode`` over the index may be from the datasets README's
    float16 figure: ``EXACT_TOLERANCE``, plus ``CODEC_ALLOWANCE`` when the mode's vectors are
    stored by a lossy codec (the default tokens codec, pca-64+residual-2, measured −0.011 on
    dbpedia-sample's maxsim in the pipeline, −0.017 before its sample was drawn from every
    passage, and −0.001 ± 0.015 in benchmarks/codecs.py; docs/codecs.md)."""
    from operators.scoring import MODE_VECTORS
    from storage.codec_file import KIND_GROUP
    from storage.manifest import load_manifest

    name = load_manifest(index_url).codecs[KIND_GROUP[MODE_VECTORS[mode]]]["name"]
    return EXACT_TOLERANCE + (0.0 if name in NEAR_LOSSLESS else CODEC_ALLOWANCE)
