"""Token-vector codecs on real indexes: quality (nDCG@10, overlap@10 with float16) against
bytes per token vector served (shards + ANN index), and encode / decode+rescore time relative
to float16. With ``--kind first-m | centroids | pooled``, the same for another vector kind
under the mode that scores it: first-m (ME-BERT: the pooled query against each passage's
first m token vectors, e.g. what the token codec costs first-m if that mode read its vectors
from the token codes), softmax-centroid (the k-means centroids), pooled.

    python benchmarks/codecs.py --index /tmp/idx2/msmarco --dataset ../shared/datasets/msmarco-sample \\
        [--index /tmp/idx2/dbpedia --dataset ../shared/datasets/dbpedia-sample] \\
        [--codecs float16,int8,…] [--sample 65536] [--seed 0 | --seeds 0,1,2] [--repeats 3] [--no-timing] \\
        [--sample-by vector|passage] [--ann dim|codec|none] [--kind tokens|first-m|centroids|pooled] [--json OUT] [--plot PNG]
    python benchmarks/codecs.py --from-json OUT [--from-json OUT2 …] [--plot PNG]   # tables (and plot) of saved runs

The indexes must store their token vectors as ``float16`` (``mvr index CORPUS INDEX --codec
float16``; the pooled codec does not matter): they are the reference every codec is
compared with, and an index built with another tokens codec is refused.

For each (index, dataset) pair: reads the index's stored float16 token codes (every shard's
codes file, checked against the manifest, decoded through ``storage.partitions.exact_partition``),
encodes the dataset's judged queries with the model's query encoder in the raw space (no
codec), trains each codec on the same seeded sample of token vectors (``--sample`` rows),
encodes every token vector, decodes them all and ranks every passage for every query by
exact MaxSim (``operators/retrieval/scoring.py``, ranked by ``operators/ranking.top_documents`` as
``Partition.rank`` ranks an exact partition) of the projected query (``Codec.project``) against
the decoded vectors. Prints a markdown table a collection:

- ``B/vec``, bytes a token vector:
  - ``shards``: what the shards' codes files hold a token vector: the codec's
    ``bytes_per_vector`` plus the ``list<code>`` column's offsets, 4 B a passage spread over
    its token vectors (4 ÷ mean token vectors a passage; Arrow's file framing and the codec
    file, a few MB at most, are left out);
  - ``ANN``: measured, not modelled: mvr's default first stage (``faiss-ivfpq`` with
    ``operators.ann.make_index``'s size-based defaults for the codec's output dimension and
    the collection's token-vector count), trained on a seeded sample and filled with the
    codec's decoded vectors as ``pipeline/indexing/ann_build.build_partition`` does, saved
    (``AnnIndex.save``) and its files' bytes ÷ token vectors — one partition over the whole
    collection. With ``--ann dim`` (the default) it is built once per output dimension, on
    the first listed codec of that dimension, and that measurement stands for the others:
    an IVFPQ file's size depends only on the vector count, the dimension and the parameters
    (fixed-width PQ codes and int64 ids in every list, a float32 coarse centroid a list, the
    PQ codebooks; FAISS writes the list sizes sparse only when most lists are empty), not on
    the values; ``--ann codec``
    builds one for every codec, ``--ann none`` none;
  - ``total``: shards + ANN, what the index stores for its token vectors (one copy of the
    codes, ``storage/partitions.py``) and a replica serving them holds;
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

``--kind``: the codecs are always trained on the same sample of token vectors (as the
indexing job trains both of its codecs, ``pipeline/indexing/corpus_job.py``) and measured on
the kind's vectors: ``first-m`` the first m stored token vectors of each passage (m: the
index's ``compress.first_m``; the first m token vectors when the index keeps every token, as
the defaults do), ``centroids`` and ``pooled`` the index's own (its pooled group must be
float16 too: ``--pooled-codec float16``). They are ranked exactly under the kind's mode
(``scoring.score``) with the query's pooled vector projected by the codec. The bytes are a
vector of the kind's.

After the tables, the issue's targets are checked on every collection given: the settings
at ≤ 36 B total a token vector within 0.01 nDCG@10 of float16, and the smallest within 0.02.

Times are wall-clock on whatever else the machine runs: the ratios are measured side by side
in one process, the absolute seconds are not comparable between runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

import ir_measures
import numpy as np
from ir_measures import nDCG

from mvr.operators import codecs
from mvr.operators.ann.base import ADD_BATCH  # ADD_BATCH: vectors added to the ANN index at a time, as the builder
from mvr.operators.ann.factory import make_index
from mvr.operators.packed import Packed
from mvr.operators.retrieval import scoring
from mvr.operators.retrieval.partition import Partition
from mvr.operators.retrieval.ranking import top_documents
from mvr.pipeline.retrieval.searcher import load_query_encoder
from mvr.storage.beir import read_collection
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import load_manifest
from mvr.storage.partitions import exact_partition

DEFAULT_CODECS = "float16,int8,residual-1,residual-2,residual-4,pca-128+residual-2,pca-64+residual-2,pca-128+pq-16,pca-64+residual-1,pq-48,pq-96"
DEPTH = 100  # documents ranked a query (nDCG@10 and overlap@10 need 10)
ANN_BACKEND = "faiss-ivfpq"  # mvr's default first stage (pipeline/config.py AnnBuildConfig)
LIST_OFFSET_BYTES = 4  # a list<code> column's int32 offset, one a passage
TARGET_BYTES = 36  # issue 15: ≤ 36 B a token vector in total (shards + ANN) ...
TARGET_DELTA = 0.01  # ... within 0.01 nDCG@10 of float16 on every collection
SMALLEST_DELTA = 0.02  # and the smallest setting within 0.02


KIND_MODE = {"tokens": "maxsim", "first-m": "first-m", "centroids": "softmax-centroid", "pooled": "pooled"}  # --kind → the mode that scores it


@dataclass
class Query:
    """What the scorers read of a query: its token vectors (``maxsim``) and its pooled vector
    (``first-m``), in the codec's space."""

    tokens: np.ndarray
    pooled: np.ndarray


