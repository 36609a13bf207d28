"""The two dense kernels of exact scoring, on numpy arrays: the half → float32 cast of float16
codes and the float32 matmul (below codecs/ and retrieval/, which both use them). Both run through torch (one of mvr's dependencies; zero-copy
views of the numpy arrays) when it imports, numpy otherwise.

Why torch: numpy converts float16 a value at a time (about 1 ns a value on the 2-core
machine of benchmarks/search_latency.py; torch's F16C / AVX-512 cast is 4x faster on one
thread), and the exact scan alternates the cast and the matmul block by block, hundreds of
times a query. With the cast on torch's OpenMP threads and the matmul on numpy's OpenBLAS
threads, each switch waits for the other pool's spinning threads: measured 2 s instead of
0.05 s a query on msmarco-sample. Both kernels on torch's threads (its matmul is MKL's
sgemm) use one pool. Results are float32 and equal numpy's up to float rounding (the cast is
bit-identical).

CUDA, opt-in (``use_cuda(True)``): a matmul large enough (``cuda_worthwhile``) runs on the
device in float32, its operands copied there and its (r, m) product copied back. Off by
default, because measured it never paid: on one H200 with 16 host cores (2026-11-28,
benchmarks/gpu_check.py, docs/gpu.md), msmarco-sample's 403k token vectors, exact MaxSim ran
at 0.31x the CPU's rate one float16 query at a time and 0.94-1.04x for all 43 queries in one
batch. The copies, not the product, set the time: a GPU scorer needs the passages' vectors
resident on the device and the per-passage max taken there. ``exact_device()`` says where
exact scoring runs. The cast stays on the CPU (the codecs decode there)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

_torch_module: Optional[Any] = None
_torch_tried = False
_cuda_wanted = False  # use_cuda(True): this process's large matmuls may run on CUDA (opt-in)
_cuda_seen: Optional[bool] = None  # torch sees a CUDA device (asked once, on first use)
# The size rule of the opt-in CUDA path (``cuda_worthwhile``): below these, copying the
# passages' vectors to the device and the launch cost more than the CPU's matmul (above them
# too, as measured: see the module docstring).
CUDA_MIN_ROWS = 8  # query vectors (rows of ``a``): one query's pooled vector stays on the CPU
CUDA_MIN_MACS = 1 << 24  # multiply-adds r·d·m (16.8 M: ~32 query vectors × 64 dims × 8k rows)


def get_torch() -> Optional[Any]:
    """torch, imported on first use (so that ``mvr --help`` and the codec module import no
    torch); ``operators.retrieval.partition`` calls it at import, so a partition replica (or a process
    under a memory limit, tests/test_partition_memory.py) pays for it when it loads. None when
    torch does not import."""
    global _torch_module, _torch_tried
    if not _torch_tried:
        _torch_tried = True
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return None
        # codes are read-only memory maps, and the tensors made of them are only read: torch
        # warns once a process about a read-only array, so that once is spent here, silenced
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_only = np.zeros(1, np.float32)
            read_only.flags.writeable = False
            torch.from_numpy(read_only)
        _torch_module = torch
    return _torch_module


def half_to_float32(half: np.ndarray, out: np.ndarray) -> np.ndarray:
    """IEEE half floats (float16, any shape) converted into ``out`` (float32, the same
    shape): bit-identical to ``half.astype(np.float32)`` (subnormals, infinities and NaNs
    included). Returns ``out``."""
    if half.shape != out.shape or out.dtype != np.float32:
        raise ValueError(f"half_to_float32: out must be {half.shape} float32, got {out.dtype} {out.shape}")
    torch = get_torch()
    if torch is None or not half.size or half.dtype != np.float16 or not half.dtype.isnative:
        np.copyto(out, half)
    else:
        torch.from_numpy(out).copy_(torch.from_numpy(half))
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(r, d) @ (d, m) → (r, m) float32 (both converted to float32 first when they are not)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    torch = get_torch()
    if torch is None or a.ndim != 2 or b.ndim != 2 or 0 in a.shape + b.shape or min(a.strides + b.strides) < 0:
        product: NDArray[np.float32] = a @ b
        return product
    if cuda_worthwhile(a.shape[0], a.shape[1], b.shape[1]) and cuda_enabled():
        return _cuda_mm(torch, a, b)
    out: NDArray[np.float32] = torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    return out


def cuda_worthwhile(rows: int, depth: int, cols: int) -> bool:
    """Whether an (rows, depth) @ (depth, cols) float32 matmul goes to the CUDA device when
    there is one: at least ``CUDA_MIN_ROWS`` query vectors and ``CUDA_MIN_MACS``
    multiply-adds (the passages' (depth, cols) operand crosses the bus once for ``rows``
    query vectors, so few rows do not repay it)."""
    return rows >= CUDA_MIN_ROWS and rows * depth * cols >= CUDA_MIN_MACS


def use_cuda(enabled: bool) -> bool:
    """Let this process's large exact-scoring matmuls run on a CUDA device when torch sees
    one (True) or keep them on the CPU (False, the default: measured slower, see the module
    docstring). Returns the previous setting."""
    global _cuda_wanted
    previous, _cuda_wanted = _cuda_wanted, bool(enabled)
    return previous


def cuda_enabled() -> bool:
    """True when ``matmul`` may use CUDA here: allowed (``use_cuda``) and torch sees a device
    (asked once a process)."""
    global _cuda_seen
    if not _cuda_wanted:
        return False
    if _cuda_seen is None:
        torch = get_torch()
        _cuda_seen = bool(torch is not None and torch.cuda.is_available())
    return _cuda_seen


def exact_device() -> str:
    """Where this process's exact scoring runs its large matmuls: "cuda" or "cpu"."""
    return "cuda" if cuda_enabled() else "cpu"


def _cuda_mm(torch: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(r, d) @ (d, m) float32 on the current CUDA device: both operands copied there as
    they are laid out (a transposed view stays one copy), the (r, m) product copied back."""
    device = torch.device("cuda")
    with torch.no_grad():
        out = torch.mm(torch.from_numpy(a).to(device), torch.from_numpy(b).to(device))
    product: NDArray[np.float32] = out.cpu().numpy()
    return product
