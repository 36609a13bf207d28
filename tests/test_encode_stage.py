"""The encode stages on their own (no Ray): token ids in, a codec's training sample or shard
rows of codes out."""

import numpy as np
import pyarrow as pa
import pytest

from mvr.operators import codecs
from mvr.operators.encode.checkpoint import load_tokenizer
from mvr.operators.encode.compress import l2_normalize
from mvr.operators.encode.tokenizer import PassageTokenizer
from mvr.pipeline.config import IndexConfig
from mvr.pipeline.indexing.encode_stage import EncodeCompress, EncodeSample
from mvr.pipeline.indexing.stages import PASSAGE_SCHEMA, sample_vectors
from mvr.storage.schema import arrow_to_codes, arrow_to_packed


def _args(**compress) -> tuple:
    c = IndexConfig.from_yaml(None, **{f"compress.{k}": v for k, v in compress.items()})
    return c.model.model_dump(), c.tokenizer.model_dump(), c.compress.model_dump(), 2, None


def _batch() -> tuple[pa.Table, list]:
    tok = PassageTokenizer(load_tokenizer("minilm"))
    texts = ["a short one", "a somewhat longer passage about the Fahrenheit temperature scale"]
    passages = tok.split(["a", "b"], ["", ""], texts)
    batch = pa.table(
        {
            "doc_id": ["a", "b"],
            "passage_idx": [0, 0],
            "block_id": ["b0", "b0"],
            "row_index": [0, 1],
            "seq": [0, 1],
            "title": ["", ""],
            "text": texts,
            "char_start": [0, 0],
            "char_end": [len(t) for t in texts],
            "metadata": [None, '{"year":2020}'],
            "input_ids": [p.input_ids for p in passages],
        },
        schema=PASSAGE_SCHEMA,
    )
    return batch, passages


@pytest.mark.parametrize("codec", ["float16", "pca-16+residual-4"])
def test_rows_carry_every_representation_as_codes_and_empty_batches_pass(codec):
    args = _args(projection_dim=64, centroids=3, first_m=2)
    batch, passages = _batch()
    sampled = EncodeSample(*args)(batch)
    assert EncodeSample(*args)(PASSAGE_SCHEMA.empty_table()).num_rows == 0
    sample, n = sample_vectors([sampled], cap=10_000, seed=0)
    assert n == 2 and sample.shape == (sum(len(p.input_ids) for p in passages), 64)
    np.testing.assert_allclose(np.linalg.norm(sample, axis=1), 1.0, atol=2e-3)
    trained = codecs.train(codec, sample, seed=0)
    stage = EncodeCompress(*args, codec_files={"tokens": codecs.to_bytes(trained), "pooled": codecs.to_bytes(codecs.train("int8", sample))})
    assert stage(PASSAGE_SCHEMA.empty_table()).num_rows == 0
    out = stage(batch)
    assert out.column("doc_id").to_pylist() == ["a", "b"]
    codes, offsets = arrow_to_codes(out["tokens"])
    assert np.diff(offsets).tolist() == [len(p.input_ids) for p in passages] == out["n_tokens"].to_pylist()
    assert codes.shape == (len(sample), trained.bytes_per_vector)
    # the stage's codes are the codec's codes of the very vectors the sample stage returns
    np.testing.assert_array_equal(codes, trained.encode(sample))
    assert np.diff(arrow_to_codes(out["first_m"])[1]).tolist() == [2, 2]
    assert np.diff(arrow_to_codes(out["centroids"])[1]).tolist() == [3, 3]
    pooled, none = arrow_to_codes(out["pooled"])
    assert none is None and pooled.shape == (2, 64 + 4)  # int8: a byte a value and a float32 scale


