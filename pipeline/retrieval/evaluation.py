"""``mvr eval``: a BEIR collection's judged queries through the search core, scored with
ir-measures (nDCG@10, RR@10, R@100), with per-query latency and, for approximate search, the
overlap of the top-10 with exact search. An optional sweep of one first-stage knob gives
quality against latency (``plot_sweep`` draws it). With a metadata filter (docs/filters.md)
every query, the exact reference's too, searches only the documents it allows; the qrels are
unchanged, so judged documents outside the filter count as not found."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import ir_measures
import numpy as np
from ir_measures import RR, R, nDCG
from tqdm import tqdm

from mvr.operators.encode.query import EncodedQuery
from mvr.pipeline.config import EvalConfig, SearchConfig
from mvr.pipeline.plots import png_bytes, pyplot
from mvr.pipeline.retrieval.plan import SearchResult
from mvr.pipeline.retrieval.request import Restriction
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.beir import TestCollection, read_collection

MEASURES = {"nDCG@10": nDCG @ 10, "RR@10": RR @ 10, "R@100": R @ 100}


def quality(results: dict[str, SearchResult], collection: TestCollection) -> dict[str, float]:
    """ir-measures over the judged queries of ``results`` ({query_id: result})."""
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]
    run = [ir_measures.ScoredDoc(q, d, s) for q, r in results.items() for d, s in r.hits()]
    agg = ir_measures.calc_aggregate(list(MEASURES.values()), qrels, run)
    return {name: round(float(agg[m]), 4) for name, m in MEASURES.items()}


def per_query(results: dict[str, SearchResult], collection: TestCollection, metric: str = "nDCG@10") -> dict[str, float]:
    """``metric`` of each judged query of ``results`` ({query_id: value}; 0 for a query that
    found nothing judged)."""
    qrels = [ir_measures.Qrel(j.query_id, j.doc_id, j.relevance) for j in collection.qrels]
    run = [ir_measures.ScoredDoc(q, d, s) for q, r in results.items() for d, s in r.hits()]
    values = {m.query_id: float(m.value) for m in ir_measures.iter_calc([MEASURES[metric]], qrels, run)}
    return {q: values.get(q, 0.0) for q in results}


def exact_quality(dataset: str, index: str, modes: Sequence[str], split: str = "test") -> dict[str, Any]:
    """Exact search (every passage scored) of a collection's judged queries under each mode:
    {"ndcg10": {mode: nDCG@10}, "per_query": {mode: {query_id: nDCG@10}}}."""
    collection = read_collection(dataset, split)
    judged = collection.judged_queries
    out: dict[str, Any] = {"per_query": {}, "ndcg10": {}}
    with Searcher(index, modes=tuple(modes), config=SearchConfig(exact=True)) as searcher:
        dense = [m for m in modes if m != "bm25"]
        encoded = dict(zip(judged, searcher.encode(list(judged.values())))) if dense else {}
        for mode in modes:
            queries = {q: EncodedQuery.text_only(t) for q, t in judged.items()} if mode == "bm25" else encoded
            results = {q: searcher.search_encoded(e, 10, mode) for q, e in queries.items()}
            out["per_query"][mode] = per_query(results, collection)
            out["ndcg10"][mode] = quality(results, collection)["nDCG@10"]
    return out


def paired_se(a: dict[str, float], b: dict[str, float]) -> float:
    """Standard error of the mean per-query difference a − b over b's queries."""
    d = np.array([a[q] - b[q] for q in b])
    return float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def compare_exact(baseline: dict[str, Any], other: dict[str, Any], modes: Sequence[str]) -> dict[str, dict[str, float]]:
    """Two ``exact_quality`` results side by side: {mode: {base, index, delta, se}}, delta =
    other − baseline, se the standard error of the paired per-query difference."""
    return {
        mode: {
            "base": baseline["ndcg10"][mode],
            "index": other["ndcg10"][mode],
            "delta": round(other["ndcg10"][mode] - baseline["ndcg10"][mode], 4),
            "se": round(paired_se(other["per_query"][mode], baseline["per_query"][mode]), 4),
        }
        for mode in modes
    }


