"""``mvr compact INDEX`` / ``python -m mvr.jobs.compact INDEX``: a new version of the index without
its deleted rows, partitions split evenly again (the coarse quantizers retrained when the data
has drifted), then the files no retained version lists removed. See docs/updates.md."""

from __future__ import annotations

import argparse

from mvr.jobs.common import ArgumentParser, console, print_update
from mvr.jobs.errors import run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or ArgumentParser(prog="python -m mvr.jobs.compact", description=__doc__)
    p.add_argument("index", help="a committed index (path or fsspec URL)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--retrain", dest="retrain", action="store_true", default=None, help="retrain the ANN quantizers whatever the drift")
    group.add_argument("--no-retrain", dest="retrain", action="store_false", help="reuse the trained quantizers where the backend can (FAISS)")
    return p


def run(args: argparse.Namespace) -> int:
    import mvr
    from mvr.pipeline.indexing.compaction import RETRAIN_CHURN

    rule = {True: "always", False: "never (where the backend can reuse them)", None: f"when the churn since training exceeds {RETRAIN_CHURN:.0%}"}[args.retrain]
    console.rule(f"mvr compact {args.index}: retrain ANN quantizers {rule}")
    result = mvr.compact(args.index, retrain=args.retrain, log=console.print)
    print_update(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