def test_first_m_is_a_refinement_of_the_first_stored_token_codes():
    """With a first_m codec file, the first_m column holds only the refinement codes of each
    passage's first m stored token vectors, made from the token codes of the same rows: put
    beside those token codes they are ``Refined``'s code of the vectors (no vector coded
    twice). Token pooling cannot be combined with it (its stored vectors are not the first m)."""
    args = _args(projection_dim=64, first_m=3)
    batch, passages = _batch()
    sample, _ = sample_vectors([EncodeSample(*args)(batch)], cap=10_000, seed=0)
    tokens = codecs.train("pca-16+residual-4", sample, seed=0)
    spread = np.tile(sample, (20, 1)) + np.random.default_rng(0).normal(0, 0.05, (20 * len(sample), 64)).astype(np.float32)
    refinement = codecs.train_refinement("refine-16", spread, tokens)  # PQ's 256 points a sub-space, none on a sample vector
    files = {"tokens": codecs.to_bytes(tokens), "pooled": codecs.to_bytes(codecs.train("int8", sample)), "first_m": codecs.to_bytes(refinement)}
    stage = EncodeCompress(*args, codec_files=files)
    out = stage(batch)
    token_codes, offsets = arrow_to_codes(out["tokens"])
    refine_codes, first_offsets = arrow_to_codes(out["first_m"])
    assert np.diff(first_offsets).tolist() == [3, 3] and refine_codes.shape == (6, 16 + 2)  # PQ bytes, a float16 norm
    rows = np.concatenate([np.arange(a, a + 3) for a in offsets[:-1]])
    refined = codecs.Refined(tokens, refinement)
    # the stage's own float32 vectors (the sample holds them rounded to float16), coded here
    raw, _ = stage.encode(batch)
    vectors = np.concatenate([l2_normalize(r @ stage.projection) for r in raw])
    np.testing.assert_array_equal(np.concatenate([token_codes[rows], refine_codes], axis=1), refined.encode(vectors[rows]))
    with pytest.raises(ValueError, match="token pooling"):
        EncodeCompress(*_args(projection_dim=64, pool_factor=2), codec_files=files)


def test_sample_is_capped_seeded_and_in_block_order():
    rng = np.random.default_rng(0)
    rows = [(f"b{b}", s, rng.standard_normal((3, 4)).astype(np.float32)) for b in range(3) for s in range(5)]

    def batch(part):
        return pa.table(
            {"block_id": [r[0] for r in part], "seq": pa.array([r[1] for r in part], pa.int32()), "tokens": arrow_to_packed_column([r[2] for r in part])}
        )

    one, n1 = sample_vectors([batch(rows[:7]), batch(rows[7:])], cap=20, seed=1)
    two, n2 = sample_vectors([batch(rows[7:][::-1]), batch(rows[:7][::-1])], cap=20, seed=1)  # another arrival order
    assert n1 == n2 == 15 and one.shape == (20, 4)
    np.testing.assert_array_equal(one, two)
    everything, _ = sample_vectors([batch(rows)], cap=1000, seed=1)
    np.testing.assert_allclose(everything, np.concatenate([r[2] for r in rows]), atol=2e-3)  # float16 on the way


def arrow_to_packed_column(arrays):
    from mvr.storage.schema import packed_to_arrow

    return packed_to_arrow(arrays, arrays[0].shape[1])


