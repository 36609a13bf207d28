"""``mvr scale-study --dataset DIR --distractors DIR2 --random-strings N --workdir W`` /
``python -m mvr.jobs.scale_study``: Reimers & Gurevych's index-size study on mvr's own indexes.
Quality (exact search) of BM25, pooled vectors at several dimensions and the multi-vector
modes as the index grows with distractors and, separately, with random strings; tables,
JSON and a PNG (docs/scale_study.md)."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, console, output_console, positive_int, print_config, write_outputs
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config

SHARES = {"random_share": "% of queries with a random string above every relevant passage", "random_top10": "% of queries with a random string in the top 10"}


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.scale_study", description=__doc__)
    p.add_argument("--dataset", required=True, help="BEIR dataset directory whose judged queries are measured")
    p.add_argument("--distractors", help="comma-separated corpora (BEIR dirs or files) added as distractors")
    p.add_argument("--random-strings", type=int, help="random-string passages for the second experiment (0: skip it)")
    p.add_argument("--workdir", help="where corpora are indexed and the random strings written (up-to-date indexes are reused)")
    p.add_argument(
        "--index",
        action="append",
        metavar="CORPUS=INDEX",
        help="an index already built of the dataset or a distractor, used instead of indexing it (repeatable)",
    )
    p.add_argument("--config", help="YAML file with a ScaleStudyConfig (index settings under 'index', BM25 under 'bm25')")
    p.add_argument("--split", help="qrels split (default test)")
    p.add_argument("--steps", type=positive_int, help="index sizes measured per experiment (default 5)")
    p.add_argument("--dims", help="comma-separated pooled dimensions (default 384,128,64; the index's own is unprojected)")
    p.add_argument("--modes", help="comma-separated, out of bm25,pooled,maxsim,first-m,softmax-centroid (default all)")
    p.add_argument("--seed", type=int, help="seed of the distractor shuffle and the random strings (default 0)")
    p.add_argument("--json", dest="json_out", help="write the results as JSON here (path or URL)")
    p.add_argument("--plot", help="write the PNG here (default: next to --json)")
    return p


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def run(args: argparse.Namespace) -> int:
    overrides: dict = {
        "dataset": args.dataset,
        "split": args.split,
        "random_strings": args.random_strings,
        "workdir": args.workdir,
        "steps": args.steps,
        "seed": args.seed,
    }
    overrides["distractors"] = _csv(args.distractors)
    overrides["modes"] = _csv(args.modes)
    if args.index:
        pairs = [i.partition("=") for i in args.index]
        bad = [i for i, (corpus, eq, index) in zip(args.index, pairs) if not (corpus and eq and index)]
        if bad:
            raise ValueError(f"--index takes CORPUS=INDEX, got {bad[0]!r}")
        overrides["indexes"] = {corpus: index for corpus, _, index in pairs}
    if args.dims:
        try:
            overrides["dims"] = [int(d) for d in _csv(args.dims) or []]
        except ValueError:
            raise ValueError(f"--dims takes comma-separated whole numbers, got {args.dims!r}") from None
    import mvr

    config = load_config(mvr.ScaleStudyConfig, args.config, **overrides)
    if not config.dataset:
        raise ValueError("--dataset is required (a BEIR directory)")
    print_config("mvr scale-study: configuration", config)
    result = mvr.scale_study(config, log=console.print)
    out = output_console()
    for name, exp in result.experiments.items():
        out.print(table(result, exp, "nDCG@10"))
        if name == "random-strings":
            out.print(table(result, exp, "random_share"))
            out.print(table(result, exp, "random_top10"))
    write_outputs(args.json_out, lambda: result.to_json(config), args.plot, lambda _: result.plot())
    return 0


def table(result, exp, metric: str):
    """Method × size: ``metric`` at each size and its change from the smallest to the largest
    (a ``ScaleStudyResult`` and one of its ``Experiment``s)."""
    from rich.table import Table

    share = metric in SHARES
    what = SHARES.get(metric, f"exact {metric}")
    title = f"{result.collection} ({result.queries} judged queries), {exp.name}: {what}"
    t = Table(title=title)
    t.add_column("method", justify="left")
    for size in exp.sizes:
        mark = "*" if exp.name == "distractors" and size == result.dataset_passages else ""
        t.add_column(f"{size:,}{mark}", justify="right")
    t.add_column("Δ first→last", justify="right")
    for method in exp.methods:
        values = exp.figure(method, metric)
        cells = [f"{100 * v:.1f}" for v in values] if share else [f"{v:.4f}" for v in values]
        delta = f"{100 * (values[-1] - values[0]):+.1f}" if share else f"{values[-1] - values[0]:+.4f}"
        t.add_row(method, *cells, delta)
    if exp.name == "distractors":
        t.caption = (
            f"* = the whole {result.collection} corpus ({result.dataset_passages:,} passages); first column: its {result.judged_passages:,} judged passages"
        )
    return t


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
