"""FAISS's bundled OpenBLAS runs the kernels of this CPU's instruction set
(``operators/openblas.py``), not the SSE3 fallback its own detection picks on a CPU it does not
know."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from mvr.operators.openblas import choose_core_type, core_type, cpu_flags

AVX512 = {"sse3", "avx", "avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def test_the_core_type_follows_the_instruction_sets():
    assert core_type(frozenset(AVX512)) == "SkylakeX"
    assert core_type(frozenset(AVX512 - {"avx512bw"})) == "Haswell"  # AVX-512F alone (Knights Landing) is not SkylakeX's set
    assert core_type(frozenset({"sse3", "avx", "avx2", "fma"})) == "Haswell"
    assert core_type(frozenset({"sse3", "avx"})) is None  # OpenBLAS detects by itself


def test_a_core_type_the_environment_names_is_kept(tmp_path):
    environ = {"OPENBLAS_CORETYPE": "Zen"}
    assert choose_core_type(environ) == "Zen" and environ == {"OPENBLAS_CORETYPE": "Zen"}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse3 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "sse3", "avx2", "fma"}  # the first processor's
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64", reason="the rule reads Linux's /proc/cpuinfo on x86-64")
def test_faiss_loads_the_kernels_the_cpu_has():
    """In a fresh process without ``OPENBLAS_CORETYPE``, FAISS imported through mvr runs the
    core type the CPU's flags name (``threadpoolctl`` reads what each loaded OpenBLAS chose).
    On this project's machines FAISS's own detection chose ``Prescott``."""
    expected = core_type(cpu_flags())
    if expected is None:
        pytest.skip("this CPU has neither AVX-512 nor AVX2: OpenBLAS's own detection is kept")
    probe = (
        "import json, mvr.operators.ann.ivfpq, faiss\n"
        "from threadpoolctl import threadpool_info\n"
        "print(json.dumps({i['filepath']: i['architecture'] for i in threadpool_info() if i['internal_api'] == 'openblas'}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True)
    architectures = json.loads(out.stdout)
    faiss_blas = [arch for path, arch in architectures.items() if "faiss" in path]
    assert faiss_blas == [expected], architectures
