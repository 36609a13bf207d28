"""The GPU paths without a GPU: benchmarks/gpu_check.py's CPU dry run (the fast lane runs the
part that starts no Ray; the whole of it is a Ray test), its refusal without CUDA, and the
selection logic of the GPU paths (exact scoring's opt-in CUDA matmul, the encode stage's
device, FAISS's build device). The tests marked for CUDA run only where
torch sees a device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mvr.operators import codecs, kernels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _report(out: Path) -> dict:
    report = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.md").read_text().startswith("# mvr GPU check")
    return report


def _rows(report: dict, step: str) -> list[dict]:
    return [r for r in report["rows"] if r["step"] == step]


def test_dry_run_without_ray_measures_every_step_that_starts_no_ray(tmp_path):
    """``--dry-run --no-ray``: the bare loops, the FAISS builds and the exact scorer run on the
    CPU at a tiny size and land in the JSON and the markdown table; the steps that start Ray
    say so; no Ray is started and the process's CUDA switch is left as it was."""
    import ray

    from benchmarks import gpu_check

    ray_was_up = ray.is_initialized()  # another test in this process may have started it
    out = tmp_path / "out"
    assert gpu_check.main(["--dry-run", "--no-ray", "--out", str(out)]) == 0
    report = _report(out)
    assert report["dry_run"] and not report["ray"] and report["mode"] == "dry run on the CPU"
    md = (out / "gpu_check.md").read_text()
    assert "no figure here is a GPU measurement" in md and md.count("\n| ") >= 1 + len(report["rows"])

    encode = _rows(report, "encode")
    assert [r["what"].split(" ")[0] for r in encode] == list(gpu_check.DATASETS)
    for r in encode:  # the bare loop measured, the pipeline's side left to the Ray test
        assert r["b"] > 0 and r["a"] is None and r["status"] == "skipped: starts Ray (--no-ray)"
        assert r["peak_gpu"]["bare loop"] == "not measured (no CUDA)"

    (faiss_row,) = _rows(report, "faiss-ivfpq build")
    assert faiss_row["status"] == "ok" and faiss_row["a"] > 0 and faiss_row["b"] > 0
    assert faiss_row["ratio"] == pytest.approx(faiss_row["a"] / faiss_row["b"])
    faiss = report["details"]["faiss"]
    assert faiss["build_device"] == {"gpu": ["cpu"] * gpu_check.FAISS_PARTITIONS, "cpu": ["cpu"] * gpu_check.FAISS_PARTITIONS}
    assert faiss["params"] == {"brute_force": False, "nlist": 8, "nbits": 4}  # an IVFPQ at the dry run's size

    exact = _rows(report, "exact MaxSim")
    assert len(exact) == 4 and all(r["status"] == "ok" and r["ratio"] > 0 for r in exact)
    default = codecs.resolve_name("auto", 384)  # the default token codec at MiniLM's dimension
    assert sum(r["what"].startswith(f"codes ({default})") for r in exact) == 2
    assert sum(r["what"].startswith("float16") for r in exact) == 2
    assert all("identical top-10: 100% of queries" in r["note"] for r in exact)  # the same ranking either way
    assert set(report["details"]["exact"]["float16"]) == {"gpu", "cpu"}

    for name in gpu_check.DATASETS:  # the bare loop encoded passages (its times are a benchmark's: docs/gpu.md's GPU run)
        assert report["details"]["encode"][name]["bare_passages"] > 0
    (peers,) = _rows(report, "vs peers")
    assert peers["status"] == "skipped: starts Ray (--no-ray)"
    assert not kernels._cuda_wanted  # the script's use_cuda of each side undone: the default, off
    assert ray.is_initialized() == ray_was_up  # the dry run without Ray started none


def test_without_cuda_it_refuses_in_one_line_and_measures_nothing(tmp_path):
    """Without CUDA and without --dry-run: exit status 2, one line on stderr naming the cause,
    no report (it never measures the CPU in place of the GPU)."""
    if _cuda():
        pytest.skip("torch sees a CUDA device here")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--no-install"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("no CUDA device: torch ") and "--dry-run" in lines[0]
    assert not out.exists()


def test_refusal_names_the_cause():
    from benchmarks.gpu_check import CudaStatus, no_cuda_reason

    cpu_build = no_cuda_reason(CudaStatus("2.13.0+cpu", None, False, None, []))
    assert cpu_build.startswith("torch 2.13.0+cpu is a CPU build and nvidia-smi lists no GPU;")
    assert "lists 1 GPU(s)" in no_cuda_reason(CudaStatus("2.13.0+cpu", None, False, None, ["GPU 0: NVIDIA H100"]))
    cuda_build = no_cuda_reason(CudaStatus("2.11.0+cu130", "13.0", False, None, []))
    assert cuda_build.startswith("torch 2.11.0+cu130 (CUDA 13.0) sees none;")


