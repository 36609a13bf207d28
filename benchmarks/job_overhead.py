"""What an indexing job costs before it works: the machine's busy core-seconds (all processes,
from /proc/stat) and the wall time of one small ``mvr index`` (``--docs`` passages, float16
codes: no codec training), three ways side by side in one run:

- ``own Ray``: ``mvr index`` in a process of its own that starts a local Ray (as a laptop user
  runs it): imports, the cluster, its workers, the model;
- ``in process, first``: ``index_corpus`` in a process that has started Ray already (its
  workers start and load the model now);
- ``in process, again``: the same job again in that process (its workers kept the model).

    python benchmarks/job_overhead.py [--dataset ../shared/datasets/msmarco-sample] [--docs 20] [--rounds 3]

Run it alone: every figure is the whole machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def busy_core_s() -> float:
    """The machine's busy CPU time so far (user, nice, system, irq, softirq), seconds."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def measured(run) -> tuple[float, float]:
    """(busy core-s, wall s) of ``run()``."""
    b, t = busy_core_s(), time.perf_counter()
    run()
    return busy_core_s() - b, time.perf_counter() - t


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=str(root.parent / "shared" / "datasets" / "msmarco-sample"))
    p.add_argument("--docs", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="job-overhead-"))
    corpus = work / "corpus.jsonl"
    with open(Path(args.dataset) / "corpus.jsonl") as f:
        corpus.write_text("".join(next(f) for _ in range(args.docs)))
    codecs = {"compress.codec": "float16", "compress.pooled_codec": "float16"}
    index = work / "index"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}

    def own_ray() -> None:
        shutil.rmtree(index, ignore_errors=True)
        cmd = [sys.executable, "-m", "mvr.jobs.cli", "index", str(corpus), str(index), "--codec", "float16", "--pooled-codec", "float16"]
        subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True)

    rows = {"own Ray": [measured(own_ray) for _ in range(args.rounds)]}

    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.ray_runtime import init_ray

    init_ray(quiet=True)
    config = IndexConfig.from_yaml(None, **codecs)

    def in_process() -> None:
        shutil.rmtree(index, ignore_errors=True)
        index_corpus(str(corpus), str(index), config, log=lambda _: None)

    rows["in process, first"] = [measured(in_process)]
    rows["in process, again"] = [measured(in_process) for _ in range(args.rounds)]
    shutil.rmtree(work, ignore_errors=True)
    print(f"{args.docs}-passage mvr index (float16 codes), {args.rounds} rounds; busy core-s and wall s of the whole machine")
    print(f"{'how':20} {'core-s (each run)':30} {'median wall s':>14}")
    for how, runs in rows.items():
        print(f"{how:20} {', '.join(f'{c:.1f}' for c, _ in runs):30} {statistics.median(w for _, w in runs):14.1f}")
    print(json.dumps({how: [{"core_s": round(c, 2), "wall_s": round(w, 2)} for c, w in runs] for how, runs in rows.items()}))


if __name__ == "__main__":
    main()
