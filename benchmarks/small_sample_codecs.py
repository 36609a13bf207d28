"""Codecs trained on the token vectors of a few documents (a tiny corpus: the sample pass
keeps every vector), judged on documents outside the sample, which is what ``mvr add`` later
codes with the same codec files: the measurements behind ``operators.codecs.choose``
(docs/codecs.md, "A sample too small").

    python benchmarks/small_sample_codecs.py --dataset ../shared/datasets/msmarco-sample \\
        [--docs 1,2,3,4,5,6,20,60,200] [--held-out 300] [--queries 50] [--json OUT]

The first ``--held-out`` + max(``--docs``) documents of the collection and its first
``--queries`` queries (msmarco-sample has 50) are encoded with the packaged MiniLM (token vectors L2-normalised, as
stored). For each N of ``--docs``, every codec of ``CODECS`` (a PCA to D dimensions when
the N documents have at least D vectors: a sample spans at most as many dimensions as it has
vectors) is trained on the token vectors of the first N
documents (seed 0, ``n_vectors`` = their count, as ``mvr index`` trains a corpus that small),
and the last ``--held-out`` documents are ranked for every query by exact MaxSim over their
decoded codes (queries through the codec's ``project``). Column: overlap@10 with the ranking
over the float vectors; ``pca-192+float16`` is the PCA alone."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from mvr.operators import codecs
from mvr.operators.encode.compress import l2_normalize
from mvr.operators.encode.encoder import TokenEncoder
from mvr.operators.encode.tokenizer import PassageTokenizer

CODECS = ("pca-192+residual-1", "pca-128+residual-1", "pca-64+residual-1", "pca-32+residual-1", "pca-16+residual-1", "residual-1", "pca-192+float16")


def encode(dataset: Path, n_docs: int, n_queries: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(each of the first ``n_docs`` documents' token vectors, each of the first ``n_queries``
    queries' token vectors), float32, unit length."""
    enc = TokenEncoder("minilm", device="cpu", dtype="float32")
    tok = PassageTokenizer(enc.tokenizer)
    with open(dataset / "corpus.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line) for _, line in zip(range(n_docs), f)]
    passages = tok.split([d["_id"] for d in docs], [d.get("title", "") for d in docs], [d["text"] for d in docs])
    if len(passages) != len(docs):
        raise SystemExit(f"{len(passages)} passages of {len(docs)} documents: a long document was split; choose another collection")
    vectors = [l2_normalize(v).astype(np.float32) for v in enc.encode([p.input_ids for p in passages], 32, tok.pad_id)]
    with open(dataset / "queries.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(n_queries), f)]
    ids, attention = tok.query_inputs(texts)
    queries = [l2_normalize(v).astype(np.float32) for v in enc.encode(ids, 32, tok.pad_id, attention)]
    return vectors, queries


def top10(queries: list[np.ndarray], docs: np.ndarray, offsets: np.ndarray) -> list[set[int]]:
    """Each query's 10 best documents by exact MaxSim (``docs``: every document's vectors back
    to back, document i in rows offsets[i]:offsets[i+1])."""
    out = []
    for q in queries:
        s = q @ docs.T
        scores = np.array([s[:, a:b].max(axis=1).sum() for a, b in zip(offsets[:-1], offsets[1:])])
        out.append(set(np.argsort(-scores, kind="stable")[:10].tolist()))
    return out


def run(dataset: Path, sizes: list[int], held_out: int, n_queries: int) -> list[dict]:
    """One row a (documents in the sample, codec): vectors, codebook size, overlap@10."""
    t0 = time.time()
    vectors, queries = encode(dataset, max(sizes) + held_out, n_queries)
    later = vectors[-held_out:]
    docs, offsets = np.concatenate(later), np.cumsum([0] + [len(v) for v in later])
    reference = top10(queries, docs, offsets)
    print(f"encoded {len(vectors)} documents and {len(queries)} queries in {time.time() - t0:.0f} s", file=sys.stderr)
    rows = []
    for n_docs in sizes:
        sample = np.concatenate(vectors[:n_docs])
        for name in CODECS:
            stages = codecs.parse_name(name)
            if len(stages) == 2 and len(sample) < int(stages[0][1]):  # type: ignore[arg-type]
                continue  # fewer vectors than dimensions: the last directions are arbitrary
            codec = codecs.train(name, sample, seed=0, n_vectors=len(sample))
            decoded = codec.decode(codec.encode(docs))
            found = top10([codec.project(q) for q in queries], decoded, offsets)
            inner = getattr(codec, "inner", codec)
            rows.append(
                {
                    "documents": n_docs,
                    "vectors": len(sample),
                    "codec": name,
                    "centroids": getattr(inner, "n_centroids", None),
                    "overlap@10": float(np.mean([len(a & b) / 10 for a, b in zip(found, reference)])),
                }
            )
            print(f"{n_docs:5d} docs {len(sample):7,d} vectors  {name:20s} k={rows[-1]['centroids']!s:6s} overlap@10 {rows[-1]['overlap@10']:.3f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, required=True, help="a BEIR directory (corpus.jsonl, queries.jsonl)")
    p.add_argument("--docs", default="1,2,3,4,5,6,20,60,200", help="documents in the training sample, comma-separated")
    p.add_argument("--held-out", type=int, default=300, help="documents ranked, after the samples' documents")
    p.add_argument("--queries", type=int, default=50, help="the first queries of queries.jsonl")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    rows = run(args.dataset, [int(n) for n in args.docs.split(",")], args.held_out, args.queries)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
