"""The ``mvr`` command: one subcommand per job; each is also ``python -m jobs.<module>``."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "index": ("jobs.index_corpus", "build an index from a corpus (Ray Data)"),
    "build-ann": ("jobs.build_ann", "build partitioned ANN indexes (FAISS IVFPQ or ScaNN) over an index"),
    "build-bm25": ("jobs.build_bm25", "build BM25 partitions (bm25s) over an index; build-ann also does"),
    "eval": ("jobs.evaluate", "evaluate search on a BEIR collection (ir-measures, latency, overlap with exact)"),
    "tune-hybrid": ("jobs.tune_hybrid", "pick the hybrid fusion weight on one half of a collection's queries, report on the other"),
    "scale-study": ("jobs.scale_study", "quality against index size with distractors and random strings (Reimers & Gurevych)"),
    "verify": ("jobs.verify", "check every file the manifest lists against its size and sha256; exit 1 naming any bad file"),
    "plan": ("jobs.plan", "capacity plan: storage, RAM a partition, partitions for a RAM budget, encode hours (arithmetic, reads nothing)"),
    "stats": ("jobs.stats", "print an index's counts and rejects"),
    "search": ("jobs.search", "answer one query (in-process, or --url of a running service) and print the results"),
    "serve": ("jobs.serve", "start the Ray Serve search service over an index (HTTP + handles)"),
    "demo": ("jobs.demo", "index a small offline corpus (Python's docs) and query it"),
    "submit": ("jobs.submit", "run another mvr command as a Ray job on a cluster (Ray's job submission API) and follow it"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mvr", description="multi-vector retrieval on Ray")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        importlib.import_module(module).parser(sub.add_parser(name, help=help_text, description=help_text))
    args = p.parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)


if __name__ == "__main__":
    sys.exit(main())