def overlap_at_10(approx: dict[str, SearchResult], exact: dict[str, SearchResult]) -> float:
    """Mean share of the exact top-10 documents found in the approximate top-10."""
    shares = [len(set(approx[q].ranked.doc_ids[:10]) & set(e.ranked.doc_ids[:10])) / max(1, min(10, len(e.ranked))) for q, e in exact.items()]
    return round(float(np.mean(shares)), 4) if shares else float("nan")


def latency(results: dict[str, SearchResult], stage: str = "total") -> dict[str, float]:
    ms = np.array([r.timings_ms[stage] for r in results.values()])
    return {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2)}


def _search_ms_p50(results: dict[str, SearchResult]) -> float:
    """Median latency without query encoding (candidates + rescore + merge)."""
    return round(float(np.median([r.timings_ms["total"] - r.timings_ms["encode"] for r in results.values()])), 3)


@dataclass
class Evaluation:
    """``modes``: {mode: figures}; ``sweep``: {mode: [figures at each knob value]}."""

    collection: str
    queries: int
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    sweep: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    filter: Optional[str] = None
    allowed_passages: Optional[int] = None

    def to_json(self, config: EvalConfig, index_url: str, index_version: int) -> dict[str, Any]:
        return {
            "index": index_url,
            "index_version": index_version,
            "collection": self.collection,
            "queries": self.queries,
            "filter": self.filter,
            "allowed_passages": self.allowed_passages,
            "modes": self.modes,
            "sweep": self.sweep,
            "config": config.model_dump(mode="json", by_alias=True),
        }

    def plot(self, knob: str, title: str) -> bytes:
        """PNG of the sweep over ``knob`` (``plot_sweep``; ``title``: its file name)."""
        return plot_sweep(self, knob, title)


def _run(
    searcher: Searcher, encoded: dict[str, tuple[EncodedQuery, float]], mode: str, k: int, restriction: Optional[Restriction] = None, **knobs: Any
) -> dict[str, SearchResult]:
    """Every query through ``mode``, one at a time (per-query latency); ``bm25`` is charged no
    encoding time (it needs no model)."""
    return {q: searcher.search_encoded(e, k, mode, 0.0 if mode == "bm25" else encode_ms, restriction, **knobs) for q, (e, encode_ms) in encoded.items()}


def _run_batch(
    searcher: Searcher, encoded: dict[str, tuple[EncodedQuery, float]], mode: str, k: int, restriction: Optional[Restriction] = None
) -> dict[str, SearchResult]:
    """Every query through ``mode`` in one batch (``Searcher.search_encoded_batch``: the
    exact reference decodes the index once for all queries); the same results as ``_run``,
    latencies the batch's time a query plus the query's encoding."""
    results = searcher.search_encoded_batch([e for e, _ in encoded.values()], k, mode, [ms for _, ms in encoded.values()], restriction)
    return dict(zip(encoded, results))


