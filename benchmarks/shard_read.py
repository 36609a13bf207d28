"""Why shard vectors are float16 bytes: read time of one shard-sized column in each layout.

    python benchmarks/shard_read.py [--passages 4096] [--tokens 80] [--dim 384]

Writes the same token vectors (list per passage, float16) to in-memory Parquet as
``list<fixed_size_list<float16, dim>>`` (Parquet's FLOAT16 logical type) and as mvr's
``list<fixed_size_binary(2*dim)>``, reads each back three times and prints the best times
and their ratio."""

from __future__ import annotations

import argparse
import io
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.storage.schema import arrow_to_packed, packed_to_arrow


def _best_read(data: bytes, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        pq.read_table(pa.BufferReader(data))
        best = min(best, time.perf_counter() - t0)
    return best


def _parquet(column: pa.Array) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"tokens": column}), buf, compression="none", row_group_size=1024)
    return buf.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--passages", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=80)
    p.add_argument("--dim", type=int, default=384)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((int(rng.integers(args.tokens // 2, args.tokens * 3 // 2)), args.dim)).astype(np.float16) for _ in range(args.passages)]
    binary = packed_to_arrow(arrays, args.dim)
    packed = arrow_to_packed(binary)
    values = pa.FixedSizeListArray.from_arrays(pa.array(packed.vectors.reshape(-1)), args.dim)
    float16_lists = pa.ListArray.from_arrays(pa.array(packed.offsets.astype(np.int32)), values)
    t_lists = _best_read(_parquet(float16_lists))
    t_binary = _best_read(_parquet(binary))
    print(f"{args.passages} passages, {len(packed.vectors)} token vectors of dim {args.dim}")
    print(f"{'layout':<42}{'read s':>8}")
    print(f"{'list<fixed_size_list<float16>>':<42}{t_lists:>8.2f}")
    print(f"{'list<fixed_size_binary(2*dim)> (mvr)':<42}{t_binary:>8.2f}")
    print(f"ratio: {t_lists / t_binary:.0f}x")


if __name__ == "__main__":
    main()
