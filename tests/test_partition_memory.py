"""Serving from memory-mapped codes: what loading a partition costs in memory, and a partition
whose codes are larger than the memory its process may allocate still answering correctly.

The index here is synthetic (random unit vectors at dim 128, float16 codes: 256 B a vector,
512 MiB of codes over 8 shards; an IVFPQ index with m = 8): memory is what is measured, and
float16 makes the codes the largest part of the partition by far, as they are at scale. A
fresh Python process (the body a Partition replica runs: ``load_partition``, then ``hits``
and ``rank``) reports its own /proc/self/status:

- steady resident memory after loading (VmRSS after − before) below 15 % of the code bytes
  (what is resident: the ANN index (8 B of PQ codes + 8 B id a vector, about 6 % of the
  codes here), offsets (8 B a passage) and doc ids; the codes stay on disk until touched);
- load peak (VmHWM − VmRSS before) at most 1.3 × the steady size;
- under ``RLIMIT_DATA`` set to its data size after imports + 192 MiB, less than half the
  512 MB of codes. Since Linux 4.7 RLIMIT_DATA bounds a process's private writable
  memory (heap, anonymous maps); a read-only file map is page cache, which the kernel
  reclaims under pressure, and is not counted. Any copy of the codes into process memory
  fails there with MemoryError (checked: the process tries one after answering). The process
  answers 20 queries with the same hits and top-10 as an unlimited process."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mvr.operators import codecs
from mvr.operators.ann.factory import make_index
from mvr.operators.retrieval.stored_vectors import StoredVectors
from mvr.storage.catalog import REJECTS_FILE, build_catalog
from mvr.storage.manifest import Manifest, ShardEntry, commit_manifest
from mvr.storage.partitions import plan_partitions, read_passages, write_partition
from mvr.storage.schema import codes_to_arrow, shard_schema
from mvr.storage.shards import write_shard

ROOT = Path(__file__).resolve().parent.parent
DIM, SHARDS, PASSAGES_PER_SHARD, TOKENS = 128, 8, 3125, 80  # 2,000,000 token vectors
CODE_BYTES = SHARDS * PASSAGES_PER_SHARD * TOKENS * 2 * DIM
LIMIT = 192 << 20  # private memory the limited process may allocate beyond its imports

pytestmark = pytest.mark.slow

CHILD = r"""
import json, resource, sys
import numpy as np
from mvr.operators.retrieval.partition import Partition  # every import before the baseline
from mvr.operators.kernels import get_torch
get_torch()  # the scoring kernels' torch, as a Partition loads it
from mvr.operators.encode.query import EncodedQuery
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import load_manifest
from mvr.storage.partitions import load_partition

def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "VmData", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out

index, entry_json, queries_path, limit = sys.argv[1:5]
manifest = load_manifest(index)
entry = json.load(open(entry_json))
queries = np.load(queries_path)
from mvr.operators import codecs as c
codec_set = {"tokens": c.train("float16", np.ones((1, queries.shape[1]), np.float32))}
codec_set["pooled"] = codec_set["tokens"]
# initialise the libraries (allocator pools, code pages) on tiny files: not the partition's cost
import io, pyarrow as pa, pyarrow.parquet as pq, faiss, tempfile
buf = io.BytesIO(); pq.write_table(pa.table({"a": [1]}), buf); pq.read_table(pa.BufferReader(buf.getvalue()))
sink = pa.BufferOutputStream()
with pa.ipc.new_file(sink, pa.schema([("a", pa.int64())])) as w:
    w.write_table(pa.table({"a": [1]}))
pa.ipc.open_file(pa.BufferReader(sink.getvalue())).read_all()
with tempfile.TemporaryDirectory() as d:
    faiss.write_index(faiss.IndexFlatIP(4), d + "/i"); faiss.read_index(d + "/i")
before = status()
if int(limit):
    cap = before["VmData"] + int(limit)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
part = load_partition(index, "tokens", entry, manifest, codec_set)
after = status()
answers = []
for q in queries.reshape(-1, 4, queries.shape[1]):
    hits = part.hits(q, 64, {"nprobe": 16})
    rows = np.unique(hits.rows)
    r = part.rank("maxsim", EncodedQuery("q", q, q[0]), rows, 10)
    answers.append({"rows": rows.tolist(), "docs": r.ranked.doc_ids, "scores": [round(float(s), 5) for s in r.ranked.scores]})
end = status()
refused = None
if int(limit):  # the limit bites: a copy of the codes (what a load into RAM would make) fails
    try:
        copy = np.concatenate(part.vectors.segments)
        refused = False
    except MemoryError:
        refused = True