def test_install_plan_comes_from_the_repository_files(tmp_path):
    """A CPU torch on a machine with a GPU is replaced by constraints.txt's version (PyPI's
    Linux wheel is the CUDA build), faiss-cpu by the gpu extra's requirements under the
    constraints less torch (not mvr itself: its dependencies would bring faiss-cpu back);
    nothing when both are there already."""
    from benchmarks.gpu_check import CudaStatus, gpu_extra, install_commands, pinned

    root, extra = ROOT, tmp_path / "constraints-gpu.txt"
    torch_pin = pinned(root / "constraints.txt", "torch")
    assert torch_pin and pinned(root / "constraints.txt", "no-such-package") is None
    assert any(req.startswith("faiss-gpu") for req in gpu_extra(root))
    gpu_box = CudaStatus("2.13.0+cpu", None, False, None, ["GPU 0: NVIDIA H100"])
    cmds = install_commands(gpu_box, False, root, extra)
    assert [c[3:] for c in cmds] == [
        ["install", "--force-reinstall", "--no-deps", f"torch=={torch_pin}"],
        ["install", "-c", str(root / "constraints.txt"), f"torch=={torch_pin}"],
        ["uninstall", "-y", "faiss-cpu"],
        ["install", "-c", str(extra), *gpu_extra(root)],
    ]
    assert all(c[:3] == [sys.executable, "-m", "pip"] for c in cmds)
    ready = CudaStatus("2.11.0+cu130", "13.0", True, "NVIDIA H100", ["GPU 0: NVIDIA H100"])
    assert install_commands(ready, True, root, extra) == []
    assert [c[3] for c in install_commands(ready, False, root, extra)] == ["uninstall", "install"]  # the CUDA torch stays


def test_gpu_extra_is_read_as_pip_reads_it():
    import tomllib

    from benchmarks.gpu_check import gpu_extra

    assert gpu_extra(ROOT) == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]


