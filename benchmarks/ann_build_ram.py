"""The ANN build task's peak RAM, measured against what `mvr plan` models for it.

Each case runs in a fresh process (``--probe BACKEND N DIM``): it builds one partition's index
as ``pipeline/indexing/ann_build.build_partition`` does (trained on the backend's sample, then filled a
block of ``operators.ann.ADD_BATCH`` vectors at a time, one build thread) over N random unit
vectors of DIM dimensions, and prints the process's peak RSS above its imports (``VmHWM``, not
``ru_maxrss``: Linux keeps ru_maxrss across exec, so a child of a large process would report
its parent's peak). The table beside it is ``operators.planning.capacity.ann_build_ram`` for the same
index. ``tests/test_capacity_plan.py`` runs the probe at 400,000 vectors of 64 dims.

    python benchmarks/ann_build_ram.py                          # the sizes in docs/capacity.md
    python benchmarks/ann_build_ram.py --sizes 400000 --dims 64 --backends scann
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def probe(backend: str, n: int, dim: int) -> int:
    """Peak bytes above the imports of building ``backend`` over ``n`` × ``dim`` vectors here
    (call it in a fresh process: the peak is the process's)."""
    import numpy as np

    from mvr.operators.ann.base import ADD_BATCH, set_build_threads
    from mvr.operators.ann.factory import make_index

    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith(key)).split()[1]) * 1024

    set_build_threads(1)
    index = make_index(backend, dim, n)
    rng = np.random.default_rng(0)

    def block(k: int) -> np.ndarray:
        x = rng.standard_normal((k, dim), dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    sample = block(min(index.params.get("training_sample_size", n), n))
    base = status("VmRSS:") - sample.nbytes  # the peak above the imports; build_partition holds its decoded sample too
    index.train(sample)
    del sample
    for lo in range(0, n, ADD_BATCH):
        index.add(block(min(ADD_BATCH, n - lo)))
    index.finalize()
    return status("VmHWM:") - base


def measure(backend: str, n: int, dim: int, timeout: float = 1800) -> int:
    """``probe`` in a fresh Python process: its peak bytes above the imports."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--probe", backend, str(n), str(dim)], capture_output=True, text=True, timeout=timeout, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"the {backend} probe at {n} × {dim} failed:\n{out.stderr[-2000:]}")
    return int(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probe", nargs=3, metavar=("BACKEND", "N", "DIM"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="200000,400000,800000,1600000", help="vectors a partition, comma-separated")
    p.add_argument("--dims", default="64", help="dimensions, comma-separated")
    p.add_argument("--backends", default="faiss-ivfpq,scann")
    a = p.parse_args(argv)
    if a.probe:
        print(probe(a.probe[0], int(a.probe[1]), int(a.probe[2])))
        return 0

    from mvr.operators.planning.capacity import ann_build_ram, ann_index_size

    print(f"{'backend':<12} {'vectors':>10} {'dim':>4} {'measured MB':>12} {'model MB':>9} {'ratio':>6}")
    for backend in a.backends.split(","):
        for dim in (int(d) for d in a.dims.split(",")):
            for n in (int(s) for s in a.sizes.split(",")):
                measured = measure(backend, n, dim)
                model, _ = ann_build_ram(ann_index_size(backend, dim, n), dim)
                print(f"{backend:<12} {n:>10,} {dim:>4} {measured / 1e6:>12,.0f} {model / 1e6:>9,.0f} {measured / model:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
