"""Exact search quality of every mode on several collections, float vectors against the
default codecs, side by side: the reference table of docs/search.md and the codec table of
docs/codecs.md.

    mvr index ../shared/datasets/cranfield /tmp/q/cranfield-f16 --codec float16 --pooled-codec float16
    mvr index ../shared/datasets/cranfield /tmp/q/cranfield                 # the defaults
    mvr build-bm25 /tmp/q/cranfield                                         # for bm25 and hybrid
    ... (the same for msmarco-sample and dbpedia-sample)
    python benchmarks/quality_table.py --json quality.json \\
        --collection ../shared/datasets/cranfield /tmp/q/cranfield-f16 /tmp/q/cranfield \\
        --collection ../shared/datasets/msmarco-sample /tmp/q/msmarco-f16 /tmp/q/msmarco \\
        --collection ../shared/datasets/dbpedia-sample /tmp/q/dbpedia-f16 /tmp/q/dbpedia

Each ``--collection DATASET FLOAT_INDEX INDEX``: the dataset's judged queries through
``Searcher`` with ``exact=True`` (every passage scored, ``pipeline/retrieval/searcher.py``)
on both indexes, nDCG@10 by ir-measures. FLOAT_INDEX must store both vector groups as
``float16`` (the float reference; refused otherwise); INDEX is the one measured (its codecs
are named in the table). ``bm25`` and ``hybrid`` (default settings) are measured on INDEX when
it has BM25 partitions. Δ is INDEX − FLOAT ± the standard error of the paired per-query
difference; the hybrid's column says how far it is above the better of its two sides."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mvr.operators.retrieval.scoring import MODES
from mvr.pipeline.retrieval.evaluation import exact_quality as measure
from mvr.pipeline.retrieval.evaluation import paired_se
from mvr.storage.beir import read_collection
from mvr.storage.manifest import load_manifest


def run_collection(dataset: str, float_index: str, index: str) -> dict[str, Any]:
    f = load_manifest(float_index)
    if any(c["name"] != "float16" for c in f.codecs.values()):
        raise SystemExit(f"{float_index}: the float reference must store both groups as float16 (--codec float16 --pooled-codec float16)")
    m = load_manifest(index)
    sparse = ("bm25", "hybrid") if m.bm25 else ()
    ref = measure(dataset, float_index, MODES)
    got = measure(dataset, index, MODES + sparse)
    rows = {}
    for mode in MODES:
        rows[mode] = {
            "float": ref["ndcg10"][mode],
            "index": got["ndcg10"][mode],
            "delta": round(got["ndcg10"][mode] - ref["ndcg10"][mode], 4),
            "se": round(paired_se(got["per_query"][mode], ref["per_query"][mode]), 4),
        }
    for mode in sparse:
        rows[mode] = {"index": got["ndcg10"][mode]}
    if sparse:
        better = max(("maxsim", "bm25"), key=lambda x: got["ndcg10"][x])
        rows["hybrid"]["above_better_side"] = round(got["ndcg10"]["hybrid"] - got["ndcg10"][better], 4)
        rows["hybrid"]["better_side"] = better
        rows["hybrid"]["se"] = round(paired_se(got["per_query"]["hybrid"], got["per_query"][better]), 4)
    rows["softmax-centroid"]["below_pooled"] = round(got["ndcg10"]["pooled"] - got["ndcg10"]["softmax-centroid"], 4)
    name = read_collection(dataset).name
    return {
        "collection": name,
        "queries": len(ref["per_query"]["maxsim"]),
        "float_index": float_index,
        "index": index,
        "codecs": {g: c["name"] for g, c in m.codecs.items()},
        "centroid_space": m.config.get("compress", {}).get("centroid_space", "raw"),
        "modes": rows,
    }


def table(results: list[dict[str, Any]]) -> str:
    head = "| mode | " + " | ".join(f"{r['collection']} ({r['queries']} q.) float | default | Δ ± s.e." for r in results) + " |"
    lines = [head, "| --- | " + " | ".join("---: | ---: | ---:" for _ in results) + " |"]
    for mode in MODES:
        cells = [
            f"{r['modes'][mode]['float']:.4f} | {r['modes'][mode]['index']:.4f} | {r['modes'][mode]['delta']:+.4f} ± {r['modes'][mode]['se']:.4f}"
            for r in results
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    for mode in ("bm25", "hybrid"):
        if all(mode in r["modes"] for r in results):
            cells = []
            for r in results:
                x = r["modes"][mode]
                extra = f"{x['above_better_side']:+.4f} ± {x['se']:.4f} over {x['better_side']}" if mode == "hybrid" else ""
                cells.append(f" | {x['index']:.4f} | {extra}")
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "softmax-centroid below pooled (default index): "
        + ", ".join(f"{r['collection']} {r['modes']['softmax-centroid']['below_pooled']:+.4f}" for r in results)
    )
    lines.append(
        "codecs of the default index: " + ", ".join(f"{g} {n}" for g, n in results[0]["codecs"].items()) + f"; centroids: {results[0]['centroid_space']} space"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collection", nargs=3, action="append", metavar=("DATASET", "FLOAT_INDEX", "INDEX"), default=[], help="repeat per collection")
    p.add_argument("--from-json", help="print the table of an earlier run's JSON; measure nothing")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            print(table(json.load(f)))
        return 0
    if not args.collection:
        p.error("give at least one --collection DATASET FLOAT_INDEX INDEX")
    results = []
    for dataset, float_index, index in args.collection:
        print(f"{dataset}: measuring …", file=sys.stderr, flush=True)
        results.append(run_collection(dataset, float_index, index))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
