"""Live updates (docs/updates.md), measured on real text in one run:

1. **Add ÷ rebuild**: msmarco-sample (5,000 passages) is indexed and its token vectors'
   FAISS partitions and BM25 are built (timed: "rebuild everything"); then 5 rounds, each
   adding 10 % new documents (500 of dbpedia-sample, `mvr add`: encode, compress, ANN
   partitions extended, BM25 and catalog rebuilt) and deleting 10 % (500 random live
   documents, `mvr delete`). The ratio is an add's time over the rebuild's. A from-scratch
   index of the final documents is built and timed the same way at the end.
2. **Quality and latency after churn**: msmarco-sample's judged queries (qrels unchanged:
   a deleted relevant document counts as not found, alike for every index) on the index
   after the 5 rounds, after `mvr compact`, and on the from-scratch index: nDCG@10 by the
   default ANN path and by exact search, overlap@10 with exact, p50 search latency (encoding
   excluded; each query's median over the rounds, variants interleaved).
3. **Filters**: every document carries ``bucket`` = crc32(id) mod 100 in its BEIR
   ``metadata``; ``bucket < 1`` / ``< 10`` / ``< 50`` allow 1 %, 10 %, 50 % of the documents.
   Filtered p50 search latency ÷ unfiltered on the compacted index, the path taken (exact
   when the allowed set is small) and whether every query got k results.

    python benchmarks/updates.py [--workdir /tmp/mvr-updates] [--rounds 5] [--latency-rounds 5] [--json OUT]

Run it alone: every figure is a time on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from mvr.pipeline.config import AnnBuildConfig, IndexConfig, SearchConfig
from mvr.pipeline.indexing.ann_build import build_ann
from mvr.pipeline.indexing.compaction import compact
from mvr.pipeline.indexing.corpus_job import index_corpus
from mvr.pipeline.indexing.updates import add_documents, delete_documents
from mvr.pipeline.retrieval.evaluation import overlap_at_10, quality
from mvr.pipeline.retrieval.plan import SearchResult
from mvr.pipeline.retrieval.request import Restriction
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.beir import read_collection

ANN = {"backend": "faiss-ivfpq", "partitions": 2, "vectors": ["tokens"]}
SELECTIVITY = {"1 %": "bucket < 1", "10 %": "bucket < 10", "50 %": "bucket < 50"}


def QUIET(_: str) -> None:
    return None


def documents(dataset: Path, prefix: str = "") -> list[dict[str, Any]]:
    """The collection's documents, ids prefixed, each with ``metadata.bucket`` (0–99, crc32 of the id)."""
    out = []
    with open(dataset / "corpus.jsonl") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                doc_id = prefix + d["_id"]
                out.append({"_id": doc_id, "title": d.get("title") or "", "text": d["text"], "metadata": {"bucket": zlib.crc32(doc_id.encode()) % 100}})
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def build_from_scratch(corpus: str, index: str) -> float:
    """``mvr index`` + ``mvr build-ann`` (tokens, FAISS, P = 2, and BM25): seconds."""
    shutil.rmtree(index, ignore_errors=True)
    _, t_index = timed(lambda: index_corpus(corpus, index, IndexConfig(), log=QUIET))
    _, t_ann = timed(lambda: build_ann(index, AnnBuildConfig(**ANN), log=QUIET))
    return t_index + t_ann


