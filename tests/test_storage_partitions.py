"""Partition planning and partition files (no Ray)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators.ann import make_index
from operators.packed import Packed
from storage.manifest import Manifest, ShardEntry
from storage.verify import IntegrityError
from storage.partitions import PassageVectors, ShardSlice, load_partition, plan_partitions, read_passages, write_partition


def manifest(rows: list[int]) -> Manifest:
    shards = [ShardEntry(path=f"shards/s{i}.parquet", rows=r, tokens=0, bytes=0, sha256="", block_id="b", seq_ranges=[]) for i, r in enumerate(rows)]
    return Manifest(config={}, model={}, input={}, counts={}, dim=4, shards=shards)


def test_plan_splits_passages_into_contiguous_near_equal_ranges():
    plans = plan_partitions(manifest([5, 3, 4]), 4)  # 12 passages
    assert [p.passages for p in plans] == [3, 3, 3, 3]
    assert [p.first_passage for p in plans] == [0, 3, 6, 9]
    assert [(s.path, s.start, s.stop) for s in plans[1].slices] == [("shards/s0.parquet", 3, 5), ("shards/s1.parquet", 0, 1)]
    assert sum(s.stop - s.start for p in plans for s in p.slices) == 12
    with pytest.raises(ValueError, match="at least one passage"):
        plan_partitions(manifest([2]), 3)
    with pytest.raises(ValueError, match="positive integer"):
        plan_partitions(manifest([2]), 0)


def test_partition_round_trip_and_checksums(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 4)).astype(np.float16) for n in (2, 1, 3)]
    packed = Packed.from_list(arrays, 4, dtype=np.float16)
    ann = make_index("scann", 4, len(packed.vectors))
    ann.train(packed.vectors.astype(np.float32))
    ann.add(packed.vectors.astype(np.float32))
    entry = write_partition(str(tmp_path), "ann/tokens/b1/part-00000", 10, PassageVectors(["a", "b", "c"], np.array([0, 0, 1]), packed), ann)
    assert entry["passages"] == 3 and entry["vectors"] == 6 and entry["first_passage"] == 10
    part = load_partition(str(tmp_path), "tokens", entry, verify=True)
    assert part.doc_ids == ["a", "b", "c"] and part.vector_owner.tolist() == [0, 0, 1, 2, 2, 2]
    assert np.array_equal(part.vectors[2], arrays[2].astype(np.float32))
    passages = tmp_path / "ann/tokens/b1/part-00000/passages.parquet"
    good = passages.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    passages.write_bytes(bytes(flipped))  # same size: only the sha256 (verify) sees it
    with pytest.raises(IntegrityError, match=r"passages.parquet: corrupted \(sha256") as err:
        load_partition(str(tmp_path), "tokens", entry, verify=True)
    assert "mvr verify" in str(err.value)
    passages.write_bytes(b"corrupt")  # another size: refused on every load
    for verify in (False, True):
        with pytest.raises(IntegrityError, match="passages.parquet: truncated .7 bytes, the manifest lists"):
            load_partition(str(tmp_path), "tokens", entry, verify=verify)
    passages.write_bytes(good)
    index_file = next(n for n in entry["files"] if n.startswith("index/"))
    (tmp_path / "ann/tokens/b1/part-00000" / index_file).unlink()  # the library's own file, read in place
    with pytest.raises(IntegrityError, match=f"{index_file}: missing"):
        load_partition(str(tmp_path), "tokens", entry)


def test_missing_vector_column_is_named(tmp_path):
    (tmp_path / "shards").mkdir()
    pq.write_table(pa.table({"doc_id": ["a"], "passage_idx": pa.array([0], pa.int32())}), tmp_path / "shards" / "s.parquet")
    with pytest.raises(ValueError, match="holds no centroids vectors"):
        read_passages(str(tmp_path), [ShardSlice("shards/s.parquet", 0, 1)], "centroids")
