"""mvr's GPU paths measured in one run: each against its CPU path, the bare model loop or two
peers, side by side; one JSON and one markdown table.

    python benchmarks/gpu_check.py --out DIR              # on a machine with CUDA (docs/gpu.md)
    python benchmarks/gpu_check.py --out DIR --dry-run    # every step's code on the CPU, tiny sizes

Steps (each a ratio measured in this run, with the peak GPU memory of each side):

1. encode: ``mvr index`` (``index_corpus``: Ray Data, encode actors with a GPU each) on
   msmarco-sample and dbpedia-sample against a bare batched model loop on the same device
   (tokenize + encode, the same model, dtype and batch size): passages/s, pipeline ÷ bare
   loop; the actor pool's size and batch sizes as the job's manifest records them
   (``model.encode``).
2. FAISS IVFPQ build, GPU against CPU, for the same partitions: msmarco-sample's token
   vectors (the bare loop's, compressed and decoded with the index's default codec, as
   ``mvr index`` stores them) split into ``FAISS_PARTITIONS`` partitions, each built as ``mvr
   build-ann`` builds one (``make_index`` defaults, a seeded training sample, ``ADD_BATCH``
   blocks): vectors/s, GPU ÷ CPU; where each index was built (``build_device``).
3. exact MaxSim, GPU against CPU: the same passages stored as the default codec's codes and
   as float16, scored by mvr's exact path (``Partition.rank`` one query at a time and
   ``rank_batch`` for all at once) with the CUDA matmul on and off (``operators.kernels``):
   queries/s, GPU ÷ CPU, and whether both rank alike.
4. vs peers: ``benchmarks/vs_plaid.py``'s comparison with both peers on the GPU: fast-plaid
   and xtr-warp-rs, each in its own venv (``benchmarks/peers/plaid_venv.py``,
   ``warp_venv.py``), over the same vectors (``vs_plaid.export``) against mvr's exact and
   FAISS paths (msmarco-sample's index, ``mvr build-ann`` on the GPU): p50 latency and QPS at
   1 and 16 concurrent queries (mvr: 16 threads on one in-process ``Searcher``; a peer: calls
   of 16 queries, its batch API), mvr ÷ peer; overlap@10 with mvr's exact MaxSim.

Peak GPU memory: in this process, torch's ``max_memory_allocated`` (the bare loop, the exact
scorer); for work in other processes (Ray's encode actors and build tasks) and FAISS, the
device's memory in use above the step's start, sampled every 10 ms (``cudaMemGetInfo``:
every process on the device); a peer's own torch peak is reported by its side.

On CUDA it first installs what is missing from the repository's own files: a CUDA torch at
``constraints.txt``'s version when torch is a CPU build and nvidia-smi sees a GPU, the ``gpu``
extra's faiss-gpu (faiss-cpu uninstalled first: one ``faiss`` module), then runs itself
again (``install_commands``); the peers' venvs are built on first use (``--wheels DIR``: pip installs from
that directory only, for a machine without a registry; ``--no-install``: nothing). Without
CUDA it exits with status 2 and one line, ``no CUDA device: …``: it never measures the CPU
in place of the GPU. ``--dry-run`` runs every step's code on the CPU at a tiny size (the
"GPU" side of each ratio then runs on the CPU too, and the tables say so); ``--no-ray``
leaves out the steps that start Ray (1's pipeline side and 4), which is how the fast test
lane runs it (tests/test_gpu_check.py). Nothing is downloaded at run time except pip
packages on the GPU machine: the collections are ``$MVR_DATASETS`` (``../shared/datasets``),
the model the packaged all-MiniLM-L6-v2 (``--model minilm``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

DATASETS = ("msmarco-sample", "dbpedia-sample")
K = 10
CONCURRENCY = (1, 16)
FAISS_PARTITIONS = 2
PEERS = ("fast-plaid", "xtr-warp")
BUDGET_S = 480  # the whole GPU run must finish within 8 minutes on one H100
# sizes: the GPU run takes whole collections (5,000 passages each) and every judged query;
# the dry run a few dozen passages and a handful of queries
DRY_LIMIT, DRY_QUERIES, DRY_ROUNDS = 12, 3, 1
GPU_ROUNDS = 3


@dataclass
class CudaStatus:
    """What this process's torch and the machine say about CUDA."""

    torch_version: str
    torch_cuda: Optional[str]  # torch.version.cuda: None for a CPU build
    available: bool  # torch.cuda.is_available()
    device: Optional[str]  # the first device's name
    nvidia_smi: list[str] = field(default_factory=list)  # the GPUs ``nvidia-smi -L`` lists


def cuda_status() -> CudaStatus:
    import torch

    available = bool(torch.cuda.is_available())
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            gpus = [line.strip() for line in out.stdout.splitlines() if line.startswith("GPU ")]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return CudaStatus(torch.__version__, torch.version.cuda, available, torch.cuda.get_device_name(0) if available else None, gpus)


def no_cuda_reason(s: CudaStatus) -> str:
    """The one line printed (after ``no CUDA device: ``) when the GPU run cannot start."""
    if s.torch_cuda is None:
        seen = f"nvidia-smi lists {len(s.nvidia_smi)} GPU(s) (without --no-install the CUDA build is installed)" if s.nvidia_smi else "nvidia-smi lists no GPU"
        what = f"torch {s.torch_version} is a CPU build and {seen}"
    else:
        what = f"torch {s.torch_version} (CUDA {s.torch_cuda}) sees none" + (f" though nvidia-smi lists {len(s.nvidia_smi)}" if s.nvidia_smi else "")
    return f"{what}; this script measures mvr's GPU paths and does not fall back to the CPU (--dry-run runs its code on the CPU at a tiny size; docs/gpu.md)"