def _rank(packed: Packed | np.ndarray, doc_ids: list[str], passage_idx: np.ndarray, queries: dict[str, Query], mode: str) -> dict[str, list[tuple[str, float]]]:
    """Every passage of ``packed`` (decoded, in memory) scored exactly under ``mode`` for every query
    (``scoring.score``, as ``Partition.rank`` scores an exact partition) and the top ``DEPTH``
    documents (``ranking.top_documents``). Scored in one piece, not through ``Partition.rank``:
    an exact partition decodes its stored vectors a block at a time for every query, which
    here would time 43 copies of the vectors instead of one decode."""
    out = {}
    for qid, q in queries.items():
        r = top_documents(scoring.score(mode, q, packed), doc_ids, passage_idx, DEPTH)
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


def _decode_rescore(
    codec: codecs.Codec, codes: np.ndarray, stored: Packed, part: Partition, encoded: dict[str, Any], mode: str = "maxsim"
) -> tuple[float, float, dict]:
    """Decode every vector, rank every passage for every query under ``mode``: the two times (s), the run."""
    if mode == "maxsim":
        queries = {q: Query(codec.project(e.tokens), e.pooled) for q, e in encoded.items()}
    else:  # first-m, softmax-centroid, pooled: the pooled query vector
        queries = {q: Query(e.tokens, codec.project(e.pooled[None])[0]) for q, e in encoded.items()}
    t = time.perf_counter()
    decoded = codec.decode(codes)
    decode_s = time.perf_counter() - t
    t = time.perf_counter()
    docs = decoded if mode == "pooled" else Packed(decoded, stored.offsets)  # pooled: one vector a passage, a matrix
    run = _rank(docs, part.doc_ids, part.passage_idx, queries, mode)
    return decode_s, time.perf_counter() - t, run


