"""Shard files, commit records, manifest and atomic writes through fsspec (memory://)."""

import fsspec
import numpy as np
import pyarrow as pa
import pytest

from mvr.operators import codecs
from mvr.storage import fs
from mvr.storage.index_dir import remove_orphan_shards
from mvr.storage.integrity import IntegrityError
from mvr.storage.manifest import Manifest, ShardEntry, commit_manifest, load_manifest
from mvr.storage.schema import arrow_to_codes, codes_to_arrow, shard_schema
from mvr.storage.shards import committed_in_block, covered_seqs, open_codes, read_shard, seq_ranges, sha256_of, write_shard
from mvr.storage.verify import codes_file


@pytest.fixture
def index_url():
    fsspec.filesystem("memory").store.clear()
    yield "memory://idx"
    fsspec.filesystem("memory").store.clear()


def _table(n: int, dim: int = 8, seed: int = 0) -> tuple[pa.Table, list[np.ndarray], codecs.Codec]:
    """A shard's rows as the encode stage makes them, float16 codes (the vectors' half floats)."""
    rng = np.random.default_rng(seed)
    toks = [rng.standard_normal((int(rng.integers(1, 9)), dim)).astype(np.float32) for _ in range(n)]
    codec = codecs.train("float16", np.concatenate(toks))
    offsets = np.r_[0, np.cumsum([len(t) for t in toks])]
    packed = codes_to_arrow(codec.encode(np.concatenate(toks)), offsets)
    cols = {
        "doc_id": [f"d{i}" for i in range(n)],
        "passage_idx": [0] * n,
        "block_id": ["00000-000000"] * n,
        "row_index": list(range(n)),
        "seq": list(range(n)),
        "title": [""] * n,
        "text": ["t"] * n,
        "char_start": [0] * n,
        "char_end": [1] * n,
        "metadata": [None] * n,
        "n_tokens": [len(t) for t in toks],
        "tokens": packed,
        "pooled": codes_to_arrow(codec.encode(np.stack([t[0] for t in toks]))),
        "first_m": packed,
        "centroids": packed,
    }
    return pa.table(cols, schema=shard_schema({"tokens": codec, "pooled": codec})), toks, codec


def test_shard_roundtrip_and_commit_record(index_url):
    table, toks, codec = _table(5)
    rec = write_shard(index_url, table, "00000-000000")
    assert rec["path"] == "shards/00000-000000-0000000.parquet" and rec["codes"] == "shards/00000-000000-0000000.codes.arrow"
    assert rec["rows"] == 5 and rec["seq_ranges"] == [[0, 4]]
    assert rec["sha256"] == sha256_of(index_url, rec["path"]) and rec["codes_sha256"] == sha256_of(index_url, rec["codes"])
    with fs.open_file(fs.join(index_url, rec["codes"])) as f:
        assert pa.ipc.open_file(f).schema.metadata[b"mvr.dim"] == b"8"  # the decoded dimension, in the codes file's schema
    assert committed_in_block(index_url, "00000-000000") == [rec]
    back = read_shard(index_url, rec["path"])
    assert "tokens" not in back.column_names and back["doc_id"].to_pylist() == [f"d{i}" for i in range(5)]
    entry = ShardEntry(**{k: v for k, v in rec.items() if k != "seq_ranges"})
    codes_table = open_codes(index_url, codes_file(entry))
    assert codes_table.schema.metadata[b"mvr.codec.tokens"] == codes_table.schema.metadata[b"mvr.codec.pooled"] == b"float16"
    codes, offsets = arrow_to_codes(codes_table["tokens"])
    for i, t in enumerate(toks):
        np.testing.assert_allclose(codec.decode(codes[offsets[i] : offsets[i + 1]]), t, atol=2e-3)  # float16
    pooled, _ = arrow_to_codes(codes_table["pooled"])
    np.testing.assert_allclose(codec.decode(pooled), np.stack([t[0] for t in toks]), atol=2e-3)


def test_codes_file_is_memory_mapped_and_size_checked(tmp_path):
    table, _, _ = _table(4)
    table = pa.concat_tables([table.slice(0, 2), table.slice(2)])  # as batches arrive: several chunks
    assert table["tokens"].num_chunks == 2
    url = str(tmp_path)
    rec = write_shard(url, table, "00000-000000")
    entry = ShardEntry(**{k: v for k, v in rec.items() if k != "seq_ranges"})
    mapped = open_codes(url, codes_file(entry))
    assert mapped["tokens"].num_chunks == 1  # one record batch: no combine (copy) when read
    codes, _ = arrow_to_codes(mapped["tokens"])
    assert not codes.flags.owndata and not codes.flags.writeable  # a view of the read-only map, not a copy
    with open(tmp_path / rec["codes"], "ab") as f:
        f.write(b"x")
    with pytest.raises(IntegrityError, match="oversized"):
        open_codes(url, codes_file(entry))
    (tmp_path / rec["codes"]).unlink()
    with pytest.raises(IntegrityError, match="missing"):
        open_codes(url, codes_file(entry))


