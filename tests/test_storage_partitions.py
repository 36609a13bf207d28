"""Partition planning and partition files (no Ray)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mvr.operators import codecs
from mvr.operators.ann.factory import make_index
from mvr.operators.packed import Coded
from mvr.storage.integrity import IntegrityError
from mvr.storage.manifest import Manifest, ShardEntry
from mvr.storage.partitions import ShardSlice, load_partition, plan_partitions, read_passages, write_partition
from mvr.storage.schema import codes_to_arrow, shard_schema
from mvr.storage.shards import write_shard


def manifest(rows: list[int]) -> Manifest:
    shards = [
        ShardEntry(
            path=f"shards/s{i}.parquet", codes=f"shards/s{i}.codes.arrow", rows=r, tokens=0, bytes=0, sha256="", codes_bytes=0, codes_sha256="", block_id="b"
        )
        for i, r in enumerate(rows)
    ]
    return Manifest(config={}, model={}, input={}, counts={}, dim=4, codecs={}, shards=shards)


def write_index(url: str, arrays: list[list[np.ndarray]], codec: codecs.Codec, refined: Optional[codecs.Refined] = None) -> Manifest:
    """Shards of the given passages' token vectors (one list a shard), every kind = tokens;
    with ``refined``, first_m holds the refinement codes of each passage's first 2 vectors."""
    shards = []
    for b, part in enumerate(arrays):
        n = len(part)
        offsets = np.r_[0, np.cumsum([len(a) for a in part])]
        codes = codes_to_arrow(codec.encode(np.concatenate(part)), offsets)
        first_m = codes
        if refined is not None:
            firsts = [a[:2] for a in part]
            first_m = codes_to_arrow(refined.encode(np.concatenate(firsts))[:, codec.bytes_per_vector :], np.r_[0, np.cumsum([len(a) for a in firsts])])
        table = pa.table(
            {
                "doc_id": [f"d{b}-{i}" for i in range(n)],
                "passage_idx": [0] * n,
                "block_id": [f"b{b}"] * n,
                "row_index": list(range(n)),
                "seq": list(range(n)),
                "title": [""] * n,
                "text": ["t"] * n,
                "char_start": [0] * n,
                "char_end": [1] * n,
                "metadata": [None] * n,
                "n_tokens": [len(a) for a in part],
                "tokens": codes,
                "pooled": codes_to_arrow(codec.encode(np.stack([a[0] for a in part]))),
                "first_m": first_m,
                "centroids": codes,
            },
            schema=shard_schema({"tokens": codec, "pooled": codec, **({"first_m": refined.refinement} if refined is not None else {})}),
        )
        rec = write_shard(url, table, f"b{b}")
        shards.append(ShardEntry(**{k: v for k, v in rec.items() if k != "seq_ranges"}))
    return Manifest(config={}, model={}, input={}, counts={}, dim=codec.dim_out, codecs={}, shards=shards)


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


def test_refined_first_m_is_read_beside_the_token_codes(tmp_path):
    """With a first_m refinement, first-m's code is each passage's first m token codes (read
    from the tokens column, not stored again) followed by the first_m column's: a partition
    spanning two shards decodes, takes, scans and hands out codes as ``Refined`` does on the
    joined codes put together here from the columns."""
    rng = np.random.default_rng(1)
    unit = lambda n: (lambda x: x / np.linalg.norm(x, axis=1, keepdims=True))(rng.standard_normal((n, 16)).astype(np.float32))  # noqa: E731
    arrays = [[unit(n) for n in (3, 1, 5)], [unit(n) for n in (4, 2)]]
    sample = np.concatenate([a for part in arrays for a in part] + [unit(600)])
    tokens = codecs.train("pca-8+residual-2", sample, seed=0)
    refined = codecs.Refined(tokens, codecs.train_refinement("refine-4", sample, tokens))
    m = write_index(str(tmp_path), arrays, tokens, refined)
    plan = plan_partitions(m, 2)[1]  # passages 2..4: the last of shard 0, both of shard 1 (first rows: 2, 2, 2)
    pv = read_passages(str(tmp_path), m.shards, plan.slices, "first-m", {"tokens": tokens, "pooled": tokens, "first_m": refined.refinement})
    v = pv.vectors
    assert pv.doc_ids == ["d0-2", "d1-0", "d1-1"] and v.lengths.tolist() == [2, 2, 2] and v.dim == 16
    firsts = np.concatenate([a[:2] for a in (arrays[0][2], arrays[1][0], arrays[1][1])])
    joined = refined.encode(firsts)  # the token codes of the first rows, then their refinement's
    exact = tokens.bytes_per_vector + 4  # token code, PQ bytes; then the float16 norm, whose last bit may differ between batchings
    for got in (v.raw(np.arange(6)), np.concatenate(list(v.code_blocks(4)))):
        np.testing.assert_array_equal(got[:, :exact], joined[:, :exact])
        np.testing.assert_allclose(got[:, exact:].copy().view("<f2"), joined[:, exact:].copy().view("<f2"), rtol=2**-10)
    np.testing.assert_allclose(v.decode(np.array([5, 0, 3])), refined.decode(joined[[5, 0, 3]]), atol=1e-6)
    np.testing.assert_allclose(v.take(np.array([2, 0])).vectors, refined.decode(joined[[4, 5, 0, 1]]), atol=1e-6)
    # an exact scan hands the scorers its blocks as joined codes, scored as decoded vectors are
    q = unit(3)
    blocks = list(v.scan(max_rows=3))
    assert [start for start, _ in blocks] == [0, 1, 2] and all(isinstance(b, Coded) for _, b in blocks)
    scanned = np.concatenate([b.similarities(q) for _, b in blocks], axis=1)
    np.testing.assert_allclose(scanned, q @ refined.decode(joined).T, atol=1e-5)
    assert v.stored_bytes() == 6 * (4 + 2)  # the refinement's codes (4 PQ bytes, a float16 norm) alone: the token codes are the tokens column's


