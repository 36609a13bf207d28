"""``mvr delete INDEX --ids FILE`` / ``--where EXPR``: delete documents from a committed index as
a new version (tombstones: no file is rewritten; ``mvr compact`` reclaims the space). From
the moment that version is served, search never returns them. See docs/updates.md."""

from __future__ import annotations

import argparse

from mvr.jobs.common import ArgumentParser, check_utf8, console, print_update
from mvr.jobs.errors import run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.delete", description=__doc__)
    p.add_argument("index", help="a committed index (path or fsspec URL)")
    p.add_argument("--ids", metavar="FILE", help="document ids to delete: one a line, or a JSON list of strings")
    p.add_argument("--where", metavar="EXPR", help="delete the documents a metadata filter selects (docs/filters.md)")
    return p


def run(args: argparse.Namespace) -> int:
    if args.ids is None and args.where is None:
        raise ValueError("say which documents to delete: --ids FILE or --where EXPR")
    if args.where is not None:
        from mvr.operators.retrieval.filters import parse

        check_utf8("--where", args.where)  # argv bytes that are not UTF-8 arrive as lone surrogates
        parse(args.where)  # syntax first, before the index is read (or torch imported: seconds)
    import mvr
    from mvr.pipeline.indexing.updates import read_ids_file

    ids = read_ids_file(args.ids) if args.ids is not None else None
    console.rule(f"mvr delete: {len(ids) if ids is not None else 0} ids" + (f", where {args.where}" if args.where else "") + f" from {args.index}")
    result = mvr.delete(args.index, ids, args.where, log=console.print)
    print_update(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