def test_orphans_and_manifest_commit(index_url):
    table, _, _ = _table(3)
    rec = write_shard(index_url, table, "00000-000000")
    fs.write_bytes_atomic(f"{index_url}/shards/00000-000000-0000003.parquet", b"partial")  # no record
    fs.write_bytes_atomic(f"{index_url}/shards/00000-000000-0000003.codes.arrow", b"partial")
    with fs.open_file(f"{index_url}/shards/00000-000000-0000004.codes.arrow.tmp-{'0' * 32}", "wb") as f:  # a writer killed mid-write
        f.write(b"half")
    assert remove_orphan_shards(index_url, {rec["path"]}) == 3
    assert [u.rsplit("/", 1)[-1] for u in fs.list_files(f"{index_url}/shards", include_tmp=True)] == sorted(
        p.split("/")[1] for p in (rec["path"], rec["codes"])
    )
    m = Manifest(config={}, model={}, input={}, counts={"passages": 3}, dim=8, codecs={}, shards=[ShardEntry(**rec)])
    commit_manifest(index_url, m)
    commit_manifest(index_url, m.model_copy())
    back = load_manifest(index_url)
    assert back.version == 2 and back.shards == m.shards
    text = fs.read_bytes(f"{index_url}/manifest.json").decode()
    assert '"shards"' not in text and "seq_ranges" not in text  # nothing per shard or passage in the JSON
    assert back.shard_list["count"] == 1 and back.shard_list["path"].startswith("shard-lists/")
    with pytest.raises(FileNotFoundError, match="no committed index"):
        load_manifest("memory://elsewhere")


def test_seq_ranges_roundtrip():
    seqs = np.array([9, 0, 1, 2, 5, 7, 8])
    assert seq_ranges(seqs) == [[0, 2], [5, 5], [7, 9]]
    assert covered_seqs([{"seq_ranges": seq_ranges(seqs)}, {"seq_ranges": [[3, 4]]}]).tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert seq_ranges(np.array([], dtype=int)) == []


def test_an_index_of_schema_version_1_is_refused_with_how_to_rebuild(index_url):
    from mvr.storage.manifest import OldSchemaError, read_manifest

    v1 = {
        "format": "mvr-index",
        "version": 3,
        "schema_version": 1,
        "config": {},
        "model": {},
        "input": {},
        "counts": {},
        "dim": 384,
        "shards": [{"path": "shards/a.parquet", "rows": 2, "tokens": 9, "bytes": 10, "sha256": "0" * 64, "block_id": "b", "seq_ranges": [[0, 1]]}],
    }
    fs.write_bytes_atomic(f"{index_url}/manifest.json", __import__("json").dumps(v1).encode())
    with pytest.raises(OldSchemaError, match=r"schema version 1 .*Rebuild it: mvr index CORPUS INDEX --overwrite"):
        read_manifest(index_url)


def test_the_shard_list_is_checked_and_old_lists_are_dropped(tmp_path):
    from mvr.storage.integrity import IntegrityError
    from mvr.storage.manifest import read_manifest
    from mvr.storage.retention import collect

    url = str(tmp_path)
    table, _, _ = _table(3)
    first = ShardEntry(**{k: v for k, v in write_shard(url, table, "b0").items() if k != "seq_ranges"})
    second = ShardEntry(**{k: v for k, v in write_shard(url, _table(2, seed=1)[0], "b1").items() if k != "seq_ranges"})
    lists = []
    for version, shards in enumerate(([first], [first, second], [second])):
        commit_manifest(url, Manifest(config={}, model={}, input={}, counts={}, dim=8, codecs={}, shards=shards), based_on=version or None)
        lists.append(read_manifest(url).shard_list["path"])
    assert len(set(lists)) == 3
    assert collect(url, keep_versions=2, grace_s=0).versions == [1]
    assert sorted(p.name for p in (tmp_path / "shard-lists").iterdir()) == sorted(p.split("/")[1] for p in lists[1:])  # current + previous
    assert sorted(p.name for p in (tmp_path / "versions").iterdir()) == ["000000000002.json", "000000000003.json"]
    assert (tmp_path / first.path).exists()  # version 2 still lists it
    assert [s.path for s in load_manifest(url).shards] == [second.path]
    assert collect(url, keep_versions=1, grace_s=0).versions == [2] and not (tmp_path / first.path).exists()
    assert (tmp_path / second.path).exists() and (tmp_path / second.codes).exists()
    path = tmp_path / lists[-1]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"shard-lists/.*: corrupted \(sha256"):
        load_manifest(url)
    path.unlink()
    with pytest.raises(IntegrityError, match="shard-lists/.*: missing"):
        load_manifest(url)


def test_list_files_leaves_out_temporary_files_by_their_own_name_only(tmp_path):
    """An index under a folder whose name holds ``.tmp-`` (the suite's fixture cache builds in
    one) lists its files; only a file whose own name marks an atomic write's temporary is left
    out."""
    d = tmp_path / f"build.tmp-{'1' * 8}" / "shards"
    d.mkdir(parents=True)
    (d / "a.parquet").write_bytes(b"x")
    (d / f"b.parquet.tmp-{'0' * 32}").write_bytes(b"half")
    assert [u.rsplit("/", 1)[-1] for u in fs.list_files(str(d))] == ["a.parquet"]
    assert len(fs.list_files(str(d), include_tmp=True)) == 2