def pinned(constraints: Path, name: str) -> Optional[str]:
    """The version ``constraints`` pins ``name`` to (``name==V``), or None."""
    for line in constraints.read_text().splitlines():
        req = line.split("#", 1)[0].strip()
        if req.lower().startswith(f"{name.lower()}=="):
            return req.split("==", 1)[1].strip()
    return None


def gpu_extra(root: Path) -> list[str]:
    """The requirements of pyproject.toml's ``gpu`` extra (read as text: tomllib is 3.11+)."""
    text = (root / "pyproject.toml").read_text()
    match = re.search(r"^gpu\s*=\s*\[(.*?)\]", text, re.M | re.S)
    if match is None:
        raise RuntimeError(f"{root / 'pyproject.toml'} has no gpu extra")
    return re.findall(r'"([^"]+)"', match.group(1))


def install_commands(status: CudaStatus, faiss_gpu: bool, root: Path, gpu_constraints: Path) -> list[list[str]]:
    """The pip commands that bring a CUDA machine to what the GPU run needs, from the
    repository's own files. A CPU torch on a machine where nvidia-smi sees a GPU: the same
    version (``constraints.txt``'s pin) reinstalled without its dependencies (PyPI's Linux
    wheel is the CUDA build), then installed again under the constraints, which adds the
    CUDA libraries it needs and changes nothing else. FAISS seeing no GPU: faiss-cpu
    uninstalled (both are the ``faiss`` module) and the ``gpu`` extra's requirements
    installed under ``gpu_constraints`` (constraints.txt less its torch line: a CUDA torch
    already there stays). Not ``pip install -e .[gpu]``: mvr's own dependencies name
    faiss-cpu, which pip would put back beside faiss-gpu. [] when nothing is missing."""
    pip = [sys.executable, "-m", "pip"]
    cmds = []
    if status.torch_cuda is None and status.nvidia_smi:
        version = pinned(root / "constraints.txt", "torch") or status.torch_version.split("+")[0]
        cmds.append([*pip, "install", "--force-reinstall", "--no-deps", f"torch=={version}"])
        cmds.append([*pip, "install", "-c", str(root / "constraints.txt"), f"torch=={version}"])
    if not faiss_gpu:
        cmds.append([*pip, "uninstall", "-y", "faiss-cpu"])
        cmds.append([*pip, "install", "-c", str(gpu_constraints), *gpu_extra(root)])
    return cmds


def faiss_sees_gpu() -> bool:
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def install(status: CudaStatus, work: Path, wheels: Optional[str]) -> bool:
    """Run ``install_commands``; True when something was installed (then this script runs
    itself again, so that the new packages are the ones imported). RuntimeError naming the
    command when one fails."""
    work.mkdir(parents=True, exist_ok=True)
    gpu_constraints = work / "constraints-gpu.txt"
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    gpu_constraints.write_text("\n".join(line for line in lines if not line.lower().startswith("torch==")) + "\n")
    cmds = install_commands(status, faiss_sees_gpu(), ROOT, gpu_constraints)
    env = dict(os.environ)
    if wheels:
        env |= {"PIP_FIND_LINKS": str(Path(wheels).resolve()), "PIP_NO_INDEX": "1"}
    for cmd in cmds:
        log(f"install: {' '.join(cmd[1:])}")
        cmd_env = env
        if "torch==" in cmd[-1] and not wheels:  # a local wheel directory may hold the CPU build of that version
            cmd_env = {k: v for k, v in env.items() if k != "PIP_FIND_LINKS"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=cmd_env, cwd=ROOT)
        if out.returncode and cmd[3] != "uninstall":
            raise RuntimeError(f"`{' '.join(cmd[1:])}` failed:\n{(out.stdout + out.stderr)[-3000:]}")
    return bool(cmds)


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- measuring


