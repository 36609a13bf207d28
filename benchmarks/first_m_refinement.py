"""First-m read from the token codes plus a refinement of them: exact first-m quality against
float16 (docs/codecs.md, "First-m as a refinement of the token codes"), for the refinements
the index could store (``pq-M``: the index's ``refine-M``) and others beside them.

    python benchmarks/first_m_refinement.py \\
        --index /tmp/f16/cranfield --dataset ../shared/datasets/cranfield \\
        --index /tmp/f16/msmarco-sample --dataset ../shared/datasets/msmarco-sample \\
        --index /tmp/f16/dbpedia-sample --dataset ../shared/datasets/dbpedia-sample \\
        [--refinements none,bits-1,bits-2,bits-4,pq-64,pq-96,pq-128] [--seeds 0,1,2] [--kind first-m|centroids|pooled] [--json OUT]

The indexes store every kind as float16 (``mvr index CORPUS INDEX --codec float16
--pooled-codec float16``), as for ``benchmarks/codecs.py --kind first-m``. Per seed the token
codec (``pca-192+residual-1``, the default) is trained on 65,536 token vectors drawn from every
passage, as ``benchmarks/codecs.py`` draws them. Each passage's first m token vectors x are
then held as their token code plus a refinement of it: the anchor a = α·lift(token decode)
(lift: the PCA matrix's transpose back to the model's dimension; α the least-squares scale of
the lifted sample onto the sample) and the residual r = x − a stored as ``bits-N`` (N bits a
dimension, buckets at the sample residuals' quantiles, decoded to each bucket's mean, as the
residual codec does) or ``pq-M`` (a FAISS product quantizer of r, M bytes, trained on the
sample's residuals); ``none`` is the token codes alone. First-m scores the decoded a + r̂
(unit length) against the pooled query vector; Δ is nDCG@10 against the float16 vectors.
``--kind centroids`` / ``pooled``: the index's own centroid or pooled vectors (its pooled
group float16 too) held the same way, a token code and a refinement each, ranked by
softmax-centroid or pooled."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np

from mvr.operators import codecs
from mvr.operators.codecs.refinement import anchor_scale, lift_matrix, lifted
from mvr.operators.codecs.residual import quantile_buckets
from mvr.pipeline.retrieval.searcher import load_query_encoder
from mvr.storage.beir import read_collection

SAMPLE = 1 << 16  # token vectors each codec is trained on (the indexing job's default)
TOKEN_CODEC = "pca-192+residual-1"  # auto at MiniLM's 384 dimensions


def _codecs_benchmark() -> Any:
    """benchmarks/codecs.py as a module (its name would be the standard library's ``codecs``)."""
    spec = importlib.util.spec_from_file_location("mvr_codecs_benchmark", Path(__file__).resolve().parent / "codecs.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_cb = _codecs_benchmark()


class Refined:
    """The token codec plus a refinement ``kind`` ("none", "bits-N", "pq-M") of its residual at
    the full dimension, trained on ``sample`` (n, dim) unit token vectors. ``roundtrip(x)``:
    x (n, dim) → the vectors first-m would score, unit length. ``pq-M`` is the index's own
    ``refine-M`` (``operators/codecs/refinement.py``: its α and product quantizer, the norm
    stored as a float16); ``bits-N`` quantises the same residual per dimension (quantile
    buckets decoded to their means, as the residual codec does), measured beside it."""

    def __init__(self, token_codec: codecs.Codec, kind: str, sample: np.ndarray, seed: int) -> None:
        self.token_codec, self.kind = token_codec, kind
        if kind.startswith("pq-"):
            self.refined = codecs.Refined(token_codec, codecs.train_refinement(f"refine-{kind[3:]}", sample, token_codec, seed=seed))
            return
        self.alpha, anchors = anchor_scale(token_codec, np.ascontiguousarray(sample, dtype=np.float32))
        if kind.startswith("bits-"):
            cutoffs, weights = quantile_buckets(sample - self.alpha * anchors, 2 ** int(kind[5:]))
            self.cutoffs, self.weights = cutoffs.astype(np.float32), weights.astype(np.float32)
        elif kind != "none":
            raise SystemExit(f"unknown refinement {kind!r}: none, bits-N or pq-M")

    def roundtrip(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if self.kind.startswith("pq-"):
            return self.refined.decode(self.refined.encode(x))
        v = self.alpha * lifted(self.token_codec, self.token_codec.encode(x), lift_matrix(self.token_codec))
        if self.kind.startswith("bits-"):
            v += self.weights[np.searchsorted(self.cutoffs, x - v, side="right")]
        return v / np.linalg.norm(v, axis=1, keepdims=True)


MODE = {"first-m": "first-m", "centroids": "softmax-centroid", "pooled": "pooled"}  # the vector kind → the mode ranking it


def run_collection(index: str, dataset: str, kinds: list[str], seeds: list[int], vector_kind: str = "first-m") -> dict[str, Any]:
    """Δ nDCG@10 of each refinement and seed against float16 on one index, under
    ``vector_kind``'s mode: first-m (each passage's first m token vectors), or the index's own
    centroids or pooled vectors held as a token code plus a refinement of it."""
    manifest, part, tokens = _cb.read_reference(index, print)
    if vector_kind == "first-m":
        stored = _cb.first_rows(tokens, int(manifest.config.get("compress", {}).get("first_m", 8)))
    else:
        stored = _cb.read_kind(index, manifest, vector_kind)
    mode = MODE[vector_kind]
    collection = read_collection(dataset)
    judged = collection.judged_queries
    encoded = dict(zip(judged, load_query_encoder(manifest.config)(list(judged.values()))))
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]
    float16 = codecs.train("float16", stored.vectors[:1].astype(np.float32))  # also scores each refinement's float32 vectors
    reference = _cb._ndcg10(_cb._decode_rescore(float16, float16.encode(stored.vectors), stored, part, encoded, mode)[2], qrels)
    out: dict[str, Any] = {"collection": collection.name, "queries": len(judged), "float16_ndcg10": round(reference, 4), "delta": {}}
    for seed in seeds:
        sample = tokens.vectors[_cb.sample_rows(tokens, SAMPLE, seed)].astype(np.float32)
        token_codec = codecs.train(TOKEN_CODEC, sample, seed=seed, n_vectors=len(tokens.vectors))
        for kind in kinds:
            vectors = Refined(token_codec, kind, sample, seed).roundtrip(stored.vectors)
            run = _cb._decode_rescore(float16, float16.encode(vectors), stored, part, encoded, mode)[2]
            delta = round(_cb._ndcg10(run, qrels) - reference, 4)
            out["delta"].setdefault(kind, []).append(delta)
            print(f"{collection.name} seed {seed} {kind}: {delta:+.4f}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", default=[], help="a float16 mvr index (repeat, paired with --dataset)")
    p.add_argument("--dataset", action="append", default=[], help="its BEIR dataset directory")
    p.add_argument("--refinements", default="none,bits-1,bits-2,bits-4,pq-64,pq-96,pq-128")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--kind", choices=sorted(MODE), default="first-m", help="the vectors refined (default first-m; centroids and pooled: the index's own)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if not args.index or len(args.index) != len(args.dataset):
        raise SystemExit("give --index and --dataset in pairs")
    kinds, seeds = args.refinements.split(","), [int(s) for s in args.seeds.split(",")]
    results = [run_collection(i, d, kinds, seeds, args.kind) for i, d in zip(args.index, args.dataset)]
    print(f"\nΔ nDCG@10 against float16, exact {MODE[args.kind]} over {args.kind}: worst (mean) over seeds " + ", ".join(map(str, seeds)))
    print("| refinement | " + " | ".join(r["collection"] for r in results) + " |")
    for kind in kinds:
        cells = [f"{min(r['delta'][kind]):+.4f} ({np.mean(r['delta'][kind]):+.4f})" for r in results]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
