"""``mvr stats INDEX``: passages, documents, tokens, bytes per token vector, rejects by reason."""

from __future__ import annotations

import argparse
import sys

from jobs.common import ArgumentParser, load_index_manifest, run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m jobs.stats", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    return p


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from pipeline.index_info import index_stats

    load_index_manifest(args.index)  # a damaged manifest.json named as such
    s = index_stats(args.index)
    table = Table(title=f"mvr index {args.index}", show_header=False)
    for key, value in s.items():
        if key != "rejects_by_reason":
            table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    for reason, n in s["rejects_by_reason"]:
        table.add_row(f"rejected: {reason}", f"{n:,}")
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
