"""``mvr tune-hybrid``: pick the hybrid's λ on some of a collection's judged queries and report
it on the others, never on the queries it was tuned on.

The judged queries are split by a seeded shuffle into ``folds`` folds. For each fold, λ is
picked on the other folds and the fold is scored with it. The pick (``pick_lam``) follows the
one-standard-error rule by default: of the grid values whose metric on the tuning queries is
within one standard error (of the per-query difference) of the best, the one nearest the
configured λ; a few dozen judged queries cannot tell apart λ values closer than that, and
picking the best of them fits their noise (measured: on dbpedia-sample's two folds of 20
queries, the best λ was 0.95 on one and 0.75 on the other, and each lost to the default on the
other fold). ``rule: best`` takes the best (the smallest of ties). The fold is scored: every query is reported with a λ tuned without it, and all queries
are reported (with 2 folds: tune on one half, report on the other, then the other way round).
Each query's hybrid union (both sides' n-best, rescored exactly on both sides) is computed
once, for all the queries in one trip (``Searcher.hybrid_passages``: on the exact path one pass
over the vectors); every λ only re-fuses it. Beside the tuned hybrid: the hybrid at the configured
settings (``hybrid-default``: what a search without knobs answers), RRF (nothing to tune) and
both sides alone, run as their own modes, over the same queries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
from tqdm import tqdm

from mvr.operators.retrieval.fusion import HybridParams, Union, fuse_union, union_of_best
from mvr.pipeline.config import TuneHybridConfig
from mvr.pipeline.plots import png_bytes, pyplot
from mvr.pipeline.retrieval.evaluation import per_query, quality
from mvr.pipeline.retrieval.plan import SearchResult
from mvr.pipeline.retrieval.request import request_settings
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.beir import TestCollection, read_collection


@dataclass
class Fold:
    """One fold: its queries, the λ tuned on the other folds and that grid's scores there."""

    queries: list[str]
    lam: float
    grid: list[dict[str, float]]


@dataclass
class TuneResult:
    """``folds``: each fold's λ; ``reported``: {method: figures over every judged query}, the
    hybrid's with each fold's own λ; ``per_fold``: {method: [figures on each fold]};
    ``paired_se``: {method: the standard error of the per-query difference hybrid − method in
    the tuned metric}, the noise against which "hybrid beats method" is read."""

    collection: str
    queries: int
    folds: list[Fold] = field(default_factory=list)
    reported: dict[str, dict[str, float]] = field(default_factory=dict)
    per_fold: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    paired_se: dict[str, float] = field(default_factory=dict)

    def to_json(self, config: TuneHybridConfig) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "config": config.model_dump(mode="json", by_alias=True)}

    def plot(self, config: TuneHybridConfig) -> bytes:
        """PNG of the metric against λ on each fold (``plot_grid``)."""
        return plot_grid(self, config)


def split_folds(query_ids: list[str], folds: int, seed: int) -> list[list[str]]:
    """``folds`` near-equal folds of ``query_ids`` by a seeded shuffle (each sorted)."""
    if len(query_ids) < folds:
        raise ValueError(f"{len(query_ids)} judged queries cannot be split into {folds} folds")
    order = np.random.default_rng(seed).permutation(len(query_ids))
    return [sorted(query_ids[i] for i in part) for part in np.array_split(order, folds)]


def subset(collection: TestCollection, ids: list[str]) -> TestCollection:
    """The collection restricted to the queries ``ids`` (their judgments only)."""
    keep = set(ids)
    return TestCollection(collection.name, {q: t for q, t in collection.queries.items() if q in keep}, [j for j in collection.qrels if j.query_id in keep])


def pick_lam(scores: dict[float, dict[str, float]], default: float, rule: str = "one-se") -> float:
    """The λ to use from ``scores`` {λ: {query: metric}} on the tuning queries. ``best``: the
    highest mean (the smallest λ of ties). ``one-se``: of the λ whose mean is within one
    standard error of the paired per-query difference from the best's, the nearest
    ``default`` (then the smallest)."""
    means = {lam: float(np.mean(list(v.values()))) for lam, v in scores.items()}
    best = max(sorted(means), key=lambda lam: means[lam])
    if rule == "best":
        return best
    if rule != "one-se":
        raise ValueError(f"unknown rule {rule!r}: one-se or best")
    queries = list(scores[best])

    def within(lam: float) -> bool:
        diff = np.array([scores[best][q] - scores[lam][q] for q in queries])
        se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
        return means[best] - means[lam] <= se

    return min((lam for lam in means if within(lam)), key=lambda lam: (round(abs(lam - default), 9), lam))


def fused_run(unions: dict[str, tuple[Union, int]], params: HybridParams, k: int) -> dict[str, SearchResult]:
    """{query: result} of fusing each query's union ({query: (union, partitions answering)},
    taken with ``params.n_best``) with ``params``."""
    out = {}
    for q, (union, parts) in unions.items():
        ranked, n = fuse_union(union, params, k)
        out[q] = SearchResult(q, "hybrid", ranked, "", n, parts, parts)
    return out


