"""Small adds: a job of at most ``runtime.small_job_rows`` rows (default 1,000, on a cluster
without GPUs) run in the driver process against the same job on Ray Data with an actor pool
(``small_job_rows: 0``), side by side in one run.

    python benchmarks/small_adds.py [--dataset ../shared/datasets/msmarco-sample] [--docs 10] [--rounds 6] [--cli]

Two indexes of the same first 200 passages, one with each setting, are built first (not
timed). Then ``--rounds`` rounds each add ``--docs`` new passages to both indexes, in
alternating order: validation, encoding, compression, ANN partitions and BM25 extended,
catalog and commit. By default with ``pipeline.indexing.updates.add_documents`` from this one
Python process (a service's writer, or a notebook, adding documents as they arrive); with
``--cli`` as ``mvr add`` commands, each a process of its own that joins this benchmark's Ray
cluster (``RAY_ADDRESS``), as a user's script or a test runs it. An actor pool starts an encode
actor (a process that imports torch and loads the model) for every add; a job in the driver
starts no worker for its stages, and from one process keeps the model loaded from the previous
add. The first round of each is shown apart (the model is loaded then). Run it alone: every
figure is a time on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=str(root.parent / "shared" / "datasets" / "msmarco-sample"))
    p.add_argument("--docs", type=int, default=10, help="passages an add")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--cli", action="store_true", help="each add an `mvr add` command joining this benchmark's Ray cluster")
    args = p.parse_args()

    from mvr.pipeline.config import AnnBuildConfig, IndexConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.indexing.updates import add_documents
    from mvr.pipeline.ray_runtime import init_ray

    with open(Path(args.dataset) / "corpus.jsonl") as f:
        docs = [json.loads(line) for _, line in zip(range(200 + args.docs * args.rounds), f)]
    init_ray(quiet=True)
    import ray

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}

    def add(batch: Path, index: str) -> None:
        if not args.cli:
            add_documents(str(batch), index, log=lambda _: None)
            return
        r = subprocess.run([sys.executable, "-m", "mvr.jobs.cli", "add", index, str(batch)], env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"mvr add failed:\n{r.stderr[-3000:]}")

    variants = {"driver": 1000, "actor pool": 0}
    times: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.jsonl"
        base.write_text("".join(json.dumps(d) + "\n" for d in docs[:200]))
        for name, rows in variants.items():
            index = str(Path(tmp) / name.replace(" ", "-"))
            index_corpus(str(base), index, IndexConfig.from_yaml(None, **{"runtime.small_job_rows": rows}), log=lambda _: None)
            build_ann(index, AnnBuildConfig(partitions=1, vectors=["pooled"]), log=lambda _: None)
        for r in range(args.rounds):
            batch = Path(tmp) / f"add-{r}.jsonl"
            batch.write_text("".join(json.dumps(d) + "\n" for d in docs[200 + r * args.docs : 200 + (r + 1) * args.docs]))
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                t0 = time.perf_counter()
                add(batch, str(Path(tmp) / name.replace(" ", "-")))
                times[name].append(time.perf_counter() - t0)
            print(f"round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in variants), flush=True)
    print(f"\n{args.docs} passages an add, {args.rounds} rounds, {'each an `mvr add` command' if args.cli else 'from one Python process'}")
    print(f"{'small job':<12} {'first add s':>12} {'later adds p50 s':>17}")
    for name in variants:
        print(f"{name:<12} {times[name][0]:>12.2f} {statistics.median(times[name][1:]):>17.2f}")
    later = statistics.median(times["actor pool"][1:]) / statistics.median(times["driver"][1:])
    print(f"later adds: the actor pool takes {later:.2f}x the driver's time")


if __name__ == "__main__":
    main()
