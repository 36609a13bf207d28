"""``mvr build-ann INDEX`` / ``python -m mvr.jobs.build_ann INDEX``: partitioned ANN indexes
(FAISS IVFPQ or ScaNN) over an index's vectors, one Ray task a partition."""

from __future__ import annotations

import argparse
import json
import sys

from mvr.jobs.common import ArgumentParser, console, output_console, positive_int, print_config
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config
from mvr.operators.ann.factory import BACKENDS

VECTOR_CHOICES = ("tokens", "centroids", "first-m", "pooled")


def _param(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.build_ann", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    p.add_argument("--config", help="YAML file with an AnnBuildConfig")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="default codec-ivf: lists over the token codec's own centroids (docs/ann.md); faiss-ivfpq, scann: a quantizer and a PQ / AH copy of every vector",
    )
    p.add_argument("--partitions", type=positive_int, help="number of partitions P (default 1)")
    p.add_argument("--vectors", help=f"comma-separated kinds out of {','.join(VECTOR_CHOICES)} (default: all)")
    p.add_argument("--force", action="store_true", help="rebuild kinds whose current build already has these parameters over the same shards")
    p.add_argument("--no-bm25", action="store_true", help="do not build BM25 partitions alongside (mvr build-bm25 builds them alone)")
    p.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE", help="backend build parameter, e.g. nlist=1024 (repeatable)")
    return p


def run(args: argparse.Namespace) -> int:
    overrides = {"backend": args.backend, "partitions": args.partitions}
    if args.vectors:
        overrides["vectors"] = [v.strip() for v in args.vectors.split(",") if v.strip()]
    from mvr.pipeline.config import AnnBuildConfig

    config = load_config(AnnBuildConfig, args.config, **overrides)
    if args.param:
        config = config.model_copy(update={"params": {**config.params, **dict(args.param)}})
    if args.no_bm25:
        config = config.model_copy(update={"bm25": None})
    print_config("mvr build-ann: configuration", config)
    from rich.table import Table

    import mvr
    from mvr.jobs.build_bm25 import print_bm25

    result = mvr.build_ann(args.index, config, force=args.force, log=console.print)
    table = Table(title=f"ANN partitions of {args.index} (manifest version {result.manifest.version})")
    for col in ("vectors", "partition", "passages", "indexed vectors", "MB", "build s"):
        table.add_column(col, justify="right" if col != "vectors" else "left")
    table.add_column("params", overflow="fold")
    for kind, entry in result.built.items():
        for n, part in enumerate(entry["partitions"]):
            mb = sum(f["bytes"] for f in part["files"].values()) / 1e6
            params = " ".join(f"{k}={v}" for k, v in part["params"].items() if v is not None and not isinstance(v, bool))
            table.add_row(kind, str(n), f"{part['passages']:,}", f"{part['vectors']:,}", f"{mb:.1f}", f"{part['build_seconds']:.1f}", params)
    output_console().print(table)
    if config.bm25 is not None:
        print_bm25(result.manifest)
    console.print(f"{result.seconds:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
