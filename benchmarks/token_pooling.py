"""Token pooling (``compress.pool_factor``, operators/encode/token_pooling.py) on real indexes:
quality (exact MaxSim nDCG@10, Δ and overlap@10 with factor 1) against stored token vectors
and bytes, and the pooling's own time.

    python benchmarks/token_pooling.py --index /tmp/idx2/msmarco --dataset ../shared/datasets/msmarco-sample \\
        [--index /tmp/idx2/dbpedia --dataset ../shared/datasets/dbpedia-sample] \\
        [--factors 1,2,3] [--codec auto] [--sample 65536] [--seeds 0] [--json OUT]
    python benchmarks/token_pooling.py --from-json OUT [--from-json OUT2 …]   # the tables again

The indexes must store their token vectors as ``float16`` (``mvr index CORPUS INDEX --codec
float16``), as for ``benchmarks/codecs.py``: the stored vectors are the L2-normalised kept
token vectors the encode stage pools, so pooling them here is what ``mvr index`` with
``compress.pool_factor`` stores (up to float16 rounding of the input).

For each (index, dataset) and pool factor: every passage's stored token vectors are pooled
(``pool_passages``, timed: ``pool ms/passage``, beside the measured CPU encode cost of a
passage, ``MEASURED["cpu_passages_per_s"]``), and every passage is ranked for every judged
query by exact MaxSim (``scoring.score`` + ``ranking.top_documents``, as
benchmarks/codecs.py) over

- the pooled vectors themselves (float32: pooling's own cost), and
- with ``--codec`` (default ``auto``, the index default at the collection's dimension; ``none``
  to skip): the codes of that codec trained on a seeded sample of ``--sample`` *pooled*
  vectors (the codec trains on what it stores, as the pipeline's sample pass does), once per
  ``--seeds`` seed, decoded.

Columns: vectors stored (and a passage), bytes a passage of token codes (codec bytes a
vector × vectors + the 4-byte list offset; ``float16``: 2·dim), nDCG@10, Δ to factor 1 of the
same codec and seed ± the paired standard error over queries, overlap@10 with factor 1's
top-10 (same codec and seed)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

import ir_measures
import numpy as np

from mvr.operators import codecs
from mvr.operators.encode.token_pooling import pool_passages
from mvr.operators.packed import Packed
from mvr.operators.planning.capacity import MEASURED
from mvr.pipeline.retrieval.searcher import load_query_encoder
from mvr.storage.beir import read_collection


def _codecs_benchmark():
    """benchmarks/codecs.py as a module (its name would be the standard library's ``codecs``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mvr_codecs_benchmark", Path(__file__).resolve().parent / "codecs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_cb = _codecs_benchmark()
Query, _delta_se, _ndcg10, _overlap10, _rank, read_reference = _cb.Query, _cb._delta_se, _cb._ndcg10, _cb._overlap10, _cb._rank, _cb.read_reference

LIST_OFFSET_BYTES = 4


def pool_packed(stored: Packed, factor: int) -> tuple[Packed, float]:
    """Every passage of ``stored`` pooled by ``factor``: (a Packed of the pooled float32
    vectors, seconds the pooling took)."""
    offsets = stored.offsets
    passages = [stored.vectors[offsets[i] : offsets[i + 1]].astype(np.float32) for i in range(len(offsets) - 1)]
    t = time.perf_counter()
    pooled = pool_passages(passages, factor)
    seconds = time.perf_counter() - t
    return Packed.from_list(pooled, stored.vectors.shape[1]), seconds


def run_collection(index: str, dataset: str, factors: list[int], codec_name: Optional[str], sample_size: int, seeds: list[int], log=print) -> dict[str, Any]:
    manifest, part, stored = read_reference(index, log)
    collection = read_collection(dataset)
    judged = collection.judged_queries
    encoded = dict(zip(judged, load_query_encoder(manifest.config)(list(judged.values()))))
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]
    dim = stored.vectors.shape[1]
    name = codecs.resolve_name(codec_name, dim) if codec_name else None
    encode_ms = 1000 / MEASURED["cpu_passages_per_s"].value
    rows: list[dict[str, Any]] = []
    base: dict[tuple[str, int], dict] = {}  # (codec, seed) → factor 1's run
    for f in factors:
        pooled, seconds = pool_packed(stored, f)
        n = len(pooled.vectors)
        log(f"  factor {f}: {n:,} vectors ({n / len(part):.2f} a passage), pooled in {seconds:.1f} s")
        variants: list[tuple[str, int, Any, np.ndarray, dict]] = [
            ("float32", 0, None, pooled.vectors, {q: Query(e.tokens, e.pooled) for q, e in encoded.items()})
        ]
        if name:
            for s in seeds:
                rng = np.random.default_rng(s)
                sample = pooled.vectors[np.sort(rng.choice(n, min(sample_size, n), replace=False))]
                t = time.perf_counter()
                codec = codecs.train(name, sample, seed=s, n_vectors=n)
                train_s = time.perf_counter() - t
                decoded = codec.decode(codec.encode(pooled.vectors))
                variants.append((name, s, codec, decoded, {q: Query(codec.project(e.tokens), e.pooled) for q, e in encoded.items()}))
                log(f"    {name} seed {s}: trained in {train_s:.1f} s")
        for cname, s, codec, vectors, queries in variants:
            run = _rank(Packed(vectors, pooled.offsets), part.doc_ids, part.passage_idx, queries)
            ref = base.setdefault((cname, s), run)
            bpv = codec.bytes_per_vector if codec is not None else 2 * dim
            row = {
                "factor": f,
                "codec": cname if codec is not None else "float16",
                "seed": s if codec is not None else None,
                "vectors": int(n),
                "vectors_per_passage": round(n / len(part), 2),
                "bytes_per_passage": round(n / len(part) * bpv + LIST_OFFSET_BYTES, 1),
                "ndcg10": round(_ndcg10(run, qrels), 4),
                "delta_ndcg10": None,
                "delta_se": round(_delta_se(run, ref, qrels), 4),
                "overlap10": round(_overlap10(run, ref), 4),
                "pool_s": round(seconds, 2),
                "pool_ms_per_passage": round(1000 * seconds / len(part), 3),
                "pool_over_encode": round(1000 * seconds / len(part) / encode_ms, 4),
            }
            row["delta_ndcg10"] = round(row["ndcg10"] - _ndcg10(ref, qrels), 4)
            rows.append(row)
            log(f"    {row}")
    return {
        "index": index,
        "dataset": dataset,
        "collection": collection.name,
        "passages": len(part),
        "dim": dim,
        "queries": len(judged),
        "codec": name,
        "sample": sample_size,
        "seeds": seeds,
        "encode_ms_per_passage": round(encode_ms, 2),
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['collection']}: {result['passages']:,} passages, {result['queries']} judged queries, dim {result['dim']}; "
        + (
            f"codec {result['codec']} trained on {result['sample']:,} pooled vectors, seeds {', '.join(map(str, result['seeds']))}; "
            if result["codec"]
            else "no codec (the pooled vectors as float16); "
        )
        + f"encode {result['encode_ms_per_passage']} ms a passage (CPU, measured rate)",
        "",
        "| pool factor | vectors stored | a passage | vectors as | B/passage (token codes) | nDCG@10 | Δ to factor 1 ± s.e. | overlap@10 with factor 1 | pool ms/passage (× encode) |",
        "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        what = r["codec"] + (f" seed {r['seed']}" if r["seed"] is not None else "")
        lines.append(
            f"| {r['factor']} | {r['vectors']:,} | {r['vectors_per_passage']:.2f} | {what} | {r['bytes_per_passage']:,.1f} | {r['ndcg10']:.4f} "
            f"| {r['delta_ndcg10']:+.4f} ± {r['delta_se']:.4f} | {r['overlap10']:.3f} | {r['pool_ms_per_passage']:.2f} ({r['pool_over_encode']:.3f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", default=[])
    p.add_argument("--dataset", action="append", default=[])
    p.add_argument("--from-json", action="append", default=[])
    p.add_argument("--factors", default="1,2,3")
    p.add_argument("--codec", default=codecs.AUTO, help="token codec trained on the pooled vectors (auto: the index default); none: skip")
    p.add_argument("--sample", type=int, default=1 << 16)
    p.add_argument("--seeds", default="0")
    p.add_argument("--json")
    args = p.parse_args()
    if args.from_json:
        results = [r for path in args.from_json for r in json.load(open(path))]
    else:
        if not args.index or len(args.index) != len(args.dataset):
            p.error("give one --dataset for each --index")
        factors = [int(x) for x in args.factors.split(",")]
        if factors[0] != 1:
            factors = [1] + factors  # the reference
        seeds = [int(x) for x in args.seeds.split(",")]
        log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
        codec = None if args.codec == "none" else args.codec
        results = [run_collection(i, d, factors, codec, args.sample, seeds, log) for i, d in zip(args.index, args.dataset)]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    for r in results:
        print()
        print(table(r))


if __name__ == "__main__":
    main()