def test_copies_corpus_repeats_the_collection_and_keeps_the_first_copy(tmp_path):
    """--copies N: step 1's corpus is the collection's documents N times over (ids suffixed
    from the second copy on), and the later steps get the first copy's passages only."""
    from benchmarks.gpu_check import Encoded, Run, encode_corpus, first_copy, read_docs

    source = tmp_path / "data" / "c"
    source.mkdir(parents=True)
    (source / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": f"t{i}"}) + "\n" for i in ("a", "b", "c")))
    run = Run(
        cuda=False,
        dry=True,
        ray=False,
        out=tmp_path,
        work=tmp_path / "w",
        datasets=tmp_path / "data",
        model="minilm",
        limit=2,
        queries=None,
        rounds=1,
        copies=3,
    )
    assert [d["_id"] for d in read_docs(encode_corpus(run, "c"), None)] == ["a", "b", "a~1", "b~1", "a~2", "b~2"]
    offsets = np.array([0, 2, 3, 5, 6, 8, 9])  # 6 passages: a, b twice over and again
    enc = Encoded(["a", "b", "a~1", "b~1", "a~2", "b~2"], np.zeros(6, np.int32), np.arange(9, dtype=np.float32)[:, None], offsets)
    got = first_copy(enc, 3)
    assert got.doc_ids == ["a", "b"] and got.offsets.tolist() == [0, 2, 3] and got.vectors.ravel().tolist() == [0, 1, 2]
    assert first_copy(enc, 1) is enc


def test_skip_takes_only_known_steps(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--skip", "faiss,encode", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 2 and "--skip takes faiss, peers" in done.stderr and not (tmp_path / "gpu_check.json").exists()


def test_cuda_matmul_rule_takes_only_large_products():
    """The CUDA path's size rule: enough query vectors and multiply-adds to repay the copies."""
    rows, depth = kernels.CUDA_MIN_ROWS, 64
    cols = -(-kernels.CUDA_MIN_MACS // (rows * depth))  # just enough
    assert kernels.cuda_worthwhile(rows, depth, cols)
    assert not kernels.cuda_worthwhile(rows, depth, cols - 1)
    assert not kernels.cuda_worthwhile(rows - 1, depth, 100 * cols)  # a pooled vector or two: the CPU
    assert kernels.cuda_worthwhile(32, 64, 1 << 14) and not kernels.cuda_worthwhile(32, 64, 1 << 12)


def test_cuda_is_opt_in_and_cpu_path_unchanged():
    """Exact scoring stays on the CPU by default (the CUDA matmul was measured slower,
    docs/gpu.md); use_cuda(True) opts in, and without CUDA still nothing switches on; the
    CPU path is the same torch.mm as before, bit for bit, for any size."""
    import torch

    assert not kernels.cuda_enabled() and kernels.exact_device() == "cpu"
    try:
        assert kernels.use_cuda(True) is False  # the previous setting: off
        assert kernels.cuda_enabled() == torch.cuda.is_available()
    finally:
        kernels.use_cuda(False)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((9000, 64)).astype(np.float32).T  # a transposed view, as the scorers pass it
    assert kernels.cuda_worthwhile(*a.shape, b.shape[1])  # large enough, and still on the CPU
    got = kernels.matmul(a, b)
    np.testing.assert_array_equal(got, torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
def test_cuda_matmul_runs_on_the_device_and_agrees_with_the_cpu():
    import torch

    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((9000, 64)).astype(np.float32).T
    torch.cuda.reset_peak_memory_stats()
    previous = kernels.use_cuda(True)
    try:
        got = kernels.matmul(a, b)
        assert kernels.exact_device() == "cuda" and torch.cuda.max_memory_allocated() >= b.nbytes
    finally:
        kernels.use_cuda(previous)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_encode_plan_resolves_the_device_from_its_gpus():
    """model.device "auto" follows the plan (a GPU an actor: cuda; none: cpu, though Ray
    leaves the GPUs visible); a device given explicitly wins."""
    from mvr.pipeline.ray_runtime import EncodePlan

    cpu, gpu = EncodePlan(1, 1.0, 0, 2, 2), EncodePlan(2, 1.0, 1, None, 2)
    assert (cpu.device(), gpu.device(), cpu.device("auto"), gpu.device("auto")) == ("cpu", "cuda", "cpu", "cuda")
    assert gpu.device("cpu") == "cpu" and cpu.device("cuda") == "cuda"


def test_faiss_build_device_says_where_it_was_built():
    from mvr.operators.ann.factory import make_index

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for params in ({"brute_force": True}, {"brute_force": False, "nlist": 8, "nbits": 4, "use_gpu": False}):
        index = make_index("faiss-ivfpq", 16, len(x), **params)
        index.train(x)
        index.add(x)
        assert index.build_device == "cpu"
    from mvr.operators.ann import ivfpq

    gpu = ivfpq.faiss.get_num_gpus() > 0 if hasattr(ivfpq.faiss, "get_num_gpus") else False
    if gpu:  # faiss-gpu and a GPU: the default build moves to it by itself
        index = make_index("faiss-ivfpq", 16, len(x), brute_force=False, nlist=8, nbits=8)
        index.train(np.tile(x, (3, 1)))
        index.add(x)
        assert index.build_device == "cuda"
    else:
        with pytest.raises(ValueError, match="FAISS sees no GPU"):
            make_index("faiss-ivfpq", 16, len(x), brute_force=False, nlist=8, nbits=4, use_gpu=True).train(x)


@pytest.mark.ray
def test_dry_run_with_ray_measures_the_pipeline_and_mvr_against_the_peers(tmp_path):
    """The whole dry run: ``mvr index`` against the bare loop on both collections (the job's
    manifest records where it encoded, the report keeps the job's log lines), ``mvr build-ann`` (each partition records where it
    was built) and mvr's exact and FAISS paths at 1 and 16 concurrent queries; the peers
    measured when their venvs exist, else skipped with the reason."""
    from benchmarks import gpu_check
    from mvr.storage.manifest import load_manifest

    out = tmp_path / "out"
    assert gpu_check.main(["--dry-run", "--out", str(out)]) == 0
    report = _report(out)
    assert all(not r["status"].startswith("failed") for r in report["rows"])
    for r in _rows(report, "encode"):
        assert r["status"] == "ok" and r["a"] > 0 and r["b"] > 0 and r["a_label"] == "mvr index (cpu)"
        assert " × 0 GPU on cpu (float32)" in r["note"]
    index = report["details"]["encode"]["msmarco-sample"]["index"]
    manifest = load_manifest(index)
    encode = manifest.model["encode"]
    assert (encode["device"], encode["dtype"], encode["gpus_per_actor"], encode["in_driver"]) == ("cpu", "float32", 0, True)  # a small job
    assert encode == report["details"]["encode"]["msmarco-sample"]["manifest_encode"]
    job_log = report["details"]["encode"]["msmarco-sample"]["job_log"]  # the job's stage times, kept
    assert any("validated" in line for line in job_log) and "committed" in job_log[-1]
    assert manifest.ann["tokens"]["gpus_per_task"] == 0
    assert [p["build_device"] for p in manifest.ann["tokens"]["partitions"]] == ["cpu"]
    peers = _rows(report, "vs peers")
    assert len(peers) == len(gpu_check.PEERS) * 2 * len(gpu_check.CONCURRENCY)
    for r in peers:
        assert r["a"] > 0 and r["a_label"] in ("mvr exact", "mvr faiss-ivfpq")
        assert r["status"] == "ok" or r["status"].startswith("skipped: no ")
    mvr = report["details"]["peers"]["mvr"]
    assert set(mvr) == {"mvr exact", "mvr faiss-ivfpq"} and all(set(m) >= {"1", "16"} for m in mvr.values())
    assert report["details"]["peers"]["overlap@10"]["mvr exact"] == 1.0
