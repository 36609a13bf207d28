"""``mvr train DATA OUT`` / ``python -m mvr.jobs.train``: train an encoder for a search mode on
Ray Train (a TorchTrainer worker group: one CPU worker here, N GPU workers on a cluster), the
mode's aggregator in the loss. DATA: a corpus (unsupervised Inverse Cloze Task and title
pairs), a BEIR directory with qrels/train.tsv, or a JSONL file of query/positive pairs. OUT: a
PyLate / sentence-transformers checkpoint for ``mvr index --model OUT``. Rerun the same
command to resume a run that was stopped. docs/training.md."""

from __future__ import annotations

import argparse
import sys

from mvr.jobs.common import ArgumentParser, check_utf8, console, positive_int, print_config
from mvr.jobs.errors import run_job
from mvr.jobs.inputs import load_config


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr import MODES

    p = p or ArgumentParser(prog="python -m mvr.jobs.train", description=__doc__)
    p.add_argument(
        "data", help="a corpus (file or directory mvr index reads), a BEIR directory with qrels/train.tsv, or a JSONL of {query, positive[, negatives]}"
    )
    p.add_argument("out", help="the checkpoint directory to write (new or empty; or a stopped run's, to resume it)")
    p.add_argument("--config", help="YAML file with a TrainConfig")
    p.add_argument("--base", help="checkpoint to start from (default minilm, the packaged all-MiniLM-L6-v2)")
    p.add_argument("--objective", choices=MODES, help="the search mode trained for (default maxsim)")
    p.add_argument("--steps", type=positive_int, help="optimiser steps (default: one pass over the pairs)")
    p.add_argument("--batch-size", type=positive_int, help="pairs a step a worker (default 16)")
    p.add_argument("--max-pairs", type=positive_int, help="a seeded sample of at most this many pairs")
    p.add_argument(
        "--negatives-from",
        metavar="INDEX",
        action="append",
        help="mine hard negatives with this mvr index (BM25 by default; repeat for several: a pair's in the one holding its positive)",
    )
    p.add_argument(
        "--eval-dataset",
        metavar="DIR",
        action="append",
        help="a BEIR directory whose queries no training query may equal (repeat for several; data.on_overlap: refuse or drop)",
    )
    p.add_argument("--workers", type=positive_int, help="Ray Train workers (default 1)")
    p.add_argument("--seed", type=int, help="seed of the pairs, their order and the initialisation (default 0)")
    p.add_argument("--restart", action="store_true", help="discard OUT's run and start over")
    return p


def run(args: argparse.Namespace) -> int:
    from mvr.pipeline.config import TrainConfig

    for what, text in (("DATA", args.data), ("OUT", args.out)):
        check_utf8(what, text)
    config = load_config(
        TrainConfig,
        args.config,
        base=args.base,
        objective=args.objective,
        **{
            "train.steps": args.steps,
            "train.batch_size": args.batch_size,
            "train.seed": args.seed,
            "data.max_pairs": args.max_pairs,
            "data.negatives_from": args.negatives_from,
            "data.eval_datasets": args.eval_dataset,
            "runtime.workers": args.workers,
        },
    )
    from mvr.operators.encode.checkpoint import check_model_name

    check_model_name(config.base)
    print_config("mvr train: configuration", config)
    import mvr

    result = mvr.train(args.data, args.out, config, log=console.print, restart=args.restart)
    console.print(f"{result.steps:,} steps on {result.pairs:,} pairs in {result.seconds:.0f} s; index with: mvr index CORPUS INDEX --model {result.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
