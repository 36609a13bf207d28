"""First-m read from the token codes plus a refinement of them: exact first-m quality against
float16 (docs/codecs.md, "First-m as a refinement of the token codes"). A design measured
before it is built, for issue 49's "one copy of the first m tokens".

    python benchmarks/first_m_refinement.py \\
        --index /tmp/f16/cranfield --dataset ../shared/datasets/cranfield \\
        --index /tmp/f16/msmarco-sample --dataset ../shared/datasets/msmarco-sample \\
        --index /tmp/f16/dbpedia-sample --dataset ../shared/datasets/dbpedia-sample \\
        [--refinements none,bits-1,bits-2,bits-4,pq-64,pq-96,pq-128] [--seeds 0,1,2] [--json OUT]

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
(unit length) against the pooled query vector; Δ is nDCG@10 against the float16 vectors."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import faiss
import ir_measures
import numpy as np

from mvr.operators import codecs
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
    x (n, dim) → the vectors first-m would score, unit length."""

    def __init__(self, token_codec: codecs.Codec, kind: str, sample: np.ndarray) -> None:
        self.token_codec, self.kind = token_codec, kind
        self.lift = token_codec.transform.matrix if isinstance(token_codec, codecs.Composed) and token_codec.transform is not None else None
        raw = self._anchor(sample, 1.0)
        self.alpha = float((sample * raw).sum() / (raw * raw).sum())
        r = np.ascontiguousarray(sample - self.alpha * raw, dtype=np.float32)
        if kind.startswith("pq-"):
            self.pq = faiss.ProductQuantizer(r.shape[1], int(kind[3:]), 8)
            self.pq.cp.min_points_per_centroid = 1
            self.pq.train(r)
        elif kind.startswith("bits-"):
            levels = 2 ** int(kind[5:])
            values = r.ravel()
            self.cutoffs = np.quantile(values, np.arange(1, levels) / levels).astype(np.float32)
            buckets = np.searchsorted(self.cutoffs, values, side="right")
            self.weights = np.array([values[buckets == b].mean() for b in range(levels)], np.float32)
        elif kind != "none":
            raise SystemExit(f"unknown refinement {kind!r}: none, bits-N or pq-M")

    def _anchor(self, x: np.ndarray, alpha: float) -> np.ndarray:
        decoded = self.token_codec.decode(self.token_codec.encode(x))
        return alpha * (decoded @ self.lift if self.lift is not None else decoded)

    def roundtrip(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        v = self._anchor(x, self.alpha)
        r = np.ascontiguousarray(x - v, dtype=np.float32)
        if self.kind.startswith("pq-"):
            v += self.pq.decode(self.pq.compute_codes(r))
        elif self.kind.startswith("bits-"):
            v += self.weights[np.searchsorted(self.cutoffs, r, side="right")]
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def run_collection(index: str, dataset: str, kinds: list[str], seeds: list[int]) -> dict[str, Any]:
    """Δ nDCG@10 of each refinement and seed against float16 first-m on one index."""
    manifest, part, tokens = _cb.read_reference(index, print)
    stored = _cb.first_rows(tokens, int(manifest.config.get("compress", {}).get("first_m", 8)))
    collection = read_collection(dataset)
    judged = collection.judged_queries
    encoded = dict(zip(judged, load_query_encoder(manifest.config)(list(judged.values()))))
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]
    float16 = codecs.train("float16", stored.vectors[:1].astype(np.float32))  # also scores each refinement's float32 vectors
    reference = _cb._ndcg10(_cb._decode_rescore(float16, float16.encode(stored.vectors), stored, part, encoded, "first-m")[2], qrels)
    out: dict[str, Any] = {"collection": collection.name, "queries": len(judged), "float16_ndcg10": round(reference, 4), "delta": {}}
    for seed in seeds:
        sample = tokens.vectors[_cb.sample_rows(tokens, SAMPLE, seed)].astype(np.float32)
        token_codec = codecs.train(TOKEN_CODEC, sample, seed=seed, n_vectors=len(tokens.vectors))
        for kind in kinds:
            vectors = Refined(token_codec, kind, sample).roundtrip(stored.vectors)
            run = _cb._decode_rescore(float16, float16.encode(vectors), stored, part, encoded, "first-m")[2]
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
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if not args.index or len(args.index) != len(args.dataset):
        raise SystemExit("give --index and --dataset in pairs")
    kinds, seeds = args.refinements.split(","), [int(s) for s in args.seeds.split(",")]
    results = [run_collection(i, d, kinds, seeds) for i, d in zip(args.index, args.dataset)]
    print("\nΔ nDCG@10 against float16, exact first-m: worst (mean) over seeds " + ", ".join(map(str, seeds)))
    print("| refinement | " + " | ".join(r["collection"] for r in results) + " |")
    for kind in kinds:
        cells = [f"{min(r['delta'][kind]):+.4f} ({np.mean(r['delta'][kind]):+.4f})" for r in results]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
