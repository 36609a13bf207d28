"""The ``mvr`` command: one subcommand per job; each is also ``python -m mvr.jobs.<module>``."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "index": ("mvr.jobs.index_corpus", "build an index from a corpus (Ray Data)"),
    "add": ("mvr.jobs.add", "add or update documents in a committed index, as a new version (same model and codecs)"),
    "delete": ("mvr.jobs.delete", "delete documents (--ids FILE or --where EXPR) from an index, as a new version"),
    "compact": ("mvr.jobs.compact", "rewrite an index without its deleted rows and rebalance its partitions, as a new version"),
    "build-ann": ("mvr.jobs.build_ann", "build partitioned ANN indexes (FAISS IVFPQ or ScaNN) over an index"),
    "build-bm25": ("mvr.jobs.build_bm25", "build BM25 partitions (bm25s) over an index; build-ann also does"),
    "eval": ("mvr.jobs.evaluate", "evaluate search on a BEIR collection (ir-measures, latency, overlap with exact)"),
    "tune-hybrid": ("mvr.jobs.tune_hybrid", "pick the hybrid fusion weight on one half of a collection's queries, report on the other"),
    "train": ("mvr.jobs.train", "train an encoder for a search mode on Ray Train (its aggregator in the loss); writes a PyLate checkpoint"),
    "scale-study": ("mvr.jobs.scale_study", "quality against index size with distractors and random strings (Reimers & Gurevych)"),
    "verify": ("mvr.jobs.verify", "check every file the manifest lists against its size and sha256; exit 1 naming any bad file"),
    "plan": ("mvr.jobs.plan", "capacity plan: storage, RAM a partition, partitions for a RAM budget, encode hours (arithmetic, reads nothing)"),
    "stats": ("mvr.jobs.stats", "print an index's counts and rejects"),
    "search": ("mvr.jobs.search", "answer one query (in-process, or --url of a running service) and print the results"),
    "serve": ("mvr.jobs.serve", "start the Ray Serve search service over an index (HTTP + handles)"),
    "demo": ("mvr.jobs.demo", "index a small offline corpus (Python's docs) and query it"),
    "submit": ("mvr.jobs.submit", "run another mvr command as a Ray job on a cluster (Ray's job submission API) and follow it"),
}


DEST = "mvr_command"  # not "command": mvr submit has a COMMAND argument of its own

EPILOG = (
    "A failing command prints one line 'error: <cause>' on stderr and exits with status 2 "
    "(verify: 1 for a bad file); MVR_DEBUG=1 prints the full traceback too."
)


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first argument not an option)."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """``mvr``'s parser. Only ``command``'s own arguments are added (importing its job module,
    which imports nothing heavy before ``run``): ``mvr --help`` imports no job at all."""
    from mvr.jobs.common import ArgumentParser

    p = argparse.ArgumentParser(prog="mvr", description="multi-vector retrieval on Ray", epilog=EPILOG)
    sub = p.add_subparsers(dest=DEST, required=True, metavar="COMMAND", parser_class=ArgumentParser)
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        if name == command:
            importlib.import_module(module).parser(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    try:  # Ctrl-C while the command's modules load
        from mvr.jobs.errors import run_job

        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_chosen(argv)).parse_args(argv)
        run = importlib.import_module(COMMANDS[getattr(args, DEST)][0]).run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return run_job(run, args)


if __name__ == "__main__":
    sys.exit(main())
