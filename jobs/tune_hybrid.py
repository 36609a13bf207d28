"""``mvr tune-hybrid INDEX --dataset DIR`` / ``python -m mvr.jobs.tune_hybrid``: pick the hybrid's
λ on some of a collection's judged queries and report it on the others (never on the queries
it was tuned on), beside RRF and both sides alone; a table, JSON, and a λ curve (PNG)."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, console, number_list, output_console, positive_int, print_config, write_outputs
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config, load_index_manifest


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.tune_hybrid", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL) with BM25 partitions")
    p.add_argument("--dataset", required=True, help="BEIR dataset directory (queries.jsonl, qrels/SPLIT.tsv)")
    p.add_argument("--config", help="YAML file with a TuneHybridConfig")
    p.add_argument("--split", help="qrels split (default test); its judged queries are split into folds")
    p.add_argument("--dense", help="dense mode fused with BM25 (default maxsim)")
    p.add_argument("--folds", type=positive_int, help="query folds (default 2: tune on one half, report on the other, both ways)")
    p.add_argument("--grid", help="comma-separated λ values to try (default 0, 0.05, ..., 1)")
    p.add_argument(
        "--rule",
        choices=("one-se", "best"),
        help="how λ is picked on the tuning queries (default one-se: within one standard error of the best, the nearest the configured λ)",
    )
    p.add_argument("--exact", action="store_true", help="dense side by brute force even where ANN partitions exist")
    p.add_argument("--batch", type=positive_int, help="queries whose hybrid unions are taken together (default: all; 1: one at a time, the same unions)")
    p.add_argument("--json", dest="json_out", help="write the results as JSON here (path or URL)")
    p.add_argument("--plot", help="write the λ curve (PNG) here (default: next to --json)")
    return p


def run(args: argparse.Namespace) -> int:
    overrides: dict = {"dataset": args.dataset, "split": args.split, "dense": args.dense, "folds": args.folds, "rule": args.rule}
    if args.grid:
        overrides["grid"] = number_list("--grid", args.grid)
    if args.exact:
        overrides["search.exact"] = True
    import mvr

    config = load_config(mvr.TuneHybridConfig, args.config, **overrides)
    if not config.dataset:
        raise ValueError("--dataset is required (a BEIR directory)")
    load_index_manifest(args.index)  # a missing or damaged index refused before any model loads
    print_config("mvr tune-hybrid: configuration", config)
    from rich.table import Table

    result = mvr.tune_hybrid(args.index, config, batch=args.batch, log=console.print)
    lams = ", ".join(str(f.lam) for f in result.folds)
    table = Table(title=f"{result.collection}: {result.queries} judged queries, each reported with λ tuned on the other fold(s) (λ per fold: {lams})")
    columns = ["method", "nDCG@10", "RR@10", "R@100"] + [f"{config.metric} fold {i + 1}" for i in range(len(result.folds))]
    for c in columns:
        table.add_column(c, justify="left" if c == "method" else "right")
    for name, f in result.reported.items():
        folds = [f"{x[config.metric]:.4f}" for x in result.per_fold[name]]
        table.add_row(name, f"{f['nDCG@10']:.4f}", f"{f['RR@10']:.4f}", f"{f['R@100']:.4f}", *folds)
    output_console().print(table)
    write_outputs(args.json_out, lambda: result.to_json(config), args.plot, lambda _: result.plot(config))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
