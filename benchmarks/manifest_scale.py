"""The manifest of a 10⁹-passage index, synthetic: ⌈10⁹ / 1,024⌉ = 976,563 shard entries (paths
under 10,000 input blocks, real-length sha256s) committed with ``commit_manifest`` into a
scratch directory, then ``read_manifest`` timed three times and ``plan_partitions(P)`` once.

    python benchmarks/manifest_scale.py [--out /tmp/mvr_synth] [--passages 1000000000] [--partitions 42]

Prints the sizes of manifest.json and of the shard list file, the read times, the planning
time and the process's peak RSS. (docs/capacity.md has a run.)"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import resource
import shutil
import time

from mvr.storage.manifest import Manifest, ShardEntry, commit_manifest, read_manifest
from mvr.storage.partitions import plan_partitions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/mvr_synth")
    ap.add_argument("--passages", type=int, default=10**9)
    ap.add_argument("--rows-per-shard", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=42)
    args = ap.parse_args()
    n_shards = math.ceil(args.passages / args.rows_per_shard)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    per_block = n_shards // args.blocks + 1
    shards = []
    for i in range(n_shards):  # a synthetic list: one entry a shard
        b, j = divmod(i, per_block)
        block = f"part-{b:05d}-of-{args.blocks:05d}.jsonl"
        path = f"shards/{block}-{j * args.rows_per_shard:07d}.parquet"
        h = hashlib.sha256(str(i).encode()).hexdigest()
        shards.append(
            ShardEntry.model_construct(
                path=path,
                codes=path[:-8] + ".codes.arrow",
                rows=args.rows_per_shard,
                tokens=args.rows_per_shard * 81,
                bytes=560_000,
                sha256=h,
                codes_bytes=1_700_000,
                codes_sha256=h[::-1],
                block_id=block,
            )
        )
    m = Manifest(config={}, model={}, input={}, counts={"passages": args.passages}, dim=64, codecs={}, shards=shards)
    t = time.perf_counter()
    commit_manifest(args.out, m)
    print(f"{n_shards:,} shards; commit {time.perf_counter() - t:.1f} s")
    print(f"manifest.json {os.path.getsize(os.path.join(args.out, 'manifest.json')):,} B; shard list {m.shard_list['bytes']:,} B")
    del m, shards
    for _ in range(3):
        t = time.perf_counter()
        r = read_manifest(args.out)
        print(f"read_manifest {time.perf_counter() - t:.2f} s ({len(r.shards):,} shards)")
    t = time.perf_counter()
    plans = plan_partitions(r, args.partitions)
    print(f"plan_partitions({args.partitions}) {time.perf_counter() - t:.2f} s, {sum(len(p.slices) for p in plans):,} slices")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
