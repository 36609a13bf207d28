"""Token-vector codecs on real indexes: quality (nDCG@10, overlap@10 with float16) against
bytes per vector, and encode / decode+rescore time relative to float16.

    python benchmarks/codecs.py --index /tmp/idx/msmarco --dataset ../shared/datasets/msmarco-sample \\
        [--index /tmp/idx/dbpedia --dataset ../shared/datasets/dbpedia-sample] \\
        [--codecs float16,int8,…] [--sample 65536] [--seed 0] [--repeats 3] [--json OUT] [--plot PNG]
    python benchmarks/codecs.py --from-json OUT [--plot PNG]    # tables (and plot) of a saved run

For each (index, dataset) pair: reads the index's stored float16 token vectors (every shard,
checked against the manifest), encodes the dataset's judged queries with the index's query
encoder, trains each codec on the same seeded sample of token vectors (``--sample`` rows),
encodes every token vector, decodes them all and ranks every passage for every query by
exact MaxSim (``operators/scoring.py``) of the projected query (``Codec.project``) against
the decoded vectors. Prints a markdown table a collection:

- ``B/vec``: bytes a token vector (the codes' width);
- ``nDCG@10`` (ir-measures, judged queries) and ``Δ`` to float16, ± the standard error of
  the mean per-query difference (paired): a Δ within about two of it is noise;
- ``overlap@10``: share of the float16 exact top-10 documents in the codec's top-10;
- ``encode ×``: time to encode every token vector ÷ float16's;
- ``decode+rescore ×``: time to decode every token vector once plus exact MaxSim of every
  query over them ÷ float16's (its decode is a float16 → float32 conversion);
  float16 is measured again with each codec, alternately (side by side, the same machine
  load): encode once each, decode + rescore ``--repeats`` times each, the least time kept;
  each ratio is to those adjacent float16 times;
- ``train s``: training time (a residual codebook is trained once per input space and
  reused by the other bit widths: its k-means is counted in the first one listed).

Times are wall-clock on whatever else the machine runs: the ratios are measured side by side
in one process, the absolute seconds are not comparable between runs."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any, Optional

import ir_measures
import numpy as np
from ir_measures import nDCG

from operators import codecs
from operators.packed import Packed
from operators.partition import Partition
from pipeline.search import load_query_encoder
from storage.beir import read_collection
from storage.manifest import load_manifest
from storage.partitions import exact_partition

DEFAULT_CODECS = (
    "float16,int8,residual-1,residual-2,residual-4,pca-128+residual-2,pca-64+residual-2,"
    "pca-128+pq-16,pca-64+residual-1,pq-48,pq-96"
)
DEPTH = 100  # documents ranked a query (nDCG@10 and overlap@10 need 10)


@dataclass
class Query:
    """What ``scoring.maxsim`` reads of a query: its token vectors (in the codec's space)."""

    tokens: np.ndarray
    pooled: np.ndarray


def _rank(partition: Partition, queries: dict[str, Query]) -> dict[str, list[tuple[str, float]]]:
    out = {}
    for qid, q in queries.items():
        r = partition.rank("maxsim", q, None, DEPTH).ranked
        out[qid] = [(d, float(s)) for d, s in zip(r.doc_ids, r.scores)]
    return out


def _ndcg10(run: dict[str, list[tuple[str, float]]], qrels: list[ir_measures.Qrel]) -> float:
    scored = [ir_measures.ScoredDoc(q, d, s) for q, hits in run.items() for d, s in hits]
    return float(ir_measures.calc_aggregate([nDCG @ 10], qrels, scored)[nDCG @ 10])


def _per_query_ndcg10(run: dict[str, list[tuple[str, float]]], qrels: list[ir_measures.Qrel]) -> dict[str, float]:
    scored = [ir_measures.ScoredDoc(q, d, s) for q, hits in run.items() for d, s in hits]
    return {m.query_id: float(m.value) for m in ir_measures.iter_calc([nDCG @ 10], qrels, scored)}


def _delta_se(run: dict[str, list[tuple[str, float]]], ref: dict[str, list[tuple[str, float]]], qrels: list[ir_measures.Qrel]) -> float:
    """Standard error of the mean per-query nDCG@10 difference (paired over the queries)."""
    a, b = _per_query_ndcg10(run, qrels), _per_query_ndcg10(ref, qrels)
    d = np.array([a.get(q, 0.0) - v for q, v in b.items()])
    return float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def _overlap10(run: dict[str, list[tuple[str, float]]], ref: dict[str, list[tuple[str, float]]]) -> float:
    shares = [len({d for d, _ in run[q][:10]} & {d for d, _ in hits[:10]}) / max(1, min(10, len(hits))) for q, hits in ref.items()]
    return float(np.mean(shares))


def _encode(codec: codecs.Codec, f16: np.ndarray) -> tuple[np.ndarray, float]:
    t = time.perf_counter()
    codes = codec.encode(f16)
    return codes, time.perf_counter() - t


def _decode_rescore(codec: codecs.Codec, codes: np.ndarray, stored: Packed, part: Partition, encoded: dict[str, Any]) -> tuple[float, float, dict]:
    """Decode every token vector, rank every passage for every query: the two times (s), the run."""
    queries = {q: Query(codec.project(e.tokens), e.pooled) for q, e in encoded.items()}
    t = time.perf_counter()
    decoded = codec.decode(codes)
    decode_s = time.perf_counter() - t
    partition = Partition("tokens", Packed(decoded, stored.offsets), part.doc_ids, part.passage_idx)
    t = time.perf_counter()
    run = _rank(partition, queries)
    return decode_s, time.perf_counter() - t, run


def _side_by_side(codec: codecs.Codec, reference: codecs.Codec, f16: np.ndarray, stored: Packed, part: Partition,
                  encoded: dict[str, Any], repeats: int) -> tuple[dict[str, float], dict[str, float], dict]:
    """Times of ``codec`` and of float16 measured alternately: encode once each, decode +
    rescore ``repeats`` times each (the least of each kept). Returns (codec's, float16's
    times, codec's run)."""
    times: dict[str, dict[str, float]] = {"c": {}, "f": {}}
    ref_codes, times["f"]["encode_s"] = _encode(reference, f16)
    codes, times["c"]["encode_s"] = _encode(codec, f16)
    run = None
    for _ in range(max(1, repeats)):
        for key, cd, cs in (("f", reference, ref_codes), ("c", codec, codes)):
            dec, resc, r = _decode_rescore(cd, cs, stored, part, encoded)
            t = times[key]
            t["decode_s"], t["rescore_s"] = min(t.get("decode_s", dec), dec), min(t.get("rescore_s", resc), resc)
            if key == "c" and run is None:
                run = r
    return times["c"], times["f"], run  # type: ignore[return-value]


def _residual_key(name: str) -> Optional[str]:
    """The input space of a residual codec's codebook ("" at full dimension, "pca-D"), or None."""
    parts = name.split("+")
    if not parts[-1].startswith("residual-"):
        return None
    return parts[0] if len(parts) == 2 else ""


def _codebook(codec: codecs.Codec) -> np.ndarray:
    inner = codec.inner if isinstance(codec, codecs.Composed) else codec
    return inner.centroids  # type: ignore[attr-defined]


def run_collection(index: str, dataset: str, names: list[str], sample_size: int, seed: int, repeats: int = 3, log=print,
                   **options: Any) -> dict[str, Any]:
    """The figures of every codec in ``names`` on one index and its dataset (float16 is the
    reference of Δ, overlap and the time ratios whether listed or not);
    ``options`` go to ``codecs.train`` (e.g. ``center=True`` for a centred PCA)."""
    manifest = load_manifest(index)
    t0 = time.perf_counter()
    part = exact_partition(index, manifest, "tokens", dtype=np.float16)
    stored: Packed = part.vectors  # type: ignore[assignment]
    f16 = np.ascontiguousarray(stored.vectors)
    log(f"{index}: {len(part)} passages, {len(f16):,} token vectors of dim {f16.shape[1]} read in {time.perf_counter() - t0:.1f} s")

    collection = read_collection(dataset)
    judged = collection.judged_queries
    encoder = load_query_encoder(manifest.config)
    encoded = dict(zip(judged, encoder(list(judged.values()))))
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(f16), size=min(sample_size, len(f16)), replace=False))
    sample = f16[rows].astype(np.float32)
    reference = codecs.train("float16", sample)
    codebooks: dict[str, np.ndarray] = {}
    results: list[dict[str, Any]] = []
    ref_run = None
    for name in names:
        key = _residual_key(name)
        extra = {"centroids": codebooks[key]} if key in codebooks else {}
        t = time.perf_counter()
        codec = codecs.train(name, sample, seed=seed, n_vectors=len(f16), **options, **extra)
        train_s = time.perf_counter() - t
        if key is not None and key not in codebooks:
            codebooks[key] = _codebook(codec)
        if ref_run is None:
            ref_run = _decode_rescore(reference, reference.encode(f16), stored, part, encoded)[2]
        # float16 and this codec side by side, so their time ratio sees the same machine load
        got, base, run = _side_by_side(codec, reference, f16, stored, part, encoded, repeats)
        row = {
            "codec": codec.name,
            "dim": codec.dim_out,
            "bytes_per_vector": codec.bytes_per_vector,
            "ndcg10": round(_ndcg10(run, qrels), 4),
            "overlap10": round(_overlap10(run, ref_run), 4),
            "delta_se": round(_delta_se(run, ref_run, qrels), 4),
            "train_s": round(train_s, 2),
            **{k: round(v, 3) for k, v in got.items()},
            **{f"float16_{k}": round(v, 3) for k, v in base.items()},
            "encode_ratio": round(got["encode_s"] / base["encode_s"], 1),
            "decode_rescore_ratio": round((got["decode_s"] + got["rescore_s"]) / (base["decode_s"] + base["rescore_s"]), 2),
            "codec_file_bytes": len(codec.to_bytes()),
        }
        if key is not None:
            row["n_centroids"] = int(len(codebooks[key]))
        results.append(row)
        log(f"  {name}: {row}")
    ref_ndcg = round(_ndcg10(ref_run, qrels), 4) if ref_run is not None else float("nan")
    for r in results:
        r["delta_ndcg10"] = round(r["ndcg10"] - ref_ndcg, 4)
    return {
        "index": index,
        "dataset": dataset,
        "collection": collection.name,
        "passages": len(part),
        "token_vectors": int(len(f16)),
        "dim": int(f16.shape[1]),
        "queries": len(judged),
        "sample": int(len(sample)),
        "seed": seed,
        "repeats": repeats,
        "options": {k: v for k, v in options.items()},
        "float16_ndcg10": ref_ndcg,
        "codecs": results,
    }


