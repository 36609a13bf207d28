"""``mvr eval INDEX --dataset DIR`` / ``python -m mvr.jobs.evaluate``: a BEIR collection's judged
queries through search, scored with ir-measures; a table per mode, JSON, and a sweep plot."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, check_utf8, console, number_list, output_console, positive_int, print_config, write_outputs
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config, load_index_manifest


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr import MODES, SEARCH_MODES

    p = p or ArgumentParser(prog="python -m mvr.jobs.evaluate", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    p.add_argument("--dataset", required=True, help="BEIR dataset directory (queries.jsonl, qrels/SPLIT.tsv)")
    p.add_argument("--config", help="YAML file with an EvalConfig (search knobs under 'search')")
    p.add_argument("--split", help="qrels split (default test)")
    p.add_argument("--modes", help=f"comma-separated, out of {','.join(SEARCH_MODES)} (default: the dense ones, {','.join(MODES)})")
    p.add_argument("-k", "--k", type=positive_int, help="documents retrieved a query (default 100)")
    p.add_argument("--exact", action="store_true", help="brute-force search only (the exact reference)")
    p.add_argument("--filter", metavar="EXPR", help="search only the documents this metadata filter selects (docs/filters.md)")
    p.add_argument("--no-overlap", action="store_true", help="skip the exact run that overlap@10 needs")
    p.add_argument(
        "--baseline",
        metavar="INDEX2",
        help="instead: exact search on INDEX2 and INDEX side by side, nDCG@10 per mode with Δ ± s.e. (e.g. a base and a trained checkpoint's indexes)",
    )
    p.add_argument("--sweep", help="comma-separated values of the first-stage knob, e.g. 4,8,16,32,64")
    p.add_argument("--sweep-knob", help="k_prime (default), candidate_cap, probe_fraction, nprobe, leaves_to_search or reorder_k")
    p.add_argument("--json", dest="json_out", help="write the results as JSON here (path or URL)")
    p.add_argument("--plot", help="write the sweep's quality-vs-latency PNG here (default: next to --json)")
    return p


def run(args: argparse.Namespace) -> int:
    overrides: dict = {"dataset": args.dataset, "split": args.split, "k": args.k, "sweep_knob": args.sweep_knob}
    if args.modes:
        overrides["modes"] = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.sweep:
        overrides["sweep"] = number_list("--sweep", args.sweep)
    if args.exact:
        overrides["search.exact"] = True
    if args.no_overlap:
        overrides["overlap"] = False
    import mvr

    config = load_config(mvr.EvalConfig, args.config, **overrides)
    if not config.dataset:
        raise ValueError("--dataset is required (a BEIR directory)")
    load_index_manifest(args.index)  # a missing or damaged index refused before any model loads
    if args.filter is not None:
        check_utf8("--filter", args.filter)
        mvr.check_filter(args.filter, args.index)  # an invalid filter refused before any model loads
    print_config("mvr eval: configuration", config)
    from rich.table import Table

    if args.baseline:
        return compare_indexes(args.index, args.baseline, config, args.json_out)

    result = mvr.evaluate(args.index, config, filter=args.filter, log=console.print)
    where = f", filter {args.filter} ({result.allowed_passages} passages)" if args.filter is not None else ""
    table = Table(title=f"{result.collection}: {result.queries} judged queries, k={config.k}{where}")
    columns = ["mode", "path", "partitions", "nDCG@10", "RR@10", "R@100", "p50 ms", "p95 ms", "overlap@10", "exact nDCG@10", "exact p50 ms"]
    for c in columns:
        table.add_column(c, justify="left" if c in ("mode", "path") else "right")
    for mode, f in result.modes.items():
        ex = f.get("exact", {})
        table.add_row(
            mode,
            f["path"],
            str(f["partitions"]),
            f"{f['nDCG@10']:.4f}",
            f"{f['RR@10']:.4f}",
            f"{f['R@100']:.4f}",
            f"{f['latency_ms_p50']:.1f}",
            f"{f['latency_ms_p95']:.1f}",
            _opt(f.get("overlap@10")),
            _opt(ex.get("nDCG@10")),
            _opt(ex.get("latency_ms_p50"), 1),
        )
    output_console().print(table)
    for mode, points in result.sweep.items():
        t = Table(title=f"sweep of {config.sweep_knob}: {mode}")
        for c in (config.sweep_knob, "nDCG@10", "R@100", "overlap@10", "search p50 ms"):
            t.add_column(c, justify="right")
        for p in points:
            t.add_row(str(p[config.sweep_knob]), f"{p['nDCG@10']:.4f}", f"{p['R@100']:.4f}", _opt(p.get("overlap@10")), f"{p['search_ms_p50']:.2f}")
        output_console().print(t)
    index_version = _index_version(args.index)
    png = (lambda name: result.plot(config.sweep_knob, name)) if result.sweep else None
    write_outputs(args.json_out, lambda: result.to_json(config, args.index, index_version), args.plot, png)
    return 0


def compare_indexes(index: str, baseline: str, config, json_out: str | None) -> int:
    """``--baseline``: exact nDCG@10 of every mode on both indexes, Δ = INDEX − INDEX2."""
    from rich.table import Table

    import mvr

    load_index_manifest(baseline)
    rows = mvr.compare(index, baseline, config)
    table = Table(title=f"exact nDCG@10 on {config.dataset} ({config.split}): {index} against {baseline}")
    for c in ("mode", "baseline", "index", "Δ", "± s.e."):
        table.add_column(c, justify="left" if c == "mode" else "right")
    for mode, r in rows.items():
        table.add_row(mode, f"{r['base']:.4f}", f"{r['index']:.4f}", f"{r['delta']:+.4f}", f"{r['se']:.4f}")
    output_console().print(table)
    write_outputs(json_out, lambda: {"index": index, "baseline": baseline, "dataset": config.dataset, "modes": rows}, None, None)
    return 0


def _opt(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _index_version(index_url: str) -> int:
    return load_index_manifest(index_url).version


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
