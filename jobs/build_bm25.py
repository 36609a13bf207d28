"""``mvr build-bm25 INDEX`` / ``python -m mvr.jobs.build_bm25 INDEX``: BM25 partitions (bm25s,
collection-wide statistics) over an index's passages, one Ray task a partition. ``mvr
build-ann`` builds them too, over the same partitions as its ANN indexes."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, console, output_console, positive_int, print_config
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.build_bm25", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    p.add_argument("--config", help="YAML file with a BM25BuildConfig")
    p.add_argument("--partitions", type=positive_int, help="number of partitions P (default 1; use the ANN build's P for hybrids)")
    p.add_argument("--stopwords", help="bm25s stopword list (default en; 'none' keeps every word)")
    p.add_argument("--stemmer", help="PyStemmer language (default english; 'none' for no stemming)")
    p.add_argument("--k1", type=float, help="BM25 k1 (default 1.5)")
    p.add_argument("--b", type=float, help="BM25 b (default 0.75)")
    return p


def run(args: argparse.Namespace) -> int:
    from mvr.pipeline.config import BM25BuildConfig

    config = load_config(BM25BuildConfig, args.config, partitions=args.partitions, **{"bm25.k1": args.k1, "bm25.b": args.b})
    for name in ("stopwords", "stemmer"):
        value = getattr(args, name)
        if value is not None:
            config.bm25 = config.bm25.model_copy(update={name: None if value.lower() == "none" else value})
    print_config("mvr build-bm25: configuration", config)
    import mvr

    manifest = mvr.build_bm25(args.index, config, log=console.print)
    print_bm25(manifest)
    return 0


def print_bm25(manifest) -> None:
    """Table of the manifest's BM25 partitions (a ``storage.manifest.Manifest``)."""
    from rich.table import Table

    entry = manifest.bm25
    c = entry["collection"]
    table = Table(
        title=f"BM25 partitions (manifest version {manifest.version}): {c['passages']:,} passages, {c['terms']:,} terms, mean length {c['mean_length']:.1f}"
    )
    for col in ("partition", "passages", "terms", "MB", "build s"):
        table.add_column(col, justify="right")
    for n, part in enumerate(entry["partitions"]):
        mb = sum(f["bytes"] for f in part["files"].values()) / 1e6
        table.add_row(str(n), f"{part['passages']:,}", f"{part['terms']:,}", f"{mb:.2f}", f"{part['build_seconds']:.1f}")
    output_console().print(table)


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