def table(result: dict[str, Any]) -> str:
    head = f"{result['collection']}: {result['passages']:,} passages, {result['token_vectors']:,} token vectors (dim {result['dim']}), " \
           f"{result['queries']} judged queries; codecs trained on {result['sample']:,} vectors, seed {result['seed']}"
    lines = [
        head, "",
        "| codec | dim | B/vec | nDCG@10 | Δ ± s.e. | overlap@10 | encode × | decode+rescore × | train s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["codecs"]:
        lines.append(
            f"| {r['codec']} | {r['dim']} | {r['bytes_per_vector']} | {r['ndcg10']:.4f} | {r['delta_ndcg10']:+.4f} ± {r['delta_se']:.4f} | {r['overlap10']:.3f} "
            f"| {r['encode_ratio']:.1f} | {r['decode_rescore_ratio']:.2f} | {r['train_s']:.1f} |"
        )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str) -> None:
    """Two panels against bytes per vector: ΔnDCG@10 (± its standard error) and overlap@10."""
    from pipeline.plots import png_bytes, pyplot

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    for res, marker in zip(results, "os^D"):
        rows = res["codecs"]
        x = np.array([r["bytes_per_vector"] for r in rows], dtype=float)
        left.errorbar(x, [r["delta_ndcg10"] for r in rows], yerr=[r.get("delta_se", 0.0) for r in rows], fmt=marker,
                      capsize=2, alpha=0.8, label=res["collection"])
        right.plot(x, [r["overlap10"] for r in rows], marker, alpha=0.8, label=res["collection"])
        for r in rows:
            right.annotate(r["codec"], (r["bytes_per_vector"], r["overlap10"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per token vector (log scale)")
        ax.legend(fontsize=8)
    left.axhline(0, color="grey", lw=0.8)
    left.axhline(-0.01, color="grey", lw=0.6, ls="--")
    left.axhline(-0.02, color="grey", lw=0.6, ls=":")
    left.set_ylabel("nDCG@10 − float16's (± s.e.)")
    left.set_title("quality (judged queries)")
    right.set_ylabel("overlap@10 with float16's ranking")
    right.set_title("agreement with float16")
    fig.suptitle("Token-vector codecs, exact MaxSim")
    fig.tight_layout()
    with open(path, "wb") as f:
        f.write(png_bytes(fig))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", default=[], help="an mvr index (repeat, paired with --dataset)")
    p.add_argument("--dataset", action="append", default=[], help="its BEIR dataset directory (queries, qrels)")
    p.add_argument("--from-json", help="print the tables (and --plot) of figures an earlier run wrote with --json; measure nothing")
    p.add_argument("--codecs", default=DEFAULT_CODECS, help="comma-separated codec names")
    p.add_argument("--sample", type=int, default=1 << 16, help="token vectors each codec is trained on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="decode+rescore timings: the least of this many, alternating with float16")
    p.add_argument("--pca-center", action="store_true", help="centred PCA (default: uncentred, see operators/codecs.py PCA)")
    p.add_argument("--niter", type=int, help="k-means iterations (default: residual 20, PQ 25)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--plot", help="write a PNG of ΔnDCG@10 against bytes per vector here")
    args = p.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        for r in saved:
            print()
            print(table(r))
        if args.plot:
            plot(saved, args.plot)
        return
    if not args.index or len(args.index) != len(args.dataset):
        p.error("give one --dataset for each --index")
    names = [n.strip() for n in args.codecs.split(",") if n.strip()]
    for n in names:
        codecs.parse_name(n)
    options: dict[str, Any] = {"center": True} if args.pca_center else {}
    if args.niter:
        options["niter"] = args.niter
    results = [run_collection(i, d, names, args.sample, args.seed, args.repeats, **options) for i, d in zip(args.index, args.dataset)]
    for r in results:
        print()
        print(table(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