class DeviceMemory:
    """Peak memory in use on the CUDA device (every process's: Ray's actors and tasks, the
    peers' processes) above what was in use when the block started, sampled every 10 ms
    (``torch.cuda.mem_get_info``). ``peak_mib`` is None without CUDA."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.peak_mib: Optional[float] = None
        self._stop = threading.Event()

    def _used(self) -> int:
        import torch

        free, total = torch.cuda.mem_get_info()
        return total - free

    def _poll(self, base: int) -> None:
        peak = base
        while not self._stop.wait(0.01):
            peak = max(peak, self._used())
        self.peak_mib = (max(peak, self._used()) - base) / 2**20

    def __enter__(self) -> "DeviceMemory":
        if self.cuda:
            self._thread = threading.Thread(target=self._poll, args=(self._used(),), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            self._stop.set()
            self._thread.join()


@contextmanager
def torch_peak(cuda: bool) -> Iterator[dict[str, Optional[float]]]:
    """{"mib": torch's peak allocation in this process over the block} (None without CUDA)."""
    out: dict[str, Optional[float]] = {"mib": None}
    if not cuda:
        yield out
        return
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    yield out
    torch.cuda.synchronize()
    out["mib"] = torch.cuda.max_memory_allocated() / 2**20


def memory(mib: Optional[float], how: str, cuda: bool) -> str:
    """A peak GPU memory figure as the table shows it."""
    if not cuda:
        return "not measured (no CUDA)"
    if mib is None:
        return "not measured"
    return f"{mib:,.0f} MiB ({how})"


@dataclass
class Row:
    """One measurement: A against B, ``ratio`` = A ÷ B of a rate (higher: A is faster)."""

    step: str
    what: str
    a_label: str
    a: Optional[float]
    b_label: str
    b: Optional[float]
    unit: str
    peak_gpu: dict[str, str] = field(default_factory=dict)
    note: str = ""
    status: str = "ok"  # ok | skipped: … | failed: …

    @property
    def ratio(self) -> Optional[float]:
        return self.a / self.b if self.a and self.b else None


@dataclass
class Run:
    """The run's settings, rows and details."""

    cuda: bool
    dry: bool
    ray: bool
    out: Path
    work: Path
    datasets: Path
    model: str
    limit: Optional[int]
    queries: Optional[int]
    rounds: int
    copies: int = 1  # step 1 encodes each collection this many times over (a larger corpus)
    skip: frozenset[str] = frozenset()  # steps left out: "faiss", "peers"
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_label(self) -> str:
        return "GPU" if self.cuda else "GPU side (dry run: CPU)"

    def failed(self, step: str, what: str, error: BaseException) -> None:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        self.rows.append(Row(step, what, "", None, "", None, "", status=f"failed: {type(error).__name__}: {message}"))
        log(f"{step}: {what}: FAILED: {message}")


def index_config(run: Run) -> Any:
    from mvr.pipeline.config import IndexConfig

    return IndexConfig.from_yaml(None, **{"model.name": run.model, "limit": run.limit})


def encode_corpus(run: Run, name: str) -> Path:
    """The collection step 1 encodes: ``name`` itself, or with ``--copies N`` a corpus of its
    first ``limit`` documents written N times over (the copies' ids suffixed ``~k``; the
    original documents first, so the bare loop's first passages are the original's)."""
    source = run.datasets / name
    if run.copies == 1:
        return source
    target = run.work / "corpora" / f"{name}-x{run.copies}"
    target.mkdir(parents=True, exist_ok=True)
    docs = read_docs(source, run.limit)
    with open(target / "corpus.jsonl", "w") as f:
        for k in range(run.copies):
            for d in docs:
                f.write(json.dumps({**d, "_id": d["_id"] if k == 0 else f"{d['_id']}~{k}"}) + "\n")
    return target


def read_docs(corpus: Path, limit: Optional[int]) -> list[dict]:
    docs = []
    with open(corpus / "corpus.jsonl") as f:
        for line in f:
            if limit is not None and len(docs) >= limit:
                break
            if line.strip():
                docs.append(json.loads(line))
    return docs


@dataclass
class Encoded:
    """The bare loop's output for one collection: passages and their stored token vectors
    (L2-normalised, the kept tokens: what the codec compresses) as one (n, dim) float32
    matrix with (passages + 1,) offsets."""

    doc_ids: list[str]
    passage_idx: np.ndarray
    vectors: np.ndarray
    offsets: np.ndarray


def bare_loop(run: Run, encoder: Any, docs: list[dict]) -> tuple[float, float, int, Optional[float], Encoded]:
    """Tokenize and encode ``docs`` with the model alone, batched and length-sorted as the
    encode stage does: (seconds in all, of them tokenizing, passages, torch's peak MiB, the
    stored token vectors)."""
    from mvr.operators.encode.compress import l2_normalize
    from mvr.operators.encode.tokenizer import PassageTokenizer
    from mvr.operators.packed import Packed

    config = index_config(run)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    batch = config.runtime.encode_batch_size
    warm = tokenizer.split([d["_id"] for d in docs[:8]], [d.get("title", "") for d in docs[:8]], [d["text"] for d in docs[:8]])
    encoder.encode([p.input_ids for p in warm], batch, tokenizer.pad_id)
    with torch_peak(run.cuda) as peak:
        t0 = time.perf_counter()
        passages = tokenizer.split([d["_id"] for d in docs], [d.get("title", "") for d in docs], [d["text"] for d in docs])
        tokenize_s = time.perf_counter() - t0
        raw = encoder.encode([p.input_ids for p in passages], batch, tokenizer.pad_id)
        seconds = time.perf_counter() - t0
    tokens = [l2_normalize(r)[tokenizer.keep_mask(p.input_ids)] for r, p in zip(raw, passages)]
    packed = Packed.from_list(tokens, encoder.dim)
    encoded = Encoded([p.doc_id for p in passages], np.array([p.passage_idx for p in passages], np.int32), packed.vectors, packed.offsets)
    return seconds, tokenize_s, len(passages), peak["mib"], encoded


def first_copy(encoded: Encoded, copies: int) -> Encoded:
    """The passages of the original documents (``encode_corpus``'s first copy)."""
    if copies == 1:
        return encoded
    n = sum(1 for d in encoded.doc_ids if "~" not in d)
    end = int(encoded.offsets[n])
    return Encoded(encoded.doc_ids[:n], encoded.passage_idx[:n], encoded.vectors[:end], encoded.offsets[: n + 1])


def step_encode(run: Run, name: str, encoder: Any) -> Optional[Encoded]:
    """Step 1 for one collection: ``mvr index`` against the bare loop (rows appended); the
    bare loop's vectors."""
    step = "encode"
    corpus = encode_corpus(run, name)
    docs = read_docs(corpus, None if run.copies > 1 else run.limit)
    bare_s, tokenize_s, n_bare, bare_peak, encoded = bare_loop(run, encoder, docs)
    bare_rate = n_bare / bare_s
    log(f"{step}: {name}: bare loop {n_bare} passages in {bare_s:.2f} s ({bare_rate:.0f}/s, {tokenize_s:.2f} s of it tokenizing) on {encoder.device}")
    details = run.details.setdefault("encode", {}).setdefault(name, {})
    details.update(bare_s=bare_s, tokenize_s=tokenize_s, bare_passages=n_bare)
    copies = f", {run.copies} copies" if run.copies > 1 else ""
    what = f"{name} ({len(docs)} documents{copies}): mvr index ÷ bare model loop"
    encoded = first_copy(encoded, run.copies)
    config = index_config(run).model_copy(update={"limit": None}) if run.copies > 1 else index_config(run)
    batches = f"batches of {config.runtime.encode_batch_size} passages, {config.runtime.encode_actor_batch} a call"
    if not run.ray:
        run.rows.append(
            Row(
                step,
                what,
                "mvr index",
                None,
                f"bare loop ({encoder.device})",
                bare_rate,
                "passages/s",
                {"bare loop": memory(bare_peak, "torch, this process", run.cuda)},
                batches,
                "skipped: starts Ray (--no-ray)",
            )
        )
        return encoded
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.ray_runtime import init_ray

    init_ray(quiet=True)  # started before the clock, as benchmarks/encode_throughput.py does
    index = run.work / (f"index-{name}" if run.copies == 1 else f"index-{corpus.name}")  # step 4 reuses the one-copy index
    shutil.rmtree(index, ignore_errors=True)  # a fresh job each run: it is what is timed
    with DeviceMemory(run.cuda) as device_memory:
        t0 = time.perf_counter()
        job_log: list[str] = []  # the job's own lines: its stages' times (validation, codecs, encoding and writing)
        result = index_corpus(str(corpus), str(index), config, log=lambda line: job_log.append(f"{time.perf_counter() - t0:6.1f} s  {line}"))
        pipe_s = time.perf_counter() - t0
    for line in job_log:
        log(f"{step}: {name}: mvr index: {line}")
    manifest = result.manifest
    enc = manifest.model.get("encode", {})
    n_pipe = int(manifest.counts["passages"])
    plan = f"{'in the driver' if enc.get('in_driver') else str(enc.get('actors')) + ' actor(s)'} × {enc.get('gpus_per_actor')} GPU on {enc.get('device')} ({enc.get('dtype')})"
    status = "ok"
    if run.cuda and enc.get("device") != "cuda":
        status = f"failed: the encode stage ran on {enc.get('device')}, not on the GPU"
    run.rows.append(
        Row(
            step,
            what,
            f"mvr index ({enc.get('device')})",
            n_pipe / pipe_s,
            f"bare loop ({encoder.device})",
            bare_rate,
            "passages/s",
            {"mvr index": memory(device_memory.peak_mib, "device, all processes", run.cuda), "bare loop": memory(bare_peak, "torch, this process", run.cuda)},
            f"{plan}; {batches}; mvr index end to end ({pipe_s:.1f} s: validation, codec training, encoding, shards, catalog)",
            status,
        )
    )
    details.update(index_s=pipe_s, index_passages=n_pipe, manifest_encode=enc, index=str(index), job_log=job_log)
    log(f"{step}: {name}: mvr index {n_pipe} passages in {pipe_s:.1f} s; {plan}")
    return encoded


def train_index_codecs(run: Run, vectors: np.ndarray) -> dict[str, Any]:
    """The index's default codecs trained as ``mvr index`` trains them (``train_codecs`` on
    a seeded sample of at most ``codec_sample_vectors``), and float16: {"tokens", "pooled",
    "float16"} codecs."""
    from mvr.operators import codecs
    from mvr.pipeline.indexing.stages import train_codecs

    c = index_config(run).compress
    rng = np.random.default_rng(c.codec_seed)
    sample = vectors[np.sort(rng.choice(len(vectors), min(len(vectors), c.codec_sample_vectors), replace=False))]
    names = {"tokens": codecs.resolve_name(c.codec, vectors.shape[1]), "pooled": codecs.resolve_name(c.pooled_codec, vectors.shape[1])}
    files = train_codecs(names, sample, c.codec_seed, len(vectors))
    out = {g: codecs.from_bytes(data) for g, data in files.items()}
    out["float16"] = codecs.train("float16", sample)
    return out


def step_faiss(run: Run, decoded: np.ndarray) -> None:
    """Step 2: the same ``FAISS_PARTITIONS`` partitions of ``decoded`` ((n, dim) float32, the
    stored token vectors as the index decodes them) built with FAISS on the GPU and on the CPU."""
    from mvr.operators.ann.base import ADD_BATCH
    from mvr.operators.ann.defaults import BRUTE_FORCE_BELOW
    from mvr.operators.ann.factory import make_index

    step = "faiss-ivfpq build"
    parts = np.array_split(np.arange(len(decoded)), FAISS_PARTITIONS)
    # mvr build-ann's defaults; partitions too small for them (the dry run) get an IVFPQ
    # nonetheless, with few cells and codes, so the same code runs
    small = min(len(p) for p in parts) < BRUTE_FORCE_BELOW
    params: dict[str, Any] = {"brute_force": False, "nlist": 8, "nbits": 4} if small else {}
    timings: dict[str, float] = {}
    devices: dict[str, list[str]] = {}
    peaks: dict[str, Optional[float]] = {}
    for side in ("gpu", "cpu"):
        use_gpu = run.cuda if side == "gpu" else False
        with DeviceMemory(run.cuda) as device_memory:
            t0 = time.perf_counter()
            for rows in parts:
                v = np.ascontiguousarray(decoded[rows])
                index = make_index("faiss-ivfpq", v.shape[1], len(v), use_gpu=use_gpu, **params)
                sample_size = index.params.get("training_sample_size", len(v))
                rng = np.random.default_rng(index.params.get("seed", 0))
                index.train(v[np.sort(rng.choice(len(v), min(sample_size, len(v)), replace=False))])
                for start in range(0, len(v), ADD_BATCH):
                    index.add(v[start : start + ADD_BATCH])
                index.finalize()
                devices.setdefault(side, []).append(index.build_device)
            timings[side] = time.perf_counter() - t0
        peaks[side] = device_memory.peak_mib
        log(f"{step}: {side} side: {len(decoded)} vectors in {FAISS_PARTITIONS} partitions, {timings[side]:.2f} s, built on {devices[side]}")
    status = "ok"
    if run.cuda and set(devices["gpu"]) != {"cuda"}:
        status = f"failed: the GPU side built on {devices['gpu']} (is faiss-gpu installed?)"
    n = len(decoded)
    run.rows.append(
        Row(
            step,
            f"msmarco-sample token vectors ({n:,} × {decoded.shape[1]}), {FAISS_PARTITIONS} partitions: GPU ÷ CPU",
            run.gpu_label,
            n / timings["gpu"],
            "CPU",
            n / timings["cpu"],
            "vectors/s",
            {"GPU side": memory(peaks["gpu"], "device, sampled; FAISS's own resources", run.cuda), "CPU": memory(peaks["cpu"], "device, sampled", run.cuda)},
            f"train + add per partition; params {params or 'mvr build-ann defaults'}; built on {devices['gpu']} / {devices['cpu']}",
            status,
        )
    )
    run.details["faiss"] = {"seconds": timings, "build_device": devices, "params": params, "vectors": n}


def step_exact(run: Run, encoder: Any, encoded: Encoded, codecs_: dict[str, Any], query_texts: list[str]) -> None:
    """Step 3: exact MaxSim from codes and from float16, CUDA matmul on and off."""
    from mvr.operators import kernels
    from mvr.operators.encode.query import QueryEncoder
    from mvr.operators.encode.tokenizer import PassageTokenizer
    from mvr.operators.retrieval.partition import Partition
    from mvr.operators.retrieval.stored_vectors import StoredVectors

    step = "exact MaxSim"
    tokenizer = PassageTokenizer(encoder.tokenizer, **index_config(run).tokenizer.model_dump())
    try:
        for label, codec in ((f"codes ({codecs_['tokens'].name})", codecs_["tokens"]), ("float16", codecs_["float16"])):
            part = Partition("tokens", StoredVectors([codec.encode(encoded.vectors)], encoded.offsets, codec), encoded.doc_ids, encoded.passage_idx)
            queries = QueryEncoder(encoder, tokenizer, None, "mean", {"tokens": codec, "pooled": codecs_["pooled"]})(query_texts)
            side: dict[str, dict[str, Any]] = {}
            for name, on in (("gpu", run.cuda), ("cpu", False)):
                kernels.use_cuda(on)
                part.rank_batch("maxsim", queries[:1], K)  # warm-up (the CUDA context, the kernels)
                with torch_peak(run.cuda) as peak:
                    one = np.zeros((run.rounds, len(queries)))
                    for r in range(run.rounds):
                        for i, q in enumerate(queries):
                            t0 = time.perf_counter()
                            part.rank("maxsim", q, None, K)
                            one[r, i] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    for _ in range(run.rounds):
                        batch = part.rank_batch("maxsim", queries, K)
                    batch_s = (time.perf_counter() - t0) / run.rounds
                side[name] = {
                    "one_s": np.median(one, axis=0),
                    "batch_s": batch_s,
                    "top": [r.ranked.doc_ids for r in batch],
                    "device": kernels.exact_device(),
                    "peak": peak["mib"],
                }
            same = float(np.mean([a == b for a, b in zip(side["gpu"]["top"], side["cpu"]["top"])]))
            status = "ok" if not run.cuda or side["gpu"]["device"] == "cuda" else "failed: the exact path did not use CUDA"
            what = f"{label}: {len(part):,} passages, {part.n_vectors:,} vectors × {part.dim}; {len(queries)} queries"
            peak_gpu = {"GPU side": memory(side["gpu"]["peak"], "torch, this process", run.cuda)}
            note = f"exact path on {side['gpu']['device']} / {side['cpu']['device']}; identical top-{K}: {same:.0%} of queries"
            one_gpu, one_cpu = side["gpu"]["one_s"], side["cpu"]["one_s"]
            run.rows.append(
                Row(
                    step,
                    f"{what}, one at a time (Partition.rank): GPU ÷ CPU",
                    run.gpu_label,
                    len(queries) / float(one_gpu.sum()),
                    "CPU",
                    len(queries) / float(one_cpu.sum()),
                    "queries/s",
                    peak_gpu,
                    f"{note}; p50 {1e3 * np.median(one_gpu):.2f} / {1e3 * np.median(one_cpu):.2f} ms",
                    status,
                )
            )
            run.rows.append(
                Row(
                    step,
                    f"{what}, all in one batch (Partition.rank_batch): GPU ÷ CPU",
                    run.gpu_label,
                    len(queries) / side["gpu"]["batch_s"],
                    "CPU",
                    len(queries) / side["cpu"]["batch_s"],
                    "queries/s",
                    peak_gpu,
                    note,
                    status,
                )
            )
            run.details.setdefault("exact", {})[label] = {
                k: {"batch_s": v["batch_s"], "one_ms": [round(1e3 * float(x), 3) for x in v["one_s"]], "device": v["device"]} for k, v in side.items()
            }
            log(f"{step}: {label}: batch {side['gpu']['batch_s'] * 1e3:.1f} / {side['cpu']['batch_s'] * 1e3:.1f} ms on {side['gpu']['device']} / cpu")
    finally:
        kernels.use_cuda(run.cuda)


def peer_python(run: Run, peer: str) -> tuple[Optional[Path], str]:
    """(the peer venv's python, "") or (None, why it is skipped): the GPU run builds the venv
    on first use; the dry run uses one only when it already exists."""
    from peers import plaid_venv, warp_venv

    if peer == "fast-plaid":
        complete, ensure, where = plaid_venv.is_complete(plaid_venv.venv_path()), plaid_venv.ensure_venv, plaid_venv.venv_path()
    else:
        complete, ensure, where = warp_venv.is_complete(), warp_venv.ensure_venv, warp_venv.venv_path()
    if run.dry and not complete:
        return None, f"skipped: no {peer} venv at {where} (the GPU run builds it; the dry run never does)"
    return ensure(log), ""


def measure_mvr(searcher: Any, encoded: list[Any], rounds: int, concurrency: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """mvr's p50 and QPS at ``concurrency`` queries in flight (that many threads on one
    in-process Searcher, each taking the next query); ({"per_query_ms", "p50_ms", "qps"},
    top-10 results by query index of the first round)."""
    ms = np.zeros((rounds, len(encoded)))
    walls, top = [], {}

    def one(i: int) -> tuple[int, float, Any]:
        t0 = time.perf_counter()
        result = searcher.search_encoded(encoded[i], K, "maxsim")
        return i, (time.perf_counter() - t0) * 1e3, result

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        # warm-up, untimed: a service's threads are long-lived, and a thread's first query
        # starts its thread and its BLAS / OpenMP thread team (0.16 s of a 0.16 s round, measured)
        list(pool.map(one, range(len(encoded)))) if concurrency > 1 else one(0)
        for r in range(rounds):
            t0 = time.perf_counter()
            answers = list(pool.map(one, range(len(encoded)))) if concurrency > 1 else [one(i) for i in range(len(encoded))]
            walls.append(time.perf_counter() - t0)
            for i, t, result in answers:
                ms[r, i] = t
                if r == 0:
                    top[i] = result
    per_query = np.median(ms, axis=0)
    return {
        "per_query_ms": [round(float(v), 3) for v in per_query],
        "p50_ms": float(np.percentile(per_query, 50)),
        "qps": len(encoded) / float(np.median(walls)),
    }, top


def step_peers(run: Run, encoder: Any) -> None:
    """Step 4: vs_plaid's comparison on the GPU, both peers, 1 and 16 concurrent queries."""
    import vs_plaid
    from mvr.pipeline.config import AnnBuildConfig, SearchConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.retrieval.evaluation import overlap_at_10
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.beir import read_collection
    from mvr.storage.manifest import load_manifest, read_manifest
    from peers.plaid_venv import peer_env

    step = "vs peers"
    name = "msmarco-sample"
    index = run.work / f"index-{name}"
    if read_manifest(str(index)) is None:
        index_corpus(str(run.datasets / name), str(index), index_config(run), log=lambda _: None)
    with DeviceMemory(run.cuda) as build_memory:
        t0 = time.perf_counter()
        build_ann(str(index), AnnBuildConfig(backend="faiss-ivfpq", partitions=1, vectors=["tokens"], bm25=None), log=lambda _: None, force=True)
        build_s = time.perf_counter() - t0
    ann_entry = load_manifest(str(index)).ann["tokens"]
    built_on = sorted({p.get("build_device", "?") for p in ann_entry["partitions"]})
    log(f"{step}: mvr build-ann faiss-ivfpq P=1 in {build_s:.1f} s, built on {built_on} ({ann_entry.get('gpus_per_task')} GPU a task)")
    searchers = {
        "mvr exact": Searcher(str(index), ("maxsim",), SearchConfig(exact=True), encoder),
        "mvr faiss-ivfpq": Searcher(str(index), ("maxsim",), SearchConfig(), encoder),
    }
    exact = searchers["mvr exact"]
    collection = read_collection(str(run.datasets / name))
    texts, _ = vs_plaid.first_judged(collection, run.queries)
    query_ids = list(texts)
    encoded = exact.encode([texts[q] for q in query_ids])
    passages = exact.partitions["maxsim"][0]
    peer_dir = run.work / "peers"
    vs_plaid.export(peer_dir, passages, encoded, float(exact.search_encoded(encoded[0], 1, "maxsim").ranked.scores[0]))
    doc_ids = passages.doc_ids
    extra = len(doc_ids) - len(set(doc_ids))  # passages beyond one a document: k + extra passages hold k documents
    results: dict[str, dict[str, Any]] = {}
    tops: dict[str, dict[str, Any]] = {}
    for label, searcher in searchers.items():
        with torch_peak(run.cuda) as peak, DeviceMemory(run.cuda) as device_memory:
            results[label] = {}
            for c in CONCURRENCY:
                results[label][str(c)], top = measure_mvr(searcher, encoded, run.rounds, c)
                if c == 1:
                    tops[label] = {query_ids[i]: r for i, r in top.items()}
        results[label]["peak"] = {"torch": peak["mib"], "device": device_memory.peak_mib}
        log(
            f"{step}: {label}: "
            + ", ".join(f"c={c}: p50 {results[label][str(c)]['p50_ms']:.2f} ms, {results[label][str(c)]['qps']:.0f} QPS" for c in CONCURRENCY)
        )
    overlaps = {label: overlap_at_10(tops[label], tops["mvr exact"]) for label in searchers}
    device = "cuda" if run.cuda else "cpu"
    settings = {"concurrency": list(CONCURRENCY), "rounds": run.rounds, "top_k": K + extra, "threads": os.cpu_count()}
    peer_results: dict[str, Any] = {}
    for peer in PEERS:
        python, skipped = peer_python(run, peer)
        if python is None:
            peer_results[peer] = {"status": skipped}
            log(f"{step}: {peer}: {skipped}")
            continue
        with DeviceMemory(run.cuda) as device_memory:
            cmd = [str(python), str(BENCH / "peers" / "gpu_peer_side.py"), peer, str(peer_dir), device, json.dumps(settings)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(), cwd=peer_dir)
        if out.returncode:
            raise RuntimeError(f"{peer} side exited with status {out.returncode}:\n{out.stderr[-3000:]}")
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        top = {q: vs_plaid.peer_result(texts[q], hits, doc_ids, passages.passage_idx, K) for q, hits in zip(query_ids, answer.get("top", []))}
        answer["overlap@10"] = overlap_at_10(top, tops["mvr exact"]) if top else None
        answer["device_peak_mib"] = device_memory.peak_mib
        answer["status"] = "ok"
        peer_results[peer] = answer
        log(
            f"{step}: {peer}: build {answer['build_s']:.1f} s; "
            + ", ".join(f"c={c}: p50 {answer['concurrency'][str(c)]['p50_ms']:.2f} ms, {answer['concurrency'][str(c)]['qps']:.0f} QPS" for c in CONCURRENCY)
        )
    n = len(encoded)
    for peer in PEERS:
        p = peer_results[peer]
        for label in searchers:
            for c in CONCURRENCY:
                what = f"{name} ({len(passages):,} passages), {n} queries, {c} in flight: {label} ÷ {peer} (QPS)"
                mine = results[label][str(c)]
                peak = {label: memory(results[label]["peak"]["torch"], "torch, this process", run.cuda)}
                if p["status"] != "ok":
                    run.rows.append(Row(step, what, label, mine["qps"], peer, None, "queries/s", peak, f"{label} p50 {mine['p50_ms']:.2f} ms", p["status"]))
                    continue
                theirs = p["concurrency"][str(c)]
                peak[peer] = memory(p.get("peak_gpu_mib"), "torch, its process", run.cuda)
                peak[f"{peer} (device)"] = memory(p.get("device_peak_mib"), "device, sampled: build + search", run.cuda)
                note = (
                    f"p50 {mine['p50_ms']:.2f} / {theirs['p50_ms']:.2f} ms; overlap@10 with mvr exact {overlaps[label]:.3f} / "
                    f"{p['overlap@10'] if p['overlap@10'] is None else format(p['overlap@10'], '.3f')}; {peer} on {p['device']}, build {p['build_s']:.1f} s"
                    + ("; queries padded to one length" if p.get("padded_queries") else "")
                )
                run.rows.append(Row(step, what, label, mine["qps"], peer, theirs["qps"], "queries/s", peak, note))
    run.details["peers"] = {
        "index": str(index),
        "mvr_build_ann_s": build_s,
        "mvr_build_device": built_on,
        "mvr_build_device_peak_mib": build_memory.peak_mib,
        "mvr": results,
        "overlap@10": overlaps,
        "peers": {k: {kk: vv for kk, vv in v.items() if kk != "top"} for k, v in peer_results.items()},
        "concurrency": "mvr: that many threads on one in-process Searcher; a peer: calls of that many queries (its batch API)",
    }


# ---- report


def versions(run: Run) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import faiss
    import torch

    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda, "faiss": faiss.__version__}
    for package in ("faiss-gpu", "faiss-cpu", "ray", "numpy"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            pass
    if run.cuda:
        out["device"] = torch.cuda.get_device_name(0)
        out["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    return out


def fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"


def markdown(report: dict[str, Any]) -> str:
    mode = report["mode"]
    lines = [
        "# mvr GPU check",
        "",
        f"{mode}; {report['date']}; {report['seconds']:.0f} s in all; versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        "",
        f"Sizes: {report['sizes']}. Ratios are A ÷ B of a rate (higher: A is faster), A and B measured in this run.",
        "",
    ]
    if report["dry_run"]:
        lines += ["**Dry run on the CPU: no figure here is a GPU measurement** (the GPU side of each ratio ran on the CPU).", ""]
    lines += ["| step | measured | A | B | unit | A ÷ B | peak GPU memory | note | status |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["rows"]:
        a = f"{r['a_label']}: {fmt(r['a'])}" if r["a_label"] else "-"
        b = f"{r['b_label']}: {fmt(r['b'])}" if r["b_label"] else "-"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        peak = "; ".join(f"{k}: {v}" for k, v in r["peak_gpu"].items()) or "-"
        cells = [r["step"], r["what"], a, b, r["unit"] or "-", ratio, peak, r["note"] or "-", r["status"]]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(run: Run, started: float) -> dict[str, Any]:
    sizes = (
        f"{'every' if run.limit is None else 'the first ' + str(run.limit)} document(s) of {', '.join(DATASETS)}; "
        f"{'every judged' if run.queries is None else 'the first ' + str(run.queries) + ' judged'} msmarco-sample queries; "
        f"{run.rounds} round(s); concurrency {', '.join(map(str, CONCURRENCY))}"
        + (f"; step 1 on {run.copies} copies of each collection" if run.copies > 1 else "")
    )
    mode = f"GPU run on {run.details.get('versions', {}).get('device', '?')}" if run.cuda else "dry run on the CPU"
    report = {
        "mode": mode,
        "dry_run": run.dry,
        "ray": run.ray,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seconds": time.perf_counter() - started,
        "budget_s": BUDGET_S,
        "sizes": sizes,
        "versions": run.details.get("versions", {}),
        "rows": [{**asdict(r), "ratio": r.ratio} for r in run.rows],
        "details": {k: v for k, v in run.details.items() if k != "versions"},
    }
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else str(o)))
    (run.out / "gpu_check.md").write_text(markdown(report))
    return report


# ---- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu-check", help="where gpu_check.json and gpu_check.md go (default ./gpu-check)")
    p.add_argument("--dry-run", action="store_true", help="every step's code on the CPU at a tiny size (no CUDA needed)")
    p.add_argument("--no-ray", action="store_true", help="leave out what starts Ray: mvr index's side of step 1, and step 4")
    p.add_argument("--workdir", default=None, help="indexes, exports, peer indexes (default OUT/work)")
    p.add_argument("--datasets", default=os.environ.get("MVR_DATASETS", str(ROOT.parent / "shared" / "datasets")))
    p.add_argument("--model", default="minilm")
    p.add_argument("--limit", type=int, default=None, help=f"the first N documents of each collection (default: all; dry run {DRY_LIMIT})")
    p.add_argument("--queries", type=int, default=None, help=f"the first N judged queries (default: all; dry run {DRY_QUERIES})")
    p.add_argument("--rounds", type=int, default=None, help=f"timed rounds (default {GPU_ROUNDS}; dry run {DRY_ROUNDS})")
    p.add_argument("--copies", type=int, default=1, help="step 1 encodes each collection this many times over (default 1)")
    p.add_argument("--skip", default="", help="steps left out, comma-separated: faiss, peers")
    p.add_argument("--wheels", default=None, help="pip installs from this directory only (a machine without a package registry)")
    p.add_argument("--no-install", action="store_true", help="install nothing (the gpu extra, the peers' venvs must be there)")
    p.add_argument("--installed", action="store_true", help=argparse.SUPPRESS)  # set when it runs itself again after installing
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    started = time.perf_counter()
    out = Path(args.out)
    work = Path(args.workdir) if args.workdir else out / "work"
    cuda = False
    if not args.dry_run:
        status = cuda_status()
        if not status.available and not (status.torch_cuda is None and status.nvidia_smi and not args.no_install and not args.installed):
            print(f"no CUDA device: {no_cuda_reason(status)}", file=sys.stderr)
            return 2
        if not args.no_install and not args.installed:
            try:
                again = install(status, work, args.wheels)
            except RuntimeError as e:
                print(f"error: installing the GPU packages: {e}", file=sys.stderr)
                return 2
            if again:
                log("installed; running again with the new packages")
                os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv, "--installed"])
        if not status.available:  # pragma: no cover - only after an install that left torch without CUDA
            print(f"no CUDA device: {no_cuda_reason(cuda_status())}", file=sys.stderr)
            return 2
        if args.wheels:
            os.environ |= {"PIP_FIND_LINKS": str(Path(args.wheels).resolve()), "PIP_NO_INDEX": "1"}  # the peers' venvs too
        cuda = True
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    run = Run(
        cuda=cuda,
        dry=args.dry_run,
        ray=not args.no_ray,
        out=out,
        work=work,
        datasets=Path(args.datasets),
        model=args.model,
        limit=args.limit if args.limit is not None else (DRY_LIMIT if args.dry_run else None),
        queries=args.queries if args.queries is not None else (DRY_QUERIES if args.dry_run else None),
        rounds=args.rounds or (DRY_ROUNDS if args.dry_run else GPU_ROUNDS),
        copies=max(1, args.copies),
        skip=frozenset(s for s in args.skip.split(",") if s),
    )
    if run.skip - {"faiss", "peers"}:
        print(f"error: --skip takes faiss, peers; got {','.join(sorted(run.skip))}", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    for name in DATASETS:
        if not (run.datasets / name / "corpus.jsonl").exists():
            print(f"error: {run.datasets / name} not found (set MVR_DATASETS or --datasets)", file=sys.stderr)
            return 2
    run.details["versions"] = versions(run)
    log(f"{'GPU run on ' + run.details['versions']['device'] if cuda else 'dry run on the CPU'}; out {out}")
    import faiss

    from mvr.operators import kernels

    faiss_threads = faiss.omp_get_max_threads()
    if run.dry:  # tiny sizes: FAISS's OpenMP threads would spin longer than they work (the same code runs on one)
        faiss.omp_set_num_threads(1)
    cuda_before = kernels.use_cuda(cuda)  # the dry run stays on the CPU on a CUDA machine too
    try:
        return measure(run, started)
    finally:
        faiss.omp_set_num_threads(faiss_threads)
        kernels.use_cuda(cuda_before)


def measure(run: Run, started: float) -> int:
    """Every step, the report written; 0, or 1 when a measurement failed."""
    from mvr.operators.encode.encoder import TokenEncoder

    cuda, out = run.cuda, run.out
    encoder = TokenEncoder(run.model, "cuda" if cuda else "cpu")
    encoded: dict[str, Encoded] = {}
    for name in DATASETS:
        try:
            got = step_encode(run, name, encoder)
            if got is not None:
                encoded[name] = got
        except Exception as e:  # one step's failure is reported, the others still run
            run.failed("encode", name, e)
    ms = encoded.get("msmarco-sample")
    if ms is None:
        for step in ("faiss-ivfpq build", "exact MaxSim"):
            run.failed(step, "msmarco-sample", RuntimeError("no vectors: the encode step failed"))
    else:
        try:
            codecs_ = train_index_codecs(run, ms.vectors)
            decoded = codecs_["tokens"].decode(codecs_["tokens"].encode(ms.vectors))
        except Exception as e:
            run.failed("codecs", "msmarco-sample", e)
            codecs_ = None
        if codecs_ is not None:
            if "faiss" in run.skip:
                run.rows.append(Row("faiss-ivfpq build", "msmarco-sample", "", None, "", None, "", status="skipped: --skip faiss"))
            else:
                try:
                    step_faiss(run, decoded)
                except Exception as e:
                    run.failed("faiss-ivfpq build", "msmarco-sample", e)
            try:
                from mvr.storage.beir import read_collection
                from vs_plaid import first_judged

                texts, _ = first_judged(read_collection(str(run.datasets / "msmarco-sample")), run.queries)
                step_exact(run, encoder, ms, codecs_, list(texts.values()))
            except Exception as e:
                run.failed("exact MaxSim", "msmarco-sample", e)
    if "peers" in run.skip:
        run.rows.append(Row("vs peers", "msmarco-sample: mvr ÷ fast-plaid, xtr-warp-rs", "", None, "", None, "", status="skipped: --skip peers"))
    elif run.ray:
        try:
            step_peers(run, encoder)
        except Exception as e:
            run.failed("vs peers", "msmarco-sample", e)
    else:
        run.rows.append(Row("vs peers", "msmarco-sample: mvr ÷ fast-plaid, xtr-warp-rs", "", None, "", None, "", status="skipped: starts Ray (--no-ray)"))
    report = write_report(run, started)
    failed = [r for r in run.rows if r.status.startswith("failed")]
    print(markdown(report))
    log(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'} in {report['seconds']:.0f} s")
    if cuda and report["seconds"] > BUDGET_S:
        log(f"over the {BUDGET_S} s budget: {report['seconds']:.0f} s (the peers' venvs are built once; a second run reuses them)")
    if failed:
        log(f"{len(failed)} measurement(s) failed: {'; '.join(r.step + ': ' + r.status for r in failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
