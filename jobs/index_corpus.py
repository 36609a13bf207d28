"""``mvr index CORPUS INDEX`` / ``python -m mvr.jobs.index_corpus CORPUS INDEX``: build an index."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, check_utf8, console, print_config
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import add_config_args, load_index_config


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.index_corpus", description=__doc__)
    p.add_argument("corpus", help="BEIR dir, .jsonl, .parquet or .tsv (path or fsspec URL)")
    p.add_argument("index", help="index directory (path or fsspec URL)")
    add_config_args(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing index at INDEX")
    return p


def run(args: argparse.Namespace) -> int:
    check_utf8("CORPUS", args.corpus)  # a path whose bytes are not UTF-8: refused, not half-read
    check_utf8("INDEX", args.index)
    config = load_index_config(args)
    print_config("mvr index: configuration", config)
    import mvr

    result = mvr.index(args.corpus, args.index, config, overwrite=args.overwrite, log=console.print)
    print(result.summary)
    console.print(f"{result.seconds:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