def latencies(searchers: dict[str, tuple[Searcher, Optional[Restriction]]], texts: list[str], rounds: int) -> dict[str, dict[str, Any]]:
    """{variant: {"p50_ms", "results"}}: each query's median search time (encoding excluded)
    over ``rounds``, variants interleaved in rotating order; ``results``: the last round's.
    Each variant's searcher encodes the queries itself (before any timing): an index's trained
    codec projects queries into its own space, so one index's encodings are not another's."""
    names = list(searchers)
    encoded = {n: searchers[n][0].encode(texts) for n in names}
    times = {n: np.zeros((rounds, len(texts))) for n in names}
    last: dict[str, list[SearchResult]] = {n: [None] * len(texts) for n in names}  # type: ignore[list-item]
    for r in range(rounds):
        for j in range(len(texts)):
            for n in names[(r + j) % len(names) :] + names[: (r + j) % len(names)]:
                s, restriction = searchers[n]
                t0 = time.perf_counter()
                last[n][j] = s.search_encoded(encoded[n][j], 10, "maxsim", 0.0, restriction)
                times[n][r, j] = (time.perf_counter() - t0) * 1e3
    return {n: {"p50_ms": float(np.median(np.median(times[n], axis=0))), "results": last[n]} for n in names}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="/tmp/mvr-updates")
    p.add_argument("--datasets", default=os.environ.get("MVR_DATASETS", str(Path(__file__).resolve().parents[2] / "shared" / "datasets")))
    p.add_argument("--rounds", type=int, default=5, help="rounds of 10 %% add + 10 %% delete")
    p.add_argument("--latency-rounds", type=int, default=5)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    work, datasets = Path(args.workdir), Path(args.datasets)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = documents(datasets / "msmarco-sample")
    pool = documents(datasets / "dbpedia-sample", "dbpedia:")
    step = len(base) // 10
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"passages": len(base), "step": step, "rounds": []}

    live = str(work / "live")
    t_build = build_from_scratch(write_jsonl(work / "base.jsonl", base), live)
    print(f"built msmarco-sample ({len(base)} documents: mvr index + build-ann tokens FAISS P=2 + BM25) in {t_build:.1f} s", flush=True)
    out["build_s"] = t_build
    alive = {d["_id"]: d for d in base}
    for r in range(args.rounds):
        new = pool[r * step : (r + 1) * step]
        res, t_add = timed(lambda: add_documents(write_jsonl(work / f"add-{r}.jsonl", new), live, log=QUIET))  # noqa: B023 - run within the iteration
        alive.update({d["_id"]: d for d in new})
        gone = sorted(rng.choice(sorted(alive), step, replace=False).tolist())
        _, t_del = timed(lambda: delete_documents(live, gone, log=QUIET))  # noqa: B023 - run within the iteration
        for g in gone:
            del alive[g]
        m = res.manifest
        parts = len(m.ann["tokens"]["partitions"])
        out["rounds"].append({"add_s": t_add, "delete_s": t_del, "partitions": parts})
        print(
            f"round {r + 1}: add {len(new)} in {t_add:.1f} s ({t_add / t_build:.3f} of the build), delete {len(gone)} in {t_del:.1f} s; "
            f"{len(alive)} live documents, {parts} token partitions",
            flush=True,
        )

    collection = read_collection(str(datasets / "msmarco-sample"))
    queries = collection.judged_queries
    exact_cfg = SearchConfig(exact=True)
    before = Searcher(live, ["maxsim"], SearchConfig())  # holds the pre-compaction version
    before_exact = Searcher(live, ["maxsim"], exact_cfg, before.query_encoder.encoder)
    _, t_compact = timed(lambda: compact(live, log=QUIET))
    print(f"compacted in {t_compact:.1f} s", flush=True)
    out["compact_s"] = t_compact
    scratch = str(work / "scratch")
    t_scratch = build_from_scratch(write_jsonl(work / "final.jsonl", list(alive.values())), scratch)
    print(f"from scratch on the final {len(alive)} documents in {t_scratch:.1f} s", flush=True)
    out["scratch_build_s"] = t_scratch
    enc = before.query_encoder.encoder
    variants = {
        "churned": (before, before_exact),
        "compacted": (Searcher(live, ["maxsim"], SearchConfig(), enc), Searcher(live, ["maxsim"], exact_cfg, enc)),
        "from scratch": (Searcher(scratch, ["maxsim"], SearchConfig(), enc), Searcher(scratch, ["maxsim"], exact_cfg, enc)),
    }
    texts = list(queries.values())
    ann = latencies({n: (v[0], None) for n, v in variants.items()}, texts, args.latency_rounds)
    exact = latencies({n: (v[1], None) for n, v in variants.items()}, texts, 1)
    ids = list(queries)
    rows = {}
    for n in variants:
        a = dict(zip(ids, ann[n]["results"]))
        e = dict(zip(ids, exact[n]["results"]))
        rows[n] = {
            "version": variants[n][0].manifest.version,
            "nDCG@10 ann": quality(a, collection)["nDCG@10"],
            "nDCG@10 exact": quality(e, collection)["nDCG@10"],
            "overlap@10": overlap_at_10(a, e),
            "p50_ms": round(ann[n]["p50_ms"], 2),
            "partitions": variants[n][0].partition_count("maxsim"),
        }
    out["quality"] = rows

    compacted = variants["compacted"][0]
    filt = {"none": (compacted, None), **{s: (compacted, compacted.restriction(f)) for s, f in SELECTIVITY.items()}}
    lat = latencies(filt, texts, args.latency_rounds)
    out["filters"] = {
        s: {
            "filter": SELECTIVITY.get(s),
            "allowed_passages": len(filt[s][1]) if filt[s][1] is not None else None,
            "p50_ms": round(lat[s]["p50_ms"], 2),
            "ratio": round(lat[s]["p50_ms"] / lat["none"]["p50_ms"], 2),
            "paths": sorted({r.path for r in lat[s]["results"]}),
            "all_k": all(len(r.ranked) == 10 for r in lat[s]["results"]),
        }
        for s in filt
    }

    adds = [r["add_s"] for r in out["rounds"]]
    print(
        f"\nadd 10 % ÷ rebuild everything: median {np.median(adds) / t_build:.3f} (adds {', '.join(f'{a:.1f}' for a in adds)} s; "
        f"build {t_build:.1f} s; from-scratch build of the final documents {t_scratch:.1f} s: {np.median(adds) / t_scratch:.3f}); target ≤ 0.2"
    )
    print(f"compaction {t_compact:.1f} s ({t_compact / t_build:.2f} of the build)")
    print(f"\n{len(ids)} judged msmarco-sample queries, maxsim, k = 10; search only (encoding excluded)")
    print("| index | version | token partitions | nDCG@10 ANN | nDCG@10 exact | overlap@10 | p50 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, r in rows.items():
        print(f"| {n} | {r['version']} | {r['partitions']} | {r['nDCG@10 ann']:.4f} | {r['nDCG@10 exact']:.4f} | {r['overlap@10']:.3f} | {r['p50_ms']:.2f} |")
    d_ann = rows["compacted"]["nDCG@10 ann"] - rows["from scratch"]["nDCG@10 ann"]
    d_exact = rows["compacted"]["nDCG@10 exact"] - rows["from scratch"]["nDCG@10 exact"]
    print(f"compacted − from scratch: ANN {d_ann:+.4f}, exact {d_exact:+.4f} (target within 0.01)")
    print("\nfiltered search on the compacted index (maxsim, default path)")
    print("| selectivity | filter | allowed passages | path | every query k results | p50 ms | ÷ unfiltered |")
    print("| --- | --- | ---: | --- | --- | ---: | ---: |")
    for s, f in out["filters"].items():
        print(
            f"| {s} | {f['filter'] or ''} | {f['allowed_passages'] if f['allowed_passages'] is not None else 'all'} | {'+'.join(f['paths'])} | {f['all_k']} | {f['p50_ms']:.2f} | {f['ratio']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