def _side_by_side(
    codec: codecs.Codec, reference: codecs.Codec, f16: np.ndarray, stored: Packed, part: Partition, encoded: dict[str, Any], repeats: int, mode: str = "maxsim"
) -> tuple[dict[str, float], dict[str, float], dict, np.ndarray]:
    """Times of ``codec`` and of float16 measured alternately: encode once each, decode +
    rescore ``repeats`` times each (the least of each kept). Returns (codec's, float16's
    times, codec's run, codec's codes)."""
    times: dict[str, dict[str, float]] = {"c": {}, "f": {}}
    ref_codes, times["f"]["encode_s"] = _encode(reference, f16)
    codes, times["c"]["encode_s"] = _encode(codec, f16)
    run = None
    for _ in range(max(1, repeats)):
        for key, cd, cs in (("f", reference, ref_codes), ("c", codec, codes)):
            dec, resc, r = _decode_rescore(cd, cs, stored, part, encoded, mode)
            t = times[key]
            t["decode_s"], t["rescore_s"] = min(t.get("decode_s", dec), dec), min(t.get("rescore_s", resc), resc)
            if key == "c" and run is None:
                run = r
    return times["c"], times["f"], run, codes  # type: ignore[return-value]


def ann_bytes(decoded: np.ndarray, log=print) -> dict[str, Any]:
    """Build mvr's default ANN index (``faiss-ivfpq``, size-based defaults) over ``decoded``
    (n, dim) float32 as ``pipeline/indexing/ann_build.build_partition`` does (trained on a seeded
    sample of ``training_sample_size`` rows, filled a block at a time), save it and measure
    its files: {ann_bytes, ann_bytes_per_vector, ann_params, ann_build_s}."""
    t = time.perf_counter()
    n, dim = decoded.shape
    index = make_index(ANN_BACKEND, dim, n)
    rng = np.random.default_rng(index.params.get("seed", 0))
    rows = np.sort(rng.choice(n, min(index.params.get("training_sample_size", n), n), replace=False))
    index.train(decoded[rows])
    for start in range(0, n, ADD_BATCH):
        index.add(decoded[start : start + ADD_BATCH])
    index.finalize()
    with tempfile.TemporaryDirectory(prefix="mvr-codecs-ann-") as tmp:
        index.save(tmp)
        files = {name: os.path.getsize(os.path.join(tmp, name)) for name in sorted(os.listdir(tmp))}
    total = sum(files.values())
    params = {k: v for k, v in index.params.items() if k in ("nlist", "m", "nbits", "training_sample_size")}
    log(f"    ANN {ANN_BACKEND} {params} over {n:,} × {dim}: {total:,} B {files} in {time.perf_counter() - t:.1f} s")
    return {"ann_bytes": int(total), "ann_bytes_per_vector": round(total / n, 2), "ann_params": params, "ann_build_s": round(time.perf_counter() - t, 1)}


def read_reference(index: str, log=print) -> tuple[Any, Partition, Packed]:
    """The index's manifest, its token partition and every stored token vector as float16 (a
    Packed: the float16 codes decoded, which is exact). ``SystemExit`` naming the codec when
    the index's tokens codec is not float16: the benchmark needs the unquantised vectors."""
    manifest = load_manifest(index)
    name = (manifest.codecs.get("tokens") or {}).get("name")
    if name != "float16":
        raise SystemExit(
            f"{index}: its token vectors are stored as {name!r}, not float16; this benchmark compares every codec with "
            "the float16 vectors, so it needs an index built with --codec float16 (mvr index CORPUS INDEX --codec float16)"
        )
    t0 = time.perf_counter()
    part = exact_partition(index, manifest, "tokens", load_codecs(index, manifest.codecs))
    decoded = part.vectors.take(np.arange(len(part), dtype=np.int64))
    f16 = decoded.vectors.astype(np.float16)  # float16 → float32 → float16: exact
    stored = Packed(f16, decoded.offsets)
    del decoded
    log(f"{index}: {len(part)} passages, {len(f16):,} token vectors of dim {f16.shape[1]} read in {time.perf_counter() - t0:.1f} s")
    return manifest, part, stored


