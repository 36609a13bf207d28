"""Which OpenBLAS kernels FAISS runs on: the core type named for the CPU's instruction set.

The ``faiss-cpu`` wheel bundles its own OpenBLAS (0.3.15 in faiss-cpu 1.15.1), older than the
CPUs it now runs on. On a CPU that OpenBLAS does not know (this machine's Sapphire Rapids Xeon,
AVX-512) its run-time detection falls back to ``Prescott``: SSE3 kernels of 2004. Every BLAS
call of FAISS then runs several times slower than the CPU allows: the k-means of a codec and of
an IVF's coarse cells, PQ training, PCA, and a flat search of 20 or more query vectors
(``benchmarks/nearest_centroid.py``: FAISS's ``IndexFlatL2`` search of 50,000 vectors against
8,192 centroids, one thread, 12.3 s on ``Prescott``, 1.7 s on ``SkylakeX``; an IVFPQ build of
400,000 × 64 vectors 26.5 s against 8.6 s; docs/development.md). numpy's own OpenBLAS is newer
and picks ``SkylakeX`` here by itself.

OpenBLAS reads ``OPENBLAS_CORETYPE`` when the library loads, so ``mvr.operators`` sets it
(unless the environment already does) before FAISS is imported anywhere in mvr: ``SkylakeX``
when the CPU has the AVX-512 subsets those kernels use, ``Haswell`` when it has AVX2 and FMA,
nothing otherwise (OpenBLAS then detects as before). Linux on x86-64 only (the flags come
from ``/proc/cpuinfo``). The variable is the process's (and its children's): any OpenBLAS
loaded after it reads it too, numpy's among them when numpy loads later; on this machine
numpy's picks the same kernels by itself."""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping
from typing import Optional

# the instruction-set extensions each core type's kernels use, best first
CORE_TYPES = (("SkylakeX", frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})), ("Haswell", frozenset({"avx2", "fma"})))


def core_type(flags: set[str] | frozenset[str]) -> Optional[str]:
    """The OpenBLAS core type for a CPU with these ``flags`` (``/proc/cpuinfo``'s names), or
    None when it has neither set (OpenBLAS's own detection is then left alone)."""
    return next((name for name, needs in CORE_TYPES if needs <= flags), None)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's flags in ``cpuinfo``; empty when it cannot be read or has none."""
    try:
        with open(cpuinfo) as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def choose_core_type(environ: MutableMapping[str, str] = os.environ) -> Optional[str]:
    """Set ``OPENBLAS_CORETYPE`` in ``environ`` for this CPU unless it is set already; the
    value it then holds (None: unset). Call before the library that bundles OpenBLAS loads."""
    if "OPENBLAS_CORETYPE" not in environ and platform.system() == "Linux" and platform.machine() == "x86_64":
        chosen = core_type(cpu_flags())
        if chosen:
            environ["OPENBLAS_CORETYPE"] = chosen
    return environ.get("OPENBLAS_CORETYPE")
