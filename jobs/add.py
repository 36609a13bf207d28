"""``mvr add INDEX CORPUS`` / ``python -m mvr.jobs.add INDEX CORPUS``: add documents to a committed
index as a new version, with the index's own model, conventions and codecs (no retraining).
A document id the index holds already is replaced (an update). See docs/updates.md."""

from __future__ import annotations

import argparse

from mvr.jobs.common import ArgumentParser, check_utf8, console, print_config, print_update
from mvr.jobs.errors import run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.add", description=__doc__)
    p.add_argument("index", help="a committed index (path or fsspec URL)")
    p.add_argument("corpus", help="the documents to add: a file or directory of JSON lines, TSV or Parquet (as for mvr index)")
    p.add_argument("--force", action="store_true", help="add an input again that an earlier add of the same bytes committed")
    return p


def run(args: argparse.Namespace) -> int:
    check_utf8("INDEX", args.index)  # before the pipeline (and torch) is imported: seconds
    check_utf8("CORPUS", args.corpus)
    from mvr.storage.index_dir import check_corpus_outside

    check_corpus_outside(args.corpus, args.index)  # before the index's configuration is printed, and torch imported
    import mvr
    from mvr.pipeline.config import IndexConfig
    from mvr.storage.manifest import load_manifest

    m = load_manifest(args.index)
    print_config(f"mvr add: the configuration of {args.index} (version {m.version}), which the new documents are indexed with", IndexConfig.of_index(m.config))
    result = mvr.add(args.index, args.corpus, force=args.force, log=console.print)
    print_update(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