def read_kind(index: str, manifest: Any, kind: str) -> Packed:
    """Every stored vector of ``kind`` (centroids or pooled) as float16, a Packed (pooled: one
    a passage); ``SystemExit`` when the index does not store its pooled group as float16."""
    name = (manifest.codecs.get("pooled") or {}).get("name")
    if name != "float16":
        raise SystemExit(f"{index}: its {kind} vectors are stored as {name!r}, not float16; build it with --pooled-codec float16")
    part = exact_partition(index, manifest, kind, load_codecs(index, manifest.codecs))
    decoded = part.vectors.take(np.arange(len(part), dtype=np.int64))
    if isinstance(decoded, Packed):
        return Packed(decoded.vectors.astype(np.float16), decoded.offsets)
    return Packed(decoded.astype(np.float16), np.arange(len(decoded) + 1, dtype=np.int64))


def first_rows(stored: Packed, m: int) -> Packed:
    """The first ``m`` vectors of each passage of ``stored`` (all of a shorter one), copied."""
    lengths = np.minimum(np.diff(stored.offsets), m)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = np.arange(offsets[-1], dtype=np.int64) + np.repeat(stored.offsets[:-1] - offsets[:-1], lengths)
    return Packed(stored.vectors[rows], offsets)


def _residual_key(name: str) -> Optional[str]:
    """The input space of a residual codec's codebook ("" at full dimension, "pca-D"), or None."""
    parts = name.split("+")
    if not parts[-1].startswith("residual-"):
        return None
    return parts[0] if len(parts) == 2 else ""


def _codebook(codec: codecs.Codec) -> np.ndarray:
    inner = codec.inner if isinstance(codec, codecs.Composed) else codec
    return inner.centroids  # type: ignore[attr-defined]


SAMPLE_TOKENS_PER_DOCUMENT = 64  # pipeline/indexing/corpus_job.py: the passage fraction the sample pass draws assumes this many