@pytest.mark.parametrize("codec_name", ["float16", "residual-2"])
def test_partition_round_trip_maps_the_shards_codes_and_decodes_only_candidates(tmp_path, codec_name):
    rng = np.random.default_rng(0)
    unit = lambda n: (lambda x: x / np.linalg.norm(x, axis=1, keepdims=True))(rng.standard_normal((n, 8)).astype(np.float32))  # noqa: E731
    arrays = [[unit(n) for n in (2, 1, 3)], [unit(n) for n in (4, 2)]]
    codec = codecs.train(codec_name, np.concatenate([a for part in arrays for a in part] + [unit(500)]), seed=0)
    m = write_index(str(tmp_path), arrays, codec)
    # a partition spanning both shards: passages 1..4 (rows 1-2 of shard 0, 0-1 of shard 1)
    pv = read_passages(
        str(tmp_path), m.shards, [ShardSlice(m.shards[0].path, 1, 3), ShardSlice(m.shards[1].path, 0, 2)], "tokens", {"tokens": codec, "pooled": codec}
    )
    assert pv.doc_ids == ["d0-1", "d0-2", "d1-0", "d1-1"] and pv.vectors.lengths.tolist() == [1, 3, 4, 2]
    assert len(pv.vectors.segments) == 2 and all(not s.flags.owndata for s in pv.vectors.segments)  # maps of the shards, no copy
    expected = [arrays[0][1], arrays[0][2], arrays[1][0], arrays[1][1]]
    got = pv.vectors.take(np.array([3, 0, 2]))  # only those passages decoded, in that order
    for i, p in enumerate([3, 0, 2]):
        np.testing.assert_array_equal(got[i], codec.decode(codec.encode(expected[p])))
    assert pv.vectors.owner(np.array([0, 1, 3, 4, 7, 8, 9])).tolist() == [0, 1, 1, 2, 2, 3, 3]
    # blocks and row ranges read slices across the segments, and decode what take gathers
    for size in (1, 3, 4):
        for start, block in pv.vectors.blocks(size):
            want = pv.vectors.take(np.arange(start, start + len(block)))
            np.testing.assert_array_equal(block.vectors, want.vectors)
            np.testing.assert_array_equal(block.offsets, want.offsets)
    np.testing.assert_array_equal(np.concatenate(list(pv.vectors.vector_blocks(3))), pv.vectors.decode(np.arange(pv.vectors.n_vectors)))
    np.testing.assert_array_equal(pv.vectors.decode_range(2, 7), pv.vectors.decode(np.arange(2, 7)))
    ann = make_index("scann", codec.dim_out, pv.vectors.n_vectors)
    ann.train(pv.vectors.decode(np.arange(pv.vectors.n_vectors)))
    ann.add(pv.vectors.decode(np.arange(pv.vectors.n_vectors)))
    m4 = m.model_copy(update={"shards": m.shards})
    entry = write_partition(str(tmp_path), "ann/tokens/b1/part-00000", 1, pv, ann)
    assert entry["passages"] == 4 and entry["vectors"] == 10 and entry["first_passage"] == 1
    assert set(entry["files"]) >= {"passages.parquet"} and "vectors" not in pq.read_schema(tmp_path / entry["path"] / "passages.parquet").names
    part = load_partition(str(tmp_path), "tokens", entry, m4, {"tokens": codec, "pooled": codec}, verify=True)
    assert part.doc_ids == pv.doc_ids and part.n_vectors == 10 and part.dim == codec.dim_out
    np.testing.assert_array_equal(part.vectors.take(np.array([1])).vectors, codec.decode(codec.encode(expected[1])))
    passages = tmp_path / "ann/tokens/b1/part-00000/passages.parquet"
    load = lambda verify=False: load_partition(str(tmp_path), "tokens", entry, m4, {"tokens": codec, "pooled": codec}, verify=verify)  # noqa: E731
    good = passages.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    passages.write_bytes(bytes(flipped))  # same size: only the sha256 (verify) sees it
    with pytest.raises(IntegrityError, match=r"passages.parquet: corrupted \(sha256") as err:
        load(True)
    assert "mvr verify" in str(err.value)
    passages.write_bytes(b"corrupt")  # another size: refused on every load
    for verify in (False, True):
        with pytest.raises(IntegrityError, match="passages.parquet: truncated .7 bytes, the manifest lists"):
            load(verify)
    passages.write_bytes(good)
    index_file = next(n for n in entry["files"] if n.startswith("index/"))
    (tmp_path / "ann/tokens/b1/part-00000" / index_file).unlink()  # the library's own file, read in place
    with pytest.raises(IntegrityError, match=f"{index_file}: missing"):
        load()


def test_missing_vector_column_is_named(tmp_path):
    codec = codecs.train("float16", np.ones((4, 8), np.float32))
    m = write_index(str(tmp_path), [[np.ones((2, 8), np.float32)]], codec)
    import pyarrow.ipc as ipc

    path = tmp_path / m.shards[0].codes
    table = ipc.open_file(pa.memory_map(str(path))).read_all().drop_columns(["centroids"])
    with ipc.new_file(str(path), table.schema) as w:
        w.write_table(table)
    shard = m.shards[0].model_copy(update={"codes_bytes": path.stat().st_size})
    with pytest.raises(ValueError, match="codes.arrow holds no centroids vectors"):
        read_passages(str(tmp_path), [shard], [ShardSlice(shard.path, 0, 1)], "centroids", {"tokens": codec, "pooled": codec})
