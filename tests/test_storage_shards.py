"""Shard files, commit records, manifest and atomic writes through fsspec (memory://)."""

import fsspec
import numpy as np
import pyarrow as pa
import pytest

from storage import fs
from storage.index_dir import remove_orphan_shards
from storage.manifest import Manifest, ShardEntry, commit_manifest, load_manifest
from storage.schema import arrow_to_matrix, arrow_to_packed, matrix_to_arrow, packed_to_arrow, shard_schema
from storage.shards import committed_in_block, covered_seqs, read_shard, seq_ranges, sha256_of, shard_dim, write_shard


@pytest.fixture
def index_url():
    fsspec.filesystem("memory").store.clear()
    yield "memory://idx"
    fsspec.filesystem("memory").store.clear()


def _table(n: int, dim: int = 8, seed: int = 0) -> tuple[pa.Table, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    toks = [rng.standard_normal((int(rng.integers(1, 9)), dim)).astype(np.float32) for _ in range(n)]
    cols = {
        "doc_id": [f"d{i}" for i in range(n)], "passage_idx": [0] * n, "block_id": ["00000-000000"] * n,
        "row_index": list(range(n)), "seq": list(range(n)), "title": [""] * n, "text": ["t"] * n,
        "char_start": [0] * n, "char_end": [1] * n, "n_tokens": [len(t) for t in toks],
        "tokens": packed_to_arrow(toks, dim), "pooled": matrix_to_arrow(np.stack([t[0] for t in toks])),
        "first_m": packed_to_arrow(toks, dim), "centroids": packed_to_arrow(toks, dim),
    }
    return pa.table(cols, schema=shard_schema(dim)), toks


def test_shard_roundtrip_and_commit_record(index_url):
    table, toks = _table(5)
    rec = write_shard(index_url, table, "00000-000000")
    assert rec["path"] == "shards/00000-000000-0000000.parquet" and rec["rows"] == 5
    assert rec["seq_ranges"] == [[0, 4]]
    assert rec["sha256"] == sha256_of(index_url, rec["path"]) and shard_dim(index_url, rec["path"]) == 8
    assert committed_in_block(index_url, "00000-000000") == [rec]
    back = read_shard(index_url, rec["path"])
    packed = arrow_to_packed(back["tokens"])
    for i, t in enumerate(toks):
        np.testing.assert_allclose(packed[i], t, atol=2e-3)  # float16
    np.testing.assert_allclose(arrow_to_matrix(back["pooled"]), np.stack([t[0] for t in toks]), atol=2e-3)


def test_orphans_and_manifest_commit(index_url):
    table, _ = _table(3)
    rec = write_shard(index_url, table, "00000-000000")
    fs.write_bytes_atomic(f"{index_url}/shards/00000-000000-0000003.parquet", b"partial")  # no record
    assert remove_orphan_shards(index_url, {rec["path"]}) == 1
    assert [u.rsplit("/", 1)[-1] for u in fs.list_files(f"{index_url}/shards")] == [rec["path"].split("/")[1]]
    m = Manifest(config={}, model={}, input={}, counts={"passages": 3}, dim=8, shards=[ShardEntry(**rec)])
    commit_manifest(index_url, m)
    commit_manifest(index_url, m.model_copy())
    assert load_manifest(index_url).version == 2
    with pytest.raises(FileNotFoundError, match="no committed index"):
        load_manifest("memory://elsewhere")


def test_seq_ranges_roundtrip():
    seqs = np.array([9, 0, 1, 2, 5, 7, 8])
    assert seq_ranges(seqs) == [[0, 2], [5, 5], [7, 9]]
    assert covered_seqs([{"seq_ranges": seq_ranges(seqs)}, {"seq_ranges": [[3, 4]]}]).tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert seq_ranges(np.array([], dtype=int)) == []