def sample_rows(stored: Packed, size: int, seed: int, by: str = "vector") -> np.ndarray:
    """Sorted rows of the training sample: ``by`` "vector", ``size`` token vectors drawn
    uniformly (seeded); "passage", as the indexing job's sample pass draws it
    (``pipeline/indexing/corpus_job.py _codecs``, ``pipeline/indexing/stages.py``): each passage kept with
    probability size / (passages × 64) (seeded), then ``size`` of the kept passages' vectors
    chosen (seeded) when there are more."""
    n = len(stored.vectors)
    rng = np.random.default_rng(seed)
    if by == "vector":
        return np.sort(rng.choice(n, size=min(size, n), replace=False))
    passages = len(stored.offsets) - 1
    fraction = min(1.0, size / max(1, passages * SAMPLE_TOKENS_PER_DOCUMENT))
    kept = np.flatnonzero(rng.random(passages) < fraction)
    lengths = np.diff(stored.offsets)[kept]
    rows = np.repeat(stored.offsets[kept] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(lengths.sum())
    if len(rows) > size:
        rows = rows[np.sort(np.random.default_rng(seed).choice(len(rows), size, replace=False))]
    return rows


def run_collection(
    index: str,
    dataset: str,
    names: list[str],
    sample_size: int,
    seed: int,
    repeats: int = 3,
    log=print,
    ann: str = "dim",
    seeds: Optional[list[int]] = None,
    timing: bool = True,
    sample_by: str = "vector",
    kind: str = "tokens",
    **options: Any,
) -> dict[str, Any]:
    """The figures of every codec in ``names`` on one index and its dataset (float16 is the
    reference of Δ, overlap and the time ratios whether listed or not); ``ann``: "dim" (an
    ANN index measured once per output dimension), "codec" (once per codec) or "none";
    ``seeds``: train every codec once per seed (each seed draws its own sample of
    ``sample_size`` vectors and seeds the training with it; default ``[seed]``); the ANN
    bytes are measured on the first seed's codecs only (they do not depend on the values);
    ``timing=False`` skips the side-by-side float16 timings (ratios left out); ``sample_by``:
    "vector" (uniform) or "passage" (as the indexing job draws it, ``sample_rows``);
    ``kind``: "tokens" (exact MaxSim) or "first-m" (the first m vectors of each passage,
    exact first-m; the codecs still trained on token vectors);
    ``options`` go to ``codecs.train`` (e.g. ``center=True`` for a centred PCA)."""
    manifest, part, tokens = read_reference(index, log)
    mode = KIND_MODE[kind]
    m = int(manifest.config.get("compress", {}).get("first_m", 8))
    stored = first_rows(tokens, m) if kind == "first-m" else read_kind(index, manifest, kind) if kind in ("centroids", "pooled") else tokens
    f16 = stored.vectors
    offset_bytes = 0.0 if kind == "pooled" else LIST_OFFSET_BYTES * len(part) / len(f16)  # the codes column's offsets, a vector (pooled: none)

    collection = read_collection(dataset)
    judged = collection.judged_queries
    encoder = load_query_encoder(manifest.config)
    encoded = dict(zip(judged, encoder(list(judged.values()))))
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]

    seeds = list(seeds) if seeds else [seed]
    reference = codecs.train("float16", f16[:1].astype(np.float32))
    ref_run = _decode_rescore(reference, reference.encode(f16), stored, part, encoded, mode)[2]
    ann_by_dim: dict[int, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for s in seeds:
        rows = sample_rows(tokens, sample_size, s, sample_by)
        sample = tokens.vectors[rows].astype(np.float32)
        codebooks: dict[str, np.ndarray] = {}
        for name in names:
            key = _residual_key(name)
            extra = {"centroids": codebooks[key]} if key in codebooks else {}
            t = time.perf_counter()
            codec = codecs.train(name, sample, seed=s, n_vectors=len(tokens.vectors), **options, **extra)
            train_s = time.perf_counter() - t
            if key is not None and key not in codebooks:
                codebooks[key] = _codebook(codec)
            if timing:  # float16 and this codec side by side, so their time ratio sees the same machine load
                got, base, run, codes = _side_by_side(codec, reference, f16, stored, part, encoded, repeats, mode)
            else:
                codes, encode_s = _encode(codec, f16)
                decode_s, rescore_s, run = _decode_rescore(codec, codes, stored, part, encoded, mode)
                got, base = {"encode_s": encode_s, "decode_s": decode_s, "rescore_s": rescore_s}, None
            row = {
                "codec": codec.name,
                "seed": s,
                "dim": codec.dim_out,
                "bytes_per_vector": codec.bytes_per_vector,
                "shard_bytes_per_vector": round(codec.bytes_per_vector + offset_bytes, 2),
                "ndcg10": round(_ndcg10(run, qrels), 4),
                "overlap10": round(_overlap10(run, ref_run), 4),
                "delta_se": round(_delta_se(run, ref_run, qrels), 4),
                "train_s": round(train_s, 2),
                **{k: round(v, 3) for k, v in got.items()},
                "codec_file_bytes": len(codecs.to_bytes(codec)),
            }
            if base is not None:
                row.update({f"float16_{k}": round(v, 3) for k, v in base.items()})
                row["encode_ratio"] = round(got["encode_s"] / base["encode_s"], 1)
                row["decode_rescore_ratio"] = round((got["decode_s"] + got["rescore_s"]) / (base["decode_s"] + base["rescore_s"]), 2)
            if key is not None:
                row["n_centroids"] = int(len(codebooks[key]))
            if ann != "none":
                if (ann == "codec" and s == seeds[0]) or codec.dim_out not in ann_by_dim:
                    measured = ann_bytes(codec.decode(codes), log)
                    ann_by_dim.setdefault(codec.dim_out, {**measured, "ann_measured_on": codec.name})
                    measured["ann_measured_on"] = codec.name
                else:
                    measured = ann_by_dim[codec.dim_out]
                row.update(measured)
                row["total_bytes_per_vector"] = round(row["shard_bytes_per_vector"] + measured["ann_bytes_per_vector"], 2)
            del codes
            results.append(row)
            log(f"  seed {s} {name}: {row}")
    ref_ndcg = round(_ndcg10(ref_run, qrels), 4)
    for r in results:
        r["delta_ndcg10"] = round(r["ndcg10"] - ref_ndcg, 4)
    return {
        "index": index,
        "dataset": dataset,
        "collection": collection.name,
        "passages": len(part),
        "kind": kind,
        "token_vectors": int(len(f16)),
        "dim": int(f16.shape[1]),
        "queries": len(judged),
        "mean_tokens_per_passage": round(len(f16) / max(1, len(part)), 2),
        "sample": int(min(sample_size, len(tokens.vectors))),
        "sample_by": sample_by,
        "ann": ann,
        "seed": seeds[0],
        "seeds": seeds,
        "repeats": repeats,
        "options": {k: v for k, v in options.items()},
        "float16_ndcg10": ref_ndcg,
        "codecs": results,
    }


def _num(value: Any, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _seeds(result: dict[str, Any]) -> list[int]:
    return result.get("seeds") or [result["seed"]]


def table(result: dict[str, Any]) -> str:
    seeds = _seeds(result)
    head = (
        f"{result['collection']}: {result['passages']:,} passages, {result['token_vectors']:,} "
        + ("token vectors" if result.get("kind", "tokens") == "tokens" else f"{result['kind']} vectors, scored by {KIND_MODE[result['kind']]}")
        + f" (dim {result['dim']}), "
        f"{result['queries']} judged queries; codecs trained on {result['sample']:,} vectors, seed{'s' if len(seeds) > 1 else ''} " + ", ".join(map(str, seeds))
    )
    params = {tuple(sorted(r["ann_params"].items())): r["dim"] for r in result["codecs"] if "ann_params" in r}
    if params:
        head += "; ANN: " + ", ".join(f"{ANN_BACKEND} at dim {d} {dict(p)}" for p, d in params.items())
    many = len(seeds) > 1
    lines = [
        head,
        "",
        "| codec | "
        + ("seed | " if many else "")
        + "dim | B/vec shards | B/vec ANN | B/vec total | nDCG@10 | Δ ± s.e. | overlap@10 | encode × | decode+rescore × | train s |",
        "| --- | " + ("---: | " if many else "") + "---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["codecs"]:
        lines.append(
            f"| {r['codec']} | "
            + (f"{r.get('seed', result['seed'])} | " if many else "")
            + f"{r['dim']} | {_num(r.get('shard_bytes_per_vector', r['bytes_per_vector']), '.1f')} "
            f"| {_num(r.get('ann_bytes_per_vector'), '.1f')} | {_num(r.get('total_bytes_per_vector'), '.1f')} "
            f"| {r['ndcg10']:.4f} | {r['delta_ndcg10']:+.4f} ± {r['delta_se']:.4f} | {r['overlap10']:.3f} "
            f"| {_num(r.get('encode_ratio'), '.1f')} | {_num(r.get('decode_rescore_ratio'), '.2f')} | {r['train_s']:.1f} |"
        )
    return "\n".join(lines)


def seed_summary(results: list[dict[str, Any]]) -> str:
    """One row a codec over every collection and seed: bytes, then per collection the mean
    and worst Δ over the seeds (each seed's Δ in brackets) and the mean and least overlap@10."""
    names = list(dict.fromkeys(r["codec"] for r in results[0]["codecs"]))
    head = (
        "| codec | B/vec shards | B/vec total | "
        + " | ".join(f"{res['collection']} Δ mean (worst) [per seed] | overlap@10 mean (least)" for res in results)
        + " |"
    )
    lines = [
        f"Over seeds {', '.join(map(str, _seeds(results[0])))} (Δ: nDCG@10 − float16's, exact {KIND_MODE[results[0].get('kind', 'tokens')]}):",
        "",
        head,
        "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in results) + " |",
    ]
    for n in names:
        rows = [[r for r in res["codecs"] if r["codec"] == n] for res in results]
        if not all(rows):
            continue
        first = rows[0][0]
        cells = []
        for rs in rows:
            d = [r["delta_ndcg10"] for r in rs]
            o = [r["overlap10"] for r in rs]
            cells.append(f"{np.mean(d):+.4f} ({min(d):+.4f}) [{', '.join(f'{x:+.4f}' for x in d)}] | {np.mean(o):.3f} ({min(o):.3f})")
        lines.append(
            f"| {n} | {_num(first.get('shard_bytes_per_vector'), '.1f')} | {_num(first.get('total_bytes_per_vector'), '.1f')} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def _served(r: dict[str, Any]) -> float:
    """Bytes a token vector the targets count: total (shards + ANN) when measured, else the shards'."""
    return r.get("total_bytes_per_vector", r.get("shard_bytes_per_vector", r["bytes_per_vector"]))


def targets(results: list[dict[str, Any]]) -> str:
    """Issue 15's targets over every collection in ``results`` and every seed: the codecs at
    ≤ 36 B total a token vector whose worst seed is within 0.01 nDCG@10 of float16 on all of
    them, the smallest whose worst seed is within 0.02, and (with several seeds) the smallest
    whose worst seed is within 0.01 whatever its size."""
    names = list(dict.fromkeys(r["codec"] for r in results[0]["codecs"]))
    rows = {n: [[r for r in res["codecs"] if r["codec"] == n] for res in results] for n in names}
    rows = {n: rs for n, rs in rows.items() if all(rs)}
    measured = all("total_bytes_per_vector" in r for rs in rows.values() for c in rs for r in c)
    what = "total (shards + ANN)" if measured else "in the shards (no ANN measured)"
    size = lambda n: max(_served(r) for c in rows[n] for r in c)  # noqa: E731
    worst = lambda c: min(r["delta_ndcg10"] for r in c)  # noqa: E731

    def describe(n: str) -> str:
        return f"{n} ({size(n):.1f} B: " + ", ".join(f"{worst(c):+.4f}" for c in rows[n]) + ")"

    within = lambda n, d: all(worst(c) >= -d for c in rows[n])  # noqa: E731
    small = [n for n in rows if size(n) <= TARGET_BYTES and within(n, TARGET_DELTA)]
    near = sorted((n for n in rows if within(n, SMALLEST_DELTA)), key=size)
    held = sorted((n for n in rows if within(n, TARGET_DELTA)), key=size)
    collections = ", ".join(res["collection"] for res in results)
    n_seeds = len(_seeds(results[0]))
    lines = [
        f"Targets on {collections} (Δ in that order{', the worst of ' + str(n_seeds) + ' seeds' if n_seeds > 1 else ''}), bytes a token vector {what}:",
        f"- ≤ {TARGET_BYTES} B within {TARGET_DELTA} of float16 on all: " + ("; ".join(describe(n) for n in small) if small else "none"),
        f"- the smallest within {SMALLEST_DELTA} on all: " + (describe(near[0]) if near else "none"),
        f"- the smallest within {TARGET_DELTA} on all, any size: " + (describe(held[0]) if held else "none"),
    ]
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str) -> None:
    """Two panels against bytes a token vector served (shards + ANN when measured, else the
    shards'): ΔnDCG@10 (± its standard error) and overlap@10."""
    from mvr.pipeline.plots import png_bytes, pyplot

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    measured = all("total_bytes_per_vector" in r for res in results for r in res["codecs"])
    for res, marker in zip(results, "os^D"):
        rows = res["codecs"]
        x = np.array([_served(r) for r in rows], dtype=float)
        left.errorbar(
            x, [r["delta_ndcg10"] for r in rows], yerr=[r.get("delta_se", 0.0) for r in rows], fmt=marker, capsize=2, alpha=0.8, label=res["collection"]
        )
        right.plot(x, [r["overlap10"] for r in rows], marker, alpha=0.8, label=res["collection"])
        for r, xi in zip(rows, x):
            right.annotate(r["codec"], (xi, r["overlap10"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(("bytes per token vector, shards + ANN" if measured else "bytes per token vector (codes)") + " (log scale)")
        ax.axvline(TARGET_BYTES, color="grey", lw=0.6, ls="--")
        ax.legend(fontsize=8)
    left.axhline(0, color="grey", lw=0.8)
    left.axhline(-TARGET_DELTA, color="grey", lw=0.6, ls="--")
    left.axhline(-SMALLEST_DELTA, color="grey", lw=0.6, ls=":")
    left.set_ylabel("nDCG@10 − float16's (± s.e.)")
    left.set_title(f"quality (judged queries); dashed: {TARGET_BYTES} B, −{TARGET_DELTA}")
    right.set_ylabel("overlap@10 with float16's ranking")
    right.set_title("agreement with float16")
    fig.suptitle("Token-vector codecs, exact MaxSim from the codes")
    fig.tight_layout()
    with open(path, "wb") as f:
        f.write(png_bytes(fig))


def report(results: list[dict[str, Any]], plot_path: Optional[str]) -> None:
    """Print each collection's table and the targets' check; plot when asked."""
    for r in results:
        print()
        print(table(r))
    if len(_seeds(results[0])) > 1:
        print()
        print(seed_summary(results))
    print()
    print(targets(results))
    if plot_path:
        plot(results, plot_path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", default=[], help="an mvr index (repeat, paired with --dataset)")
    p.add_argument("--dataset", action="append", default=[], help="its BEIR dataset directory (queries, qrels)")
    p.add_argument(
        "--from-json",
        action="append",
        default=[],
        help="print the tables (and --plot) of figures an earlier run wrote with --json (repeat to join runs); measure nothing",
    )
    p.add_argument("--codecs", default=DEFAULT_CODECS, help="comma-separated codec names")
    p.add_argument("--sample", type=int, default=1 << 16, help="token vectors each codec is trained on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--seeds",
        help="comma-separated seeds: train and measure every codec once per seed (its own sample and training seed); "
        "a summary table gives the mean and worst over them",
    )
    p.add_argument(
        "--sample-by",
        choices=("vector", "passage"),
        default="vector",
        help="training sample: uniform token vectors (default), or whole passages as mvr index's sample pass draws them",
    )
    p.add_argument("--no-timing", action="store_true", help="skip the side-by-side float16 timings (encode ×, decode+rescore × left out)")
    p.add_argument("--repeats", type=int, default=3, help="decode+rescore timings: the least of this many, alternating with float16")
    p.add_argument("--pca-center", action="store_true", help="centred PCA (default: uncentred, see operators/codecs/quantizers.py PCA)")
    p.add_argument("--niter", type=int, help="k-means iterations (default: residual 20, PQ 25)")
    p.add_argument(
        "--ann",
        choices=("dim", "codec", "none"),
        default="dim",
        help="measure the ANN index's bytes once per output dimension (default), for every codec, or not at all",
    )
    p.add_argument(
        "--kind",
        choices=tuple(KIND_MODE),
        default="tokens",
        help="the vectors measured: every token vector under MaxSim (default), each passage's first m under first-m, its centroids under softmax-centroid, or its pooled vector",
    )
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--plot", help="write a PNG of ΔnDCG@10 against bytes per vector here")
    args = p.parse_args()
    if args.from_json:
        saved = []
        for path in args.from_json:
            with open(path) as f:
                saved.extend(json.load(f))
        report(saved, args.plot)
        return
    if not args.index or len(args.index) != len(args.dataset):
        p.error("give one --dataset for each --index")
    names = [n.strip() for n in args.codecs.split(",") if n.strip()]
    for n in names:
        codecs.parse_name(n)
    options: dict[str, Any] = {"center": True} if args.pca_center else {}
    if args.niter:
        options["niter"] = args.niter
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731 - progress apart from the tables
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()] if args.seeds else None
    results = [
        run_collection(i, d, names, args.sample, args.seed, args.repeats, log, args.ann, seeds, not args.no_timing, args.sample_by, args.kind, **options)
        for i, d in zip(args.index, args.dataset)
    ]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    report(results, args.plot)


if __name__ == "__main__":
    main()
