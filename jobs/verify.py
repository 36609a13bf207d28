"""``mvr verify INDEX`` / ``python -m mvr.jobs.verify INDEX``: every file the manifest lists
(shards, ANN partition files, BM25 partition files; rejects and catalog by presence) checked
against its recorded size and sha256. Exit status 0 when all match, 1 when any file is
missing, truncated, oversized or corrupted (each is named), 2 when the index cannot be read."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, console, output_console, positive_int
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_index_manifest


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.verify", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    p.add_argument("--workers", type=positive_int, default=4, help="files checked at once (default 4)")
    p.add_argument("--all", dest="show_all", action="store_true", help="list every file, not only the bad ones")
    return p


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import mvr
    from mvr.storage.verify import expected_files

    manifest = load_index_manifest(args.index)
    n_files = len(expected_files(manifest))
    with Progress(TextColumn("verify"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("verify", total=n_files)
        report = mvr.verify(args.index, workers=args.workers, progress=lambda _: bar.advance(task), manifest=manifest)
    print_report(report, args.show_all)
    return 0 if report.ok else 1


def print_report(report, show_all: bool = False) -> None:
    """Summary per kind of file, then the bad files (every file with ``show_all``) of a
    ``storage.verify.VerifyReport``."""
    from rich.table import Table

    out = output_console()
    summary = Table(title=f"mvr verify {report.index_url} (manifest version {report.manifest_version})")
    for col in ("files", "count", "listed MB", "bad"):
        summary.add_column(col, justify="left" if col == "files" else "right")
    for what, count, listed, bad in report.summary():
        summary.add_row(what, f"{count:,}", "-" if listed is None else f"{listed / 1e6:,.1f}", f"[red]{bad}[/red]" if bad else "0")
    out.print(summary)
    rows = report.checks if show_all else report.problems
    if rows:
        table = Table(title="files" if show_all else "files that do not match the manifest")
        for col in ("status", "file", "part of", "listed bytes", "actual bytes", "detail"):
            table.add_column(col, justify="right" if "bytes" in col else "left", overflow="fold")
        for c in rows:
            status = c.status if c.ok else f"[red]{c.status}[/red]"
            table.add_row(status, c.path, c.group, _n(c.expected_bytes), _n(c.actual_bytes), c.detail)
        out.print(table)
    bad = len(report.problems)
    if bad:
        out.print(f"[red]{bad} of {len(report.checks)} listed files are missing or do not match the manifest[/red]")
    else:
        out.print(f"all {len(report.checks)} listed files match the manifest")


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