def test_pool_factor_pools_token_vectors_only_and_n_tokens_counts_what_is_stored():
    """compress.pool_factor = 2: the token codes are the operator's pooling of the unpooled
    stage's vectors (n_tokens = n // 2 a passage), the sample stage pools the same way (the
    codec trains on what it stores), and first-m, centroids and pooled are unchanged."""
    from mvr.operators.encode.token_pooling import pool_passages

    batch, passages = _batch()
    plain, pooled = _args(projection_dim=64), _args(projection_dim=64, pool_factor=2)
    assert pooled[2]["pool_factor"] == 2 and "pool_factor" not in plain[2]
    f16 = codecs.to_bytes(codecs.train("float16", np.zeros((1, 64), np.float32)))
    files = {"tokens": f16, "pooled": f16}
    a, b = EncodeCompress(*plain, codec_files=files)(batch), EncodeCompress(*pooled, codec_files=files)(batch)
    lengths = [len(p.input_ids) for p in passages]
    assert b["n_tokens"].to_pylist() == [n // 2 for n in lengths] and a["n_tokens"].to_pylist() == lengths
    codec = codecs.from_bytes(f16)
    unpooled = arrow_to_packed_tokens(a, codec)
    want = np.concatenate(pool_passages(unpooled, 2))
    got = codec.decode(arrow_to_codes(b["tokens"])[0])
    np.testing.assert_allclose(got, want, atol=2e-3)  # float16 codes
    for column in ("first_m", "centroids", "pooled"):
        np.testing.assert_array_equal(arrow_to_codes(a[column])[0], arrow_to_codes(b[column])[0])
    sample, _ = sample_vectors([EncodeSample(*pooled)(batch)], cap=10_000, seed=0)
    assert len(sample) == sum(n // 2 for n in lengths)
    np.testing.assert_allclose(np.sort(sample, axis=0), np.sort(got, axis=0), atol=2e-3)


def arrow_to_packed_tokens(table, codec):
    codes, offsets = arrow_to_codes(table["tokens"])
    decoded = codec.decode(codes)
    return [decoded[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def test_sample_stage_keeps_a_seeded_share_of_every_passages_vectors_whatever_the_batching():
    """vector_fraction < 1 (the indexing job's sample from many passages): the kept vectors are
    a subset of each passage's vectors, about that share of them, and the same whether the
    passages come in one batch or one at a time (keys by block, seq and position)."""
    batch, passages = _batch()
    args = _args(projection_dim=64)
    full = arrow_to_packed(EncodeSample(*args)(batch)["tokens"])
    stage = EncodeSample(*args, vector_fraction=0.5, seed=3)
    whole = arrow_to_packed(stage(batch)["tokens"])
    parts = [arrow_to_packed(stage(batch.slice(i, 1))["tokens"]) for i in range(batch.num_rows)]
    n = [len(p.input_ids) for p in passages]
    kept = np.diff(whole.offsets)
    assert np.array_equal(kept, [int(np.diff(p.offsets)[0]) for p in parts]) and 0 < kept.sum() < sum(n)
    for i in range(len(n)):
        mine = whole.vectors[whole.offsets[i] : whole.offsets[i + 1]]
        # batch and one-at-a-time encodings differ by float rounding (padding changes the
        # kernels' blocking), so compare values closely: the same vectors were kept
        np.testing.assert_allclose(mine, parts[i].vectors, atol=1e-3)
        rows = full.vectors[full.offsets[i] : full.offsets[i + 1]]
        assert all((rows == v).all(axis=1).any() for v in mine)  # a subset of the passage's vectors
    other = arrow_to_packed(EncodeSample(*args, vector_fraction=0.5, seed=4)(batch)["tokens"])
    assert not np.array_equal(other.vectors, whole.vectors)  # another seed, another share


@pytest.mark.parametrize("pool_factor", [1, 2])
def test_kept_batches_compress_to_the_encode_stages_rows(tmp_path, pool_factor):
    """encode_once: a sample stage that keeps its batches (``keep_url``) returns the same
    sample, and ``compress_encoded`` over the kept files writes exactly the rows ``EncodeCompress``
    writes from the passages themselves (same columns, same codes), so a small corpus is encoded
    once for the same index."""
    from mvr.pipeline.indexing.encode_stage import compress_encoded
    from mvr.storage import staging

    args = _args(projection_dim=64, centroids=3, first_m=2, pool_factor=pool_factor)
    batch, _ = _batch()
    index = str(tmp_path / "index")
    plain = EncodeSample(*args)(batch)
    kept = EncodeSample(*args, keep_url=index)(batch)
    assert kept.equals(plain)
    assert EncodeSample(*args, keep_url=index)(PASSAGE_SCHEMA.empty_table()).num_rows == 0
    files = staging.encoded_files(index)
    assert len(files) == 1 and staging.encoded_keys(files).to_pydict() == {"block_id": ["b0", "b0"], "seq": [0, 1]}
    sample, _ = sample_vectors([plain], cap=10_000, seed=0)
    codec_files = {"tokens": codecs.to_bytes(codecs.train("pca-16+residual-2", sample, seed=0)), "pooled": codecs.to_bytes(codecs.train("int8", sample))}
    want = EncodeCompress(*args, codec_files=codec_files)(batch)
    got = compress_encoded(pa.table({"url": files}), args[2], codec_files, dim=64)
    assert got.schema.equals(want.schema) and got.num_rows == 2
    for name in want.column_names:
        assert got[name].equals(want[name]), name
    staging.clear_encoded(index)
    assert staging.encoded_files(index) == []


def test_io_tasks_reserve_no_cpu_and_keep_off_nodes_without_cpus():
    """The read/tokenize, validate and write tasks reserve no CPU (encode actors of jobs side
    by side must not be able to starve them), and a node without CPUs (a head started with
    ``--num-cpus 0``) gets none of them: a label selector Ray accepts."""
    from ray._private.label_utils import validate_label_selector

    from mvr.pipeline.ray_runtime import EncodePlan

    assert EncodePlan(1, 1.0, 0, 2, 2).io_args() == {"num_cpus": 0}
    args = EncodePlan(2, 1.0, 0, 2, 2, ("a1b2", "c3d4")).io_args()
    assert args == {"num_cpus": 0, "label_selector": {"ray.io/node-id": "!in(a1b2, c3d4)"}}
    assert validate_label_selector(args["label_selector"]) is None
    assert validate_label_selector({"ray.io/node-id": "!in(a1b2,"}) is not None  # the check can fail
    # at most io_tasks at once, never more than the stage has blocks (Ray Data warns otherwise)
    assert [EncodePlan(1, 1.0, 0, 2, 2).io_compute(n).size for n in (0, 1, 2, 9)] == [1, 1, 2, 2]


def test_small_jobs_run_in_the_driver_on_cpu_only():
    """A job of at most ``small_job_rows`` rows runs in the driver on a cluster without GPUs,
    on the driver's node's threads; a larger one, any on a GPU cluster, or any whose driver's
    node takes no work (a head with no CPU) in an actor pool; 0 switches the driver off."""
    from mvr.pipeline.ray_runtime import EncodePlan

    cpu, gpu, cpu_less_head = EncodePlan(2, 1.0, 0, 4, 2, driver_threads=3), EncodePlan(1, 1.0, 1, None, 2, driver_threads=3), EncodePlan(1, 1.0, 0, 2, 2)
    assert [cpu.for_job(rows, 1000).in_driver for rows in (1, 1000, 1001)] == [True, True, False]
    small = cpu.for_job(1000, 1000)
    assert (small.threads, small.actors, small.io_compute(4)) == (3, 1, None)
    assert not any(p.for_job(1, n).in_driver for p, n in ((cpu, 0), (gpu, 1000), (cpu_less_head, 1000)))
    assert cpu.for_job(1001, 1000) == cpu


def test_the_driver_runs_the_stages_in_batches_as_they_stream_and_keeps_the_model():
    """A small job's graph in the driver (``in_driver.DriverDataset``): each stage called on
    batches of its ``batch_size`` rows cut across blocks (None: a block at a time), a stage
    class built once with its constructor arguments, a batch carried through every stage
    before the next is made (a shard is written before the next batch is encoded), and the
    encode stage's output that of the actor; a second stage shares the loaded model."""
    from mvr.pipeline.indexing.in_driver import DriverDataset

    calls: list = []

    class Double:
        def __init__(self, k: int) -> None:
            calls.append("built")
            self.k = k

        def __call__(self, b: pa.Table) -> pa.Table:
            calls.append(("double", b["x"].to_pylist()))
            return pa.table({"x": [v * self.k for v in b["x"].to_pylist()]})

    def write(b: pa.Table, tag: str) -> pa.Table:
        calls.append((tag, b["x"].to_pylist()))
        return pa.table({"rows": [b.num_rows]})

    ds = DriverDataset.from_items([{"x": i} for i in range(7)], override_num_blocks=7)
    ds = ds.map_batches(Double, batch_size=3, fn_constructor_kwargs={"k": 2}, num_cpus=1).map_batches(write, batch_size=2, fn_kwargs={"tag": "w"})
    assert calls == []  # nothing runs before the job asks for its output
    out = ds.materialize()
    assert calls == ["built", ("double", [0, 1, 2]), ("w", [0, 2]), ("double", [3, 4, 5]), ("w", [4, 6]), ("w", [8, 10]), ("double", [6]), ("w", [12])]
    assert [b["rows"].to_pylist() for b in out.iter_batches(batch_size=None)] == [[2], [2], [2], [1]]
    assert [b.num_rows for b in DriverDataset.from_items([{"x": i} for i in range(3)]).iter_batches(batch_size="default")] == [3]
    with pytest.raises(ValueError, match="pyarrow"):
        DriverDataset.from_items([]).map_batches(write, batch_format="numpy")
    with pytest.raises(ValueError, match="a block an item"):
        DriverDataset.from_items([{"x": 1}], override_num_blocks=2)

    batch, _ = _batch()
    args = _args()
    init = dict(zip(("model", "tokenizer_settings", "compress", "batch_size", "torch_threads"), args))
    want = EncodeSample(*args)(batch)
    driven = DriverDataset(lambda: iter([batch])).map_batches(EncodeSample, batch_size=len(batch), fn_constructor_kwargs=init).materialize()
    (got,) = list(driven.iter_batches())
    assert got.equals(want)
    assert EncodeSample(*args).encoder is EncodeSample(*{**init, "batch_size": 3}.values()).encoder  # the model loaded once a process