print(json.dumps({"before": before, "after": after, "end": end, "answers": answers, "copy_refused": refused}))
"""


def _build_big_index(path: Path) -> None:
    """8 shards of float16 codes and one IVFPQ partition over all of them at ``path``, the
    partition's entry in ``path/partition.json`` (the manifest lists no ANN)."""
    url = str(path)
    rng = np.random.default_rng(0)
    codec = codecs.train("float16", np.ones((1, DIM), np.float32))
    shards = []
    for s in range(SHARDS):
        n = PASSAGES_PER_SHARD
        x = rng.standard_normal((n * TOKENS, DIM), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        offsets = np.arange(0, n * TOKENS + 1, TOKENS)
        tokens = codes_to_arrow(codec.encode(x), offsets)
        small = codes_to_arrow(codec.encode(x[::TOKENS]), np.arange(n + 1))
        table = pa.table(
            {
                "doc_id": [f"s{s}-{i}" for i in range(n)],
                "passage_idx": pa.array(np.zeros(n, np.int32)),
                "block_id": [f"b{s}"] * n,
                "row_index": pa.array(np.arange(n, dtype=np.int32)),
                "seq": pa.array(np.arange(n, dtype=np.int32)),
                "title": [""] * n,
                "text": ["t"] * n,
                "char_start": pa.array(np.zeros(n, np.int32)),
                "char_end": pa.array(np.ones(n, np.int32)),
                "metadata": [None] * n,
                "n_tokens": pa.array(np.full(n, TOKENS, np.int32)),
                "tokens": tokens,
                "pooled": codes_to_arrow(codec.encode(x[::TOKENS])),
                "first_m": small,
                "centroids": small,
            },
            schema=shard_schema({"tokens": codec, "pooled": codec}),
        )
        rec = write_shard(url, table, f"b{s}")
        shards.append(ShardEntry(**{k: v for k, v in rec.items() if k != "seq_ranges"}))
        del x, tokens, table
    manifest = Manifest(config={}, model={}, input={}, counts={"passages": SHARDS * PASSAGES_PER_SHARD}, dim=DIM, codecs={}, shards=shards)
    (plan,) = plan_partitions(manifest, 1)
    pv = read_passages(url, manifest.shards, plan.slices, "tokens", {"tokens": codec, "pooled": codec})
    v: StoredVectors = pv.vectors
    assert v.stored_bytes() == CODE_BYTES
    ann = make_index("faiss-ivfpq", DIM, v.n_vectors, nlist=256, m=8, training_sample_size=32_768)
    ann.train(v.decode(np.sort(rng.choice(v.n_vectors, 32_768, replace=False))))
    for block in v.vector_blocks(262_144):
        ann.add(block)
    ann.finalize()
    entry = write_partition(url, "ann/tokens/b/part-00000", 0, pv, ann)
    del pv, v, ann
    # no rejected rows, and the catalog of the passages: an index as `mvr verify` knows one
    # (what the fixture cache checks before reusing it)
    rejects = pa.schema(
        [("source", pa.string()), ("line", pa.int64()), ("block_id", pa.string()), ("row_index", pa.int32()), ("doc_id", pa.string()), ("reason", pa.string())]
    )
    pq.write_table(rejects.empty_table(), path / REJECTS_FILE)
    build_catalog(url, [s.path for s in shards])
    commit_manifest(url, manifest)
    (path / "partition.json").write_text(json.dumps(entry))


@pytest.fixture(scope="module")
def big_index(fixture_cache, tmp_path_factory):
    """(index dir, dir of the partition's entry and the queries): the synthetic index, built
    once across runs (tests/fixture_cache.py: keyed by the sources that write shards and
    partitions, and by this builder's own source), and 20 × 4 random unit query vectors."""
    recipe = {
        "builder": hashlib.sha256(inspect.getsource(_build_big_index).encode()).hexdigest(),
        "dim": DIM,
        "shards": SHARDS,
        "passages_per_shard": PASSAGES_PER_SHARD,
        "tokens": TOKENS,
    }
    index = fixture_cache.get("partition-memory", recipe, _build_big_index)
    root = tmp_path_factory.mktemp("bigidx")
    shutil.copy(index / "partition.json", root / "entry.json")
    q = np.random.default_rng(1).standard_normal((20 * 4, DIM), dtype=np.float32)
    np.save(root / "queries.npy", q / np.linalg.norm(q, axis=1, keepdims=True))
    return str(index), root


def _child(big_index, limit: int) -> dict:
    url, root = big_index
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [url, str(root / "entry.json"), str(root / "queries.npy"), str(limit)]
    done = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_a_partition_maps_its_codes_and_peaks_near_its_steady_size(big_index):
    r = _child(big_index, limit=0)
    steady = r["after"]["VmRSS"] - r["before"]["VmRSS"]
    peak = r["after"]["VmHWM"] - r["before"]["VmRSS"]
    anon, file = (r["after"][k] - r["before"][k] for k in ("RssAnon", "RssFile"))
    print(
        f"\ncodes {CODE_BYTES / 2**20:.0f} MiB; resident after load +{steady / 2**20:.1f} MiB (anonymous +{anon / 2**20:.1f}, file +{file / 2**20:.1f}), load peak +{peak / 2**20:.1f} MiB"
    )
    assert steady < 0.15 * CODE_BYTES, steady
    assert peak <= 1.3 * steady, (peak, steady)


def test_a_partition_whose_codes_exceed_the_memory_limit_still_answers(big_index):
    free = _child(big_index, limit=0)
    limited = _child(big_index, limit=LIMIT)
    assert LIMIT < CODE_BYTES / 2
    assert limited["copy_refused"] is True  # the limit is enforced: the codes could not be copied into memory
    assert limited["answers"] == free["answers"]
    assert all(len(a["docs"]) == 10 for a in limited["answers"])