def tune_hybrid(
    index_url: str, config: TuneHybridConfig, log: Callable[[str], None] = print, searcher: Optional[Searcher] = None, batch: Optional[int] = None
) -> TuneResult:
    """Run the tuning ``config`` describes (see the module docstring). ``batch``: queries
    whose unions are taken in one trip (``Searcher.hybrid_passages``; default all of them;
    1: one query at a time), the same unions either way."""
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    collection = read_collection(config.dataset, config.split)
    judged = list(collection.judged_queries)
    folds = split_folds(judged, config.folds, config.seed)
    search = config.search.model_copy(update={"hybrid": config.search.hybrid.model_copy(update={"dense": config.dense})})
    searcher = searcher or Searcher(index_url, [config.dense, "bm25", "hybrid"], search)
    fs, base = request_settings(search, "hybrid", {"dense": config.dense})
    assert fs is not None and base is not None  # mode hybrid: both settings are given
    encoded = dict(zip(judged, searcher.encode([collection.queries[q] for q in judged])))
    step = batch or len(judged)
    unions: dict[str, tuple[Union, int]] = {}
    for lo in tqdm(range(0, len(judged), step), desc=f"hybrid unions ({step} queries a batch)", unit="batch"):
        ids = judged[lo : lo + step]
        for q, parts in zip(ids, searcher.hybrid_passages([encoded[q] for q in ids], base, fs)):
            unions[q] = (union_of_best(parts, base.n_best), len(parts))  # taken once, fused with every λ
    # the dense side alone: exact ones in one pass over the vectors for every query
    dense = dict(zip(judged, searcher.search_encoded_batch([encoded[q] for q in judged], config.k, config.dense)))
    bm25 = {q: searcher.search([collection.queries[q]], config.k, "bm25")[0] for q in judged}
    weighted = {lam: fused_run(unions, dataclasses.replace(base, fusion="weighted", lam=float(lam)), config.k) for lam in config.grid}
    rrf = fused_run(unions, dataclasses.replace(base, fusion="rrf"), config.k)
    result = TuneResult(collection.name, len(judged))
    hybrid: dict[str, SearchResult] = {}
    runs = {"hybrid": hybrid, "hybrid-default": fused_run(unions, base, config.k), "hybrid-rrf": rrf, config.dense: dense, "bm25": bm25}
    for i, fold in enumerate(folds):
        tune_ids = [q for j, f in enumerate(folds) if j != i for q in f]
        tune_set = subset(collection, tune_ids)
        scores = {float(lam): per_query({q: run[q] for q in tune_ids}, tune_set, config.metric) for lam, run in weighted.items()}
        grid = [{"lam": lam, config.metric: round(float(np.mean(list(v.values()))), 4)} for lam, v in scores.items()]  # each query scored once
        lam = pick_lam(scores, base.lam, config.rule)
        result.folds.append(Fold(fold, lam, grid))
        hybrid.update({q: weighted[lam][q] for q in fold})
        got = next(g[config.metric] for g in grid if g["lam"] == lam)
        log(f"fold {i + 1}/{len(folds)}: λ = {lam} ({config.metric} {got:.4f} on the other {len(tune_ids)} queries, rule {config.rule})")
    for name, run in runs.items():
        result.reported[name] = quality(run, collection)
        result.per_fold[name] = [quality({q: run[q] for q in fold}, subset(collection, fold)) for fold in folds]
    tuned = per_query(hybrid, collection, config.metric)
    for name, run in runs.items():
        if name != "hybrid":
            other = per_query(run, collection, config.metric)
            diff = np.array([tuned[q] - other[q] for q in judged])
            result.paired_se[name] = round(float(diff.std(ddof=1) / np.sqrt(len(diff))), 4) if len(diff) > 1 else float("nan")
    return result


def plot_grid(result: TuneResult, config: TuneHybridConfig) -> bytes:
    """PNG: the metric against λ on each fold's tuning queries (the picked λ marked), with
    the held-out figures of both sides alone and of RRF as horizontal lines."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, fold in enumerate(result.folds):
        x = [g["lam"] for g in fold.grid]
        y = [g[config.metric] for g in fold.grid]
        ax.plot(x, y, "o-", color=f"C{i}", markersize=3, label=f"tuning on all but fold {i + 1} (λ = {fold.lam})")
        ax.axvline(fold.lam, color=f"C{i}", linestyle=":", linewidth=0.8)
    styles = {"hybrid": "-", "hybrid-default": (0, (5, 1, 1, 1)), "hybrid-rrf": "-.", config.dense: "--", "bm25": ":"}
    for name, style in styles.items():
        ax.axhline(
            result.reported[name][config.metric],
            color="k",
            linestyle=style,
            linewidth=0.9,
            label=f"reported: {name} {result.reported[name][config.metric]:.4f}",
        )
    ax.set_xlabel("λ (dense weight; 0 = BM25 only, 1 = dense only)")
    ax.set_ylabel(config.metric)
    ax.set_title(f"{result.collection}: hybrid {config.dense} + BM25, λ tuned by fold", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)
