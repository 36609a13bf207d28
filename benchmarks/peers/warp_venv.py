"""The xtr-warp-rs virtual environment of ``benchmarks/gpu_check.py`` and
``benchmarks/vs_plaid.py``, built on first use.

    python benchmarks/peers/warp_venv.py        # build it (or say where it is) and print its python

xtr-warp-rs (PyPI ``xtr-warp-rs``, the WARP engine: pruned centroid selection, decompression-
free scoring) is, like fast-plaid, a compiled extension built against one exact torch (its
version's suffix: 2.1.0.2110 is torch 2.11.0). So it lives in its own venv, built as
fast-plaid's is (``benchmarks/peers/plaid_venv.py``: exact pins, a ``.complete`` marker with
``pip freeze`` written last, a file lock): ``~/.cache/mvr-peer-venvs/xtr-warp-rs-<version>``
(``$MVR_PEER_VENVS`` moves the parent). Only the standard library is imported, so mvr's
python can run this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

if __package__:  # imported as peers.warp_venv (benchmarks/ on the path)
    from . import plaid_venv
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import plaid_venv

WARP_VERSION = "2.1.0.2110"
TORCH_VERSION = "2.11.0"  # what xtr-warp-rs 2.1.0.2110 is built for (its version's suffix)
# Exact pins for the package and its torch; the rest of its requirements (fastkmeans, duckdb,
# pyarrow, numpy, …) as pip resolves them, recorded in the venv's .complete marker.
PINS = [f"xtr-warp-rs=={WARP_VERSION}", f"torch=={TORCH_VERSION}"]
SMOKE = "import torch; from xtr_warp import XTRWarp; print(torch.__version__)"


def venv_path() -> Path:
    root = Path(os.environ.get("MVR_PEER_VENVS", Path.home() / ".cache" / "mvr-peer-venvs")).expanduser()
    return root / f"xtr-warp-rs-{WARP_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}"


def is_complete() -> bool:
    """Whether a complete venv of these pins exists (nothing is built)."""
    return plaid_venv.is_complete(venv_path(), PINS)


def ensure_venv(log: Callable[[str], None] = print) -> Path:
    """The venv's python, building the venv first unless a complete one of these pins exists."""
    return plaid_venv.ensure_venv(log, PINS, venv_path(), SMOKE, "xtr-warp-rs")


if __name__ == "__main__":
    print(ensure_venv())