def evaluate(
    index_url: str, config: EvalConfig, log: Callable[[str], None] = print, searcher: Optional[Searcher] = None, filter: Optional[str] = None
) -> Evaluation:
    """Run the evaluation ``config`` describes. Latency per query covers encoding (one query
    at a time, as a service sees them) and search; sweep latencies leave encoding out.
    ``filter``: a metadata filter every search applies (``FilterError`` before any query is
    encoded when it is invalid)."""
    collection = read_collection(config.dataset, config.split)
    queries = collection.judged_queries
    if not queries:
        raise ValueError(f"{config.dataset}: no judged queries in split {config.split!r}")
    searcher = searcher or Searcher(index_url, config.modes, config.search)
    restriction = searcher.restriction(filter) if filter is not None else None
    if restriction is not None:
        log(f"filter {filter!r}: {len(restriction)} passages allowed")
    exact = None
    ann_modes = [m for m in config.modes if searcher.paths[m] == "ann"]
    if config.overlap and ann_modes:  # the exact reference, for the modes ANN answers only
        exact = Searcher(index_url, ann_modes, config.search.model_copy(update={"exact": True}), searcher.query_encoder.encoder)
    exact_restriction = exact.restriction(filter) if exact is not None and filter is not None else None
    for text in queries.values():
        searcher.check(text, config.k, config.modes[0])
    searcher.encode(["warm-up"])
    encoded: dict[str, tuple[EncodedQuery, float]] = {}
    for q, text in tqdm(queries.items(), desc="encode queries", unit="query"):
        t0 = time.perf_counter()
        encoded[q] = (searcher.encode([text])[0], (time.perf_counter() - t0) * 1e3)
    out = Evaluation(collection.name, len(queries), filter=filter, allowed_passages=len(restriction) if restriction is not None else None)
    for mode in config.modes:
        results = _run(searcher, encoded, mode, config.k, restriction)
        figures: dict[str, Any] = {**quality(results, collection)}
        lat = latency(results)
        paths = sorted({r.path for r in results.values()})  # a filter may send some queries to exact scoring
        figures.update(
            {"latency_ms_p50": lat["p50"], "latency_ms_p95": lat["p95"], "path": "+".join(paths) if restriction is not None else searcher.paths[mode]}
        )
        figures["search_ms_p50"] = _search_ms_p50(results)
        figures["candidates_mean"] = round(float(np.mean([r.candidates for r in results.values()])), 1)
        figures["partitions"] = searcher.partition_count(mode)
        if exact is not None and searcher.paths[mode] == "ann":
            reference = _run_batch(exact, encoded, mode, config.k, exact_restriction)
            figures["overlap@10"] = overlap_at_10(results, reference)
            figures["exact"] = {**quality(reference, collection), "latency_ms_p50": latency(reference)["p50"]}
        out.modes[mode] = figures
        log(f"{mode}: " + ", ".join(f"{k}={v}" for k, v in figures.items() if not isinstance(v, dict)))
        if config.sweep and searcher.paths[mode] == "ann":
            points = []
            for value in config.sweep:
                value = value if config.sweep_knob == "probe_fraction" else int(value)
                swept = _run(searcher, encoded, mode, config.k, restriction, **{config.sweep_knob: value})
                point = {config.sweep_knob: value, **quality(swept, collection)}
                point["search_ms_p50"] = _search_ms_p50(swept)
                if exact is not None:
                    point["overlap@10"] = overlap_at_10(swept, reference)
                points.append(point)
            out.sweep[mode] = points
    return out


def plot_sweep(evaluation: Evaluation, knob: str, path: str) -> bytes:
    """PNG of nDCG@10 and overlap@10 against search latency over the sweep, one line per mode
    (exact nDCG@10 dashed). Returns the PNG bytes (``path`` is the title's file name)."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (mode, points) in enumerate(evaluation.sweep.items()):
        color = f"C{i}"
        x = [p["search_ms_p50"] for p in points]
        axes[0].plot(x, [p["nDCG@10"] for p in points], "o-", color=color, label=mode)
        for p, xv in zip(points, x):
            axes[0].annotate(str(p[knob]), (xv, p["nDCG@10"]), textcoords="offset points", xytext=(3, 3), fontsize=7)
        exact = evaluation.modes.get(mode, {}).get("exact")
        if exact:
            axes[0].axhline(exact["nDCG@10"], color=color, linestyle="--", linewidth=0.8)
        if all("overlap@10" in p for p in points):
            axes[1].plot(x, [p["overlap@10"] for p in points], "o-", color=color, label=mode)
    for ax, ylabel in zip(axes, ("nDCG@10 (dashed: exact)", "overlap@10 with exact")):
        ax.set_xscale("log")
        ax.set_xlabel("search latency p50, ms (query encoding excluded)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{evaluation.collection}: quality vs latency over {knob} ({path})", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)
