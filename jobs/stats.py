"""``mvr stats INDEX``: passages, documents, tokens, the codecs (and the names asked for, e.g.
``auto``: a corpus too small for a codec's training trains another, docs/codecs.md), rejects
by reason, and the
bytes a vector of each kind costs on disk, measured from the files (codes files' column
buffers and the ANN partitions' index files, over the kind's vector count)."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_index_manifest


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.stats", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    return p


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import mvr

    load_index_manifest(args.index)  # a damaged manifest.json named as such
    s = mvr.stats(args.index)
    table = Table(title=f"mvr index {args.index}", show_header=False)
    for key, value in s.items():
        if key not in ("rejects_by_reason", "vector_bytes"):
            table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    for reason, n in s["rejects_by_reason"]:
        table.add_row(f"rejected: {reason}", f"{n:,}")
    out = Console()
    out.print(table)
    vb = s["vector_bytes"]
    per = Table(title="bytes a vector on disk, measured: codecs " + ", ".join(f"{g} {n}" for g, n in vb["codecs"].items()))
    for col in ("kind", "codec", "vectors", "codes bytes", "ANN index bytes", "codes B/vector", "ANN B/vector", "total B/vector"):
        per.add_column(col, justify="left" if col == "kind" else "right")
    for kind, k in vb["kinds"].items():
        per.add_row(
            kind,
            f"{k['codec']} ({k['bytes_per_vector']} B)",
            f"{k['vectors']:,}",
            f"{k['codes_bytes']:,}",
            f"{k['ann_bytes']:,}",
            f"{k['codes_per_vector']:.2f}",
            f"{k['ann_per_vector']:.2f}",
            f"{k['total_per_vector']:.2f}",
        )
    t = vb["total"]
    per.add_row(
        "[bold]total[/bold]",
        "",
        f"{t['vectors']:,}",
        f"{t['codes_files_bytes']:,}",
        f"{t['ann_bytes']:,}",
        f"{t['codes_files_bytes'] / max(t['vectors'], 1):.2f}",
        f"{t['ann_bytes'] / max(t['vectors'], 1):.2f}",
        f"[bold]{t['per_vector']:.2f}[/bold]",
    )
    out.print(per)
    out.print(
        "codes: each kind's column buffers (codes + int32 list offsets) in the shards' codes files; total: the codes files' whole bytes. "
        "ANN: the index/ files of the kind's partitions. Not counted: passages.parquet files (ids), codecs/*.mvrc."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
