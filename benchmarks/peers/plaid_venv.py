"""The fast-plaid virtual environment of ``benchmarks/vs_plaid.py``, built on first use.

    python benchmarks/peers/plaid_venv.py        # build it (or say where it is) and print its python

fast-plaid is a compiled extension built against one exact torch (its version's suffix:
1.7.0.2110 is torch 2.11.0), while mvr runs on its own torch. So fast-plaid lives in its own
venv, never in mvr's dependencies: ``~/.cache/mvr-peer-venvs/fast-plaid-<version>``
(``$MVR_PEER_VENVS`` moves the parent), with exact pins, a ``.complete`` marker written last
(holding the recipe and ``pip freeze``) and a file lock so two runs never build it at once.
torch 2.11.0 comes from PyPI, its CUDA build (several GB with its nvidia-* libraries); it
runs on the CPU here. Only the standard library is imported, so mvr's python can run this.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

FAST_PLAID_VERSION = "1.7.0.2110"
TORCH_VERSION = "2.11.0"  # what fast-plaid 1.7.0.2110 requires (==)
# Exact pins: fast-plaid, the torch it was built for, and its own requirements at the
# versions this benchmark was recorded with.
PINS = [
    f"fast-plaid=={FAST_PLAID_VERSION}",
    f"torch=={TORCH_VERSION}",
    "fastkmeans==0.5.0",
    "numpy==2.4.6",
    "usearch==2.26.6",
    "joblib==1.6.0",
    "filelock==4.2.12",
]
SMOKE = "import fast_plaid, torch; from fast_plaid import search; print(torch.__version__)"


def peer_env(threads: int | None = None) -> dict[str, str]:
    """Environment for the venv's python: none of mvr's paths, no user site; with ``threads``,
    every thread pool fast-plaid may use (torch's intra-op pool via OpenMP/MKL, and rayon in its
    Rust core) capped at that many."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    if threads is not None:
        env |= {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")}
    return env


def venv_path() -> Path:
    root = Path(os.environ.get("MVR_PEER_VENVS", Path.home() / ".cache" / "mvr-peer-venvs")).expanduser()
    return root / f"fast-plaid-{FAST_PLAID_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}"


def _build(venv: Path, log: Callable[[str], None], pins: list[str] = PINS, smoke: str = SMOKE, what: str = "fast-plaid") -> None:
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
    python = str(venv / "bin" / "python")
    constraints = venv / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    cmd = [python, "-m", "pip", "install", "-q", "-c", str(constraints), *pins]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=peer_env())
    log(f"{what} venv: pip install: {time.perf_counter() - t0:.0f} s")
    if out.returncode:
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"{what} venv: `{' '.join(cmd)}` failed:\n{(out.stdout + out.stderr)[-3000:]}")
    out = subprocess.run([python, "-c", smoke], capture_output=True, text=True, env=peer_env(), cwd=venv)
    if out.returncode:
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"{what} venv: {what} does not import:\n{out.stderr[-3000:]}")
    freeze = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, env=peer_env()).stdout.split()
    (venv / ".complete").write_text(json.dumps({"pins": pins, "freeze": freeze}, indent=1))


def is_complete(venv: Path, pins: list[str] = PINS) -> bool:
    """Whether ``venv`` is a complete build of ``pins`` (its ``.complete`` marker says so)."""
    marker = venv / ".complete"
    return marker.exists() and json.loads(marker.read_text()).get("pins") == pins


def ensure_venv(log: Callable[[str], None] = print, pins: list[str] = PINS, venv: Path | None = None, smoke: str = SMOKE, what: str = "fast-plaid") -> Path:
    """The venv's python, building the venv first unless a complete one of these pins exists
    (defaults: fast-plaid's; ``benchmarks/peers/warp_venv.py`` gives xtr-warp-rs's)."""
    venv = venv or venv_path()
    venv.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(venv, pins):
            return venv / "bin" / "python"
        log(f"{what} venv: creating {venv} (torch {TORCH_VERSION} from PyPI, several GB, the first time only)")
        _build(venv, log, pins, smoke, what)
        log(f"{what} venv: created in {time.perf_counter() - t0:.0f} s")
    return venv / "bin" / "python"


def installed_versions(python: Path) -> dict[str, str]:
    """Package versions in the venv, from its ``.complete`` marker."""
    freeze = json.loads((python.parent.parent / ".complete").read_text())["freeze"]
    return dict(line.split("==", 1) for line in freeze if "==" in line)


if __name__ == "__main__":
    print(ensure_venv())
