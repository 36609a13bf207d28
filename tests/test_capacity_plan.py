"""The capacity plan (operators/planning/capacity.py, jobs/plan.py): arithmetic in milliseconds, the
ANN size model against indexes the backends really write, and the whole plan against the
bytes of a real index of msmarco-sample (100 passages, tokens + pooled ANN, BM25)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from mvr.operators.planning.capacity import (
    MEASURED,
    AnnSettings,
    ServeSettings,
    Throughput,
    Workload,
    ann_index_size,
    bm25_partition,
    bm25_partition_files,
    faiss_default_m,
    faiss_default_nbits,
    faiss_default_nlist,
    human_bytes,
    make_plan,
    partitions_for_budget,
    scann_default_num_leaves,
    shard_count,
    shard_storage,
)

# ------------------------------------------------------------------ arithmetic (milliseconds)


def test_default_rules_are_the_backends_own():
    """One copy of each rule: the plan and the backends import operators/ann/defaults.py."""
    from mvr.operators.ann import defaults, ivfpq, scann_index

    assert (faiss_default_m, faiss_default_nlist, faiss_default_nbits) == (defaults.default_m, defaults.default_nlist, defaults.default_nbits)
    assert (ivfpq.default_m, ivfpq.default_nlist, scann_index.default_num_leaves) == (defaults.default_m, defaults.default_nlist, defaults.default_num_leaves)
    for n in (4096, 10_000, 16_028, 403_138, 10**6, 16_174_539, 10**9):
        assert scann_default_num_leaves(float(n)) == defaults.default_num_leaves(n)
        nlist = defaults.default_nlist(n)
        assert ivfpq.default_params(384, n)["nbits"] == faiss_default_nbits(ann_index_size("faiss-ivfpq", 384, n).params["training_sample_size"])
        assert ann_index_size("faiss-ivfpq", 384, n).params["nlist"] == nlist


def test_the_plan_assumes_the_configuration_defaults():
    """The planner (operators/, below the configuration) keeps the defaults it plans with as
    constants of its own: they equal the configuration's."""
    from mvr.operators.planning import capacity
    from mvr.pipeline.config import AnnBuildConfig, CompressConfig, RuntimeConfig

    assert capacity.ROWS_PER_SHARD == RuntimeConfig.model_fields["write_rows_per_shard"].default
    assert capacity.CODEC_SAMPLE_VECTORS == CompressConfig.model_fields["codec_sample_vectors"].default
    assert capacity.AnnSettings().backend == AnnBuildConfig.model_fields["backend"].default == "codec-ivf"
    w = capacity.Workload(passages=1)
    for name in ("codec", "pooled_codec", "first_m_codec", "first_m", "centroids", "pool_factor"):
        assert getattr(w, name) == CompressConfig.model_fields[name].default, name


def test_shard_bytes_follow_the_schema():
    w = Workload(passages=2048, tokens_per_passage=10, dim=8, codec="float16", pooled_codec="float16", first_m=8, centroids=4, text_bytes_per_passage=100)
    assert w.bytes_per_vector == 16 and w.codec_dim == 8
    lines = {x.item: x.bytes for x in shard_storage(w)}
    # codes: bpv a vector, + an int32 list offset a passage for the list columns (not pooled)
    assert lines["shards: token codes"] == pytest.approx(2048 * (10 * 16 + 4))
    assert lines["shards: first-8 codes"] == pytest.approx(2048 * (8 * 16 + 4))
    assert lines["shards: 4-centroid codes"] == pytest.approx(2048 * (4 * 16 + 4))
    assert lines["shards: pooled codes"] == pytest.approx(2048 * 16)
    # 2 shards of ≤ 1,024 passages: two Parquet footers, two codes files' framing, two manifest entries
    per_shard = MEASURED["shard_footer_bytes"].value + MEASURED["shard_chunk_bytes"].value
    assert lines["shards: ids, spans, footers"] == pytest.approx(2048 * MEASURED["passage_meta_bytes"].value + 2 * per_shard)
    assert lines["shards: codes files' framing"] == pytest.approx(2 * MEASURED["codes_file_overhead_bytes"].value)
    assert lines["manifest.json"] == pytest.approx(MEASURED["manifest_fixed_bytes"].value)
    assert lines["shard list"] == pytest.approx(MEASURED["shard_list_fixed_bytes"].value + 2 * MEASURED["shard_list_bytes_per_shard"].value)
    assert not any("passages.parquet" in item or "vectors" in item for item in lines)  # no vector copy anywhere
    short = Workload(passages=10, tokens_per_passage=3, dim=8)  # fewer tokens than m and k
    assert short.vectors_per_passage("first-m") == 3 and short.vectors_per_passage("centroids") == 3


def test_pool_factor_divides_the_stored_token_vectors_only():
    """compress.pool_factor = 2 (mvr plan --pool-factor 2): half the token vectors a passage
    in the codes, the tokens ANN index and the residual codebook's count; first-m, centroids
    (computed before pooling) and pooled as without it."""
    w1 = Workload(passages=2048, tokens_per_passage=80, dim=8, codec="float16", pooled_codec="float16")
    w2 = Workload(passages=2048, tokens_per_passage=80, dim=8, codec="float16", pooled_codec="float16", pool_factor=2)
    a, b = ({x.item: x.bytes for x in shard_storage(w)} for w in (w1, w2))
    assert b["shards: token codes"] == pytest.approx(2048 * (40 * 16 + 4)) and a["shards: token codes"] == pytest.approx(2048 * (80 * 16 + 4))
    for item in ("shards: first-8 codes", "shards: 4-centroid codes", "shards: pooled codes"):
        assert a[item] == b[item]
    assert w2.token_vectors == 2048 * 40 and w2.vectors_per_passage("first-m") == 8
    plan = make_plan(w2, AnnSettings(kinds=("tokens",)), ServeSettings(partitions=1))
    assert plan.ann_indexes["tokens"].vectors == 2048 * 40
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="pool_factor"):
            Workload(passages=10, pool_factor=bad)


def test_codecs_resolve_as_the_index_does():
    from mvr.operators import codecs

    big = Workload(passages=10**9)  # MiniLM, auto
    assert big.codec_name == "pca-192+residual-1" == codecs.resolve_name("auto", 384) and big.codec_dim == 192
    # the codebook is capped by the training sample (65,536 less 5 % held out): 2-byte ids, 26 B a vector
    assert big.residual_centroids() == 65_536 - round(65_536 * 0.05) and big.bytes_per_vector == 2 + 192 // 8
    # pooled and centroids: the pooled codec, auto = pq-192 (2-dim sub-vectors, a byte each), ANN at dim 384
    for kind in ("pooled", "centroids"):
        assert big.codec_of(kind) == "pq-192" == codecs.resolve_name("auto", 384, "pooled") and big.bytes_per_vector_of(kind) == 192 and big.dim_of(kind) == 384
    # first-m: the token codes plus refine-96 (96 PQ bytes and a float16 norm a vector), at dim 384
    assert big.refines_first_m and (big.codec_of("first-m"), big.bytes_per_vector_of("first-m"), big.dim_of("first-m")) == ("refine-96", 98, 384)
    # below 256 sample vectors: pooled int8, and first-m a column in it
    small = [Workload(passages=1, tokens_per_passage=t) for t in (255, 256)]
    assert [w.pooled_codec_name for w in small] == ["int8", "pq-192"] and [w.codec_of("first-m") for w in small] == ["int8", "refine-96"]
    # --pooled-codec int8 (the default before 2026-12-01): dim + a 4-byte scale
    assert Workload(passages=10**9, pooled_codec="int8").bytes_per_vector_of("centroids") == 388
    # first-m keeps a column in the pooled codec where it cannot be read from the token codes
    for w in (Workload(passages=10**9, pool_factor=2), Workload(passages=10**9, first_m_codec="pooled"), Workload(passages=10**9, codec="float16")):
        assert not w.refines_first_m and w.codec_of("first-m") == "pq-192" and w.bytes_per_vector_of("first-m") == 192
    assert big.codec_of("tokens") == big.codec_name and big.dim_of("tokens") == 192
    assert Workload(passages=10, dim=160).codec_name == "residual-1" and Workload(passages=10, dim=160).bytes_per_vector == 1 + 160 // 8
    # a corpus whose token vectors are fewer than auto's PCA needs (2 × 192): residual-1 at 384
    # dims, as mvr index trains it (codecs.choose); the codebook at most the sample's k-means rows
    tiny = Workload(passages=1, tokens_per_passage=77)
    assert (tiny.codec_sample, tiny.codec_name, tiny.codec_dim) == (77, "residual-1", 384) == (77, codecs.choose("auto", 384, 77).name, 384)
    assert tiny.residual_centroids() == 73 and tiny.bytes_per_vector == 1 + 384 // 8
    assert Workload(passages=1, tokens_per_passage=384).codec_name == "pca-192+residual-1"
    colbert = Workload(passages=10**9, dim=128)
    assert colbert.codec_name == "residual-2" and colbert.codec_dim == 128 and colbert.bytes_per_vector == 2 + 128 * 2 // 8
    assert Workload(passages=10, dim=384, codec="float16").bytes_per_vector == 768
    assert Workload(passages=10, dim=384, codec="pq-48").bytes_per_vector == 48
    for bad in ("int9", "pca-512+residual-2", "pq-7"):
        with pytest.raises(ValueError):
            Workload(passages=10, dim=384, codec=bad)
    for bad in ({"passages": 0}, {"passages": 10, "dim": 0}, {"passages": 10, "tokens_per_passage": 0.5}):
        with pytest.raises(ValueError):
            Workload(**bad)
    with pytest.raises(ValueError, match="backend"):
        AnnSettings("hnsw")
    with pytest.raises(ValueError, match="kinds"):
        AnnSettings(kinds=("words",))


def test_residual_codebook_size_is_the_trained_one():
    """The plan's codebook size (and so the id width and bytes a vector) against a codec
    trained the way ``mvr index`` trains it: a capped sample, n_vectors the collection's."""
    from mvr.operators import codecs

    rng = np.random.default_rng(0)
    for sample_cap, n_tokens in ((300, 10**6), (2000, 4000)):
        w = Workload(passages=n_tokens // 10, tokens_per_passage=10, dim=16, codec="residual-2", codec_sample_vectors=sample_cap)
        x = rng.standard_normal((min(sample_cap, n_tokens), 16)).astype(np.float32)
        codec = codecs.train("residual-2", x / np.linalg.norm(x, axis=1, keepdims=True), seed=0, n_vectors=n_tokens)
        assert len(codec.centroids) == w.residual_centroids()
        assert codec.bytes_per_vector == w.bytes_per_vector


def test_faiss_code_sizes():
    big = ann_index_size("faiss-ivfpq", 128, 10**7)
    assert big.params["m"] == 16 and big.params["nbits"] == 8 and big.bytes_per_vector_ram == 16 + 8  # ColBERT's 16 bytes + id
    assert ann_index_size("faiss-ivfpq", 384, 10**7).bytes_per_vector_ram == 48 + 8
    assert ann_index_size("faiss-ivfpq", 384, 10**7, pq_m=96).bytes_per_vector_ram == 96 + 8
    assert ann_index_size("faiss-ivfpq", 384, 10**7, nbits=4).params["code_bytes"] == 24
    flat = ann_index_size("scann", 64, 4095)
    assert flat.params == {"brute_force": True} and flat.ram_bytes == 4095 * 64 * 4
    scann = ann_index_size("scann", 128, 10**7)
    assert scann.bytes_per_vector_ram == 32 + 8  # packed 4-bit codes of 64 blocks + ids (no reorder stage by default)
    assert ann_index_size("scann", 128, 10**7, scann_reorder=True).bytes_per_vector_ram == 4 * 128 + 32 + 8  # + the float32 copy


def test_ram_partitions_and_hours():
    w = Workload(passages=10**7, tokens_per_passage=80, dim=128)
    faiss = AnnSettings("faiss-ivfpq")  # a quantizer held in RAM: the plan's RAM items of a FAISS build
    one = make_plan(w, faiss, ServeSettings(partitions=1))
    ram = {x.item: x.bytes for x in one.ram}
    # the ANN index is built over the decoded vectors (residual-2 at 128: dim 128); no exact copy in RAM
    tokens_ann = ann_index_size("faiss-ivfpq", w.codec_dim, 10**7 * 80)
    assert ram["tokens: faiss-ivfpq index (dim 128)"] == pytest.approx(tokens_ann.ram_bytes)
    assert not any("exact" in item for item in ram)
    per_passage = 49 + w.doc_id_chars + 8 + 4 + 8  # str doc id + list slot, passage_idx, offset
    assert ram["tokens: offsets, doc ids, passage_idx"] == pytest.approx(10**7 * per_passage + 8)
    assert ram["codes page cache (hot fraction 0)"] == 0
    codes = 10**7 * sum(w.codes_bytes_per_passage(k) for k in ("tokens", "centroids", "first-m", "pooled"))
    hot = make_plan(w, faiss, ServeSettings(partitions=1, codes_hot_fraction=0.25))
    assert hot.ram_steady_bytes - one.ram_steady_bytes == pytest.approx(0.25 * codes)
    assert one.ram_peak_bytes >= one.ram_steady_bytes > tokens_ann.ram_bytes
    # no vector copies while loading: the peak is the steady size + one passages.parquet and its table (ids: ~40 B a passage)
    transient = one.ram_peak_bytes - one.ram_steady_bytes
    assert (
        0
        < transient
        <= (10**7 * (MEASURED["partition_passage_bytes"].value + 8 + 4 + w.doc_id_chars + 8) + MEASURED["partition_file_footer_bytes"].value) * (1 + 1e-9)
    )
    assert transient < 0.05 * one.ram_steady_bytes
    with pytest.raises(ValueError, match="hot fraction"):
        ServeSettings(codes_hot_fraction=1.5)

    budget = 8.0
    plan = make_plan(w, faiss, ServeSettings(ram_per_partition_gb=budget))
    assert plan.ram_peak_bytes <= budget * 1e9
    if plan.partitions > 1:
        fewer = make_plan(w, faiss, ServeSettings(partitions=plan.partitions - 1))
        assert fewer.ram_peak_bytes > budget * 1e9  # the smallest P that fits
    steady = make_plan(w, faiss, ServeSettings(ram_per_partition_gb=budget, size_by="steady"))
    assert steady.partitions <= plan.partitions and steady.ram_steady_bytes <= budget * 1e9
    with pytest.raises(ValueError, match="too small"):
        make_plan(w, faiss, ServeSettings(ram_per_partition_gb=0.1))  # below the process alone

    assert one.gpu_hours is None and any("not measured" in n for n in one.notes)
    assert any("page cache" in n for n in one.notes)
    assert one.cpu_node_hours == pytest.approx(10**7 / MEASURED["cpu_passages_per_s"].value / 3600)
    assert any("MiniLM" in n for n in one.notes)  # dim 128: the measured CPU rate is not this model's
    gpu = make_plan(w, faiss, ServeSettings(partitions=1), Throughput(gpu_passages_per_s=2000))
    assert gpu.gpu_hours == pytest.approx(10**7 / 2000 / 3600)

    exact = make_plan(w, AnnSettings("none"), ServeSettings(ram_per_partition_gb=budget))
    assert exact.partitions == 1 and not any(x.item.startswith("ann/") for x in exact.storage)


# schema 1's plan for 10^9 MiniLM passages (docs/capacity.md before the codecs): 150.3 TB of
# storage, 294 TB of provisioned RAM (64 GB a replica by the peak); issue 15 asks for a tenth.
SCHEMA1_STORAGE_TB, SCHEMA1_PROVISIONED_TB = 150.3, 294.0


def test_a_billion_passages_fit_a_tenth_of_schema_1():
    plan = make_plan(Workload(passages=10**9), AnnSettings(), ServeSettings(ram_per_partition_gb=64))
    assert plan.workload.codec_name == "pca-192+residual-1"
    assert plan.storage_bytes <= SCHEMA1_STORAGE_TB * 1e12 / 10
    assert plan.ram_total_bytes <= SCHEMA1_PROVISIONED_TB * 1e12 / 10
    assert plan.ram_peak_bytes <= 64e9


def test_partitions_for_budget_is_minimal():
    def ram(p: int) -> float:
        return 1000 / p + 3

    assert partitions_for_budget(ram, 13, 10**6) == 100
    assert partitions_for_budget(ram, 10**9, 10) == 1
    with pytest.raises(ValueError):
        partitions_for_budget(ram, 3.5, 10)


def test_plan_job_prints_tables_and_json(capsys):
    from mvr.jobs.plan import main

    assert main(["--passages", "1000000", "--dim", "128", "--tokens-per-passage", "71.86", "--ram-per-partition-gb", "4"]) == 0
    out = capsys.readouterr().out
    for text in (
        "storage",
        "RAM of one partition replica",
        "codec-ivf index",
        "lists over the codec's centroids",
        "CPU node-hours",
        "not measured",
        "residual-2",
        "page cache",
    ):
        assert text in out  # the default first stage: codec-ivf, as mvr build-ann's
    assert main(["--passages", "1000000", "--dim", "128", "--ann", "faiss-ivfpq"]) == 0
    assert "faiss-ivfpq index" in capsys.readouterr().out
    assert main(["--passages", "5000", "--ann", "scann", "--json", "--gpu-passages-per-s", "1000"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["encode"]["gpu_hours"] == pytest.approx(5000 / 1000 / 3600)
    assert data["storage"]["total_bytes"] == pytest.approx(sum(x["bytes"] for x in data["storage"]["lines"]))
    assert main(["--passages", "0"]) == 2
    assert main(["--passages", "10", "--ram-per-partition-gb", "0.01"]) == 2
    assert main(["--passages", "10", "--codec", "int9"]) == 2
    assert main(["--passages", "5000", "--codec", "int8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["storage"]["lines"][0]["how"].endswith("(int8) + 4 B list offset")
    assert human_bytes(1.5e12) == "1.50 TB"


# ------------------------------------------------------------------ ANN sizes against real indexes


@pytest.mark.parametrize("backend,reorder", [("faiss-ivfpq", False), ("scann", False), ("scann", True), ("codec-ivf", False)])
def test_ann_index_bytes_match_saved_indexes(tmp_path, backend, reorder):
    from mvr.operators.ann.factory import make_index

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = make_index(backend, 32, len(x), **({"reorder_k": 100} if reorder else {}))
    index.train(x)
    index.add(x)
    index.save(str(tmp_path))
    actual = sum(os.path.getsize(tmp_path / f) for f in os.listdir(tmp_path) if f != "ann.json")
    model = ann_index_size(backend, 32, len(x), scann_reorder=reorder)
    assert model.file_bytes == pytest.approx(actual, rel=0.02)
    for name in {"faiss-ivfpq": ("nlist", "m", "nbits"), "scann": ("num_leaves",), "codec-ivf": ("nlist",)}[backend]:
        assert model.params[name] == index.params[name]


@pytest.mark.slow  # a 400,000-vector build each (~9 s alone, FAISS on the CPU's BLAS kernels; 23-27 s before 5f73f28): the fast lane stays under 90 s
@pytest.mark.parametrize("backend", ["faiss-ivfpq", "scann", "codec-ivf"])
def test_ann_build_ram_matches_a_build_process_peak(backend):
    """``ann_build_ram`` against the peak RSS of a process that builds an index as
    ``build_partition`` does (trained on a sample, filled a 65,536-vector block at a time):
    400,000 vectors of 64 dims, where ScaNN's three float32 copies (307 MB) and FAISS's
    training sample twice (67 MB) are the models' main terms; codec-ivf (k-means cells, as for
    the int8 kinds) holds its lists, a 2-byte cell a vector and one block of its counting sort. The peak is measured above the
    process after its imports, with the probe's own sample in it (build_partition holds its
    decoded sample too)."""
    from benchmarks.ann_build_ram import measure
    from mvr.operators.planning.capacity import ann_build_ram

    n, dim = 400_000, 64
    measured = measure(backend, n, dim, timeout=300)  # benchmarks/ann_build_ram.py's probe, in a fresh process
    model, _ = ann_build_ram(ann_index_size(backend, dim, n), dim)
    print(f"\n{backend}: build peak {measured / 1e6:.0f} MB above the imports, model {model / 1e6:.0f} MB")
    assert measured <= model * 1.15 + 64e6, (measured, model)  # the plan is not short of the real peak (64 MB: thread pools, scratch)
    assert measured >= model * 0.6, (measured, model)  # nor a loose bound


def test_plan_has_a_build_line_a_kind_and_warns_only_for_scann_builds_over_16_gb():
    """The plan's "ANN build" table: one line a kind with ``ann_build_ram`` of that kind's
    partition index, the peak the largest; at 10⁹ passages and 64 GB replicas a ScaNN tokens
    build task is the largest and needs over 16 GB (the note names it), a FAISS one does not."""
    from mvr.operators.planning.capacity import ann_build_ram

    w = Workload(passages=10**9)
    for backend in ("faiss-ivfpq", "scann"):
        plan = make_plan(w, AnnSettings(backend=backend), ServeSettings(ram_per_partition_gb=64))
        want = {kind: ann_build_ram(idx, w.dim_of(kind))[0] for kind, idx in plan.ann_indexes.items()}
        assert {line.item.split(":")[0]: line.bytes for line in plan.build} == want
        assert plan.build_peak_bytes == max(want.values())
        notes = [n for n in plan.notes if "ScaNN build task" in n]
        if backend == "scann":
            assert max(want, key=want.get) == "tokens" and want["tokens"] > 16e9
            assert len(notes) == 1 and "for tokens" in notes[0] and human_bytes(want["tokens"]) in notes[0]
        else:
            assert not notes and max(want.values()) < 64e9


# ------------------------------------------------------------------ the plan against a real index


# Tolerances of the shard model on a 100-passage index, each derived from what the model
# estimates rather than fitted to today's bytes:
PARQUET_FIT_TOL = 0.01  # column chunks: residual of the two-point fit (20 B) and this index's text mean vs the plan's input
FOOTER_TOL = 0.05  # Parquet footer: the same schema; statistics (min/max strings) vary by shard
IPC_FRAMING_TOL = 64  # bytes a codes file: Arrow pads each buffer to 8 (3 list columns' values + offsets, pooled, ≤ 7 B each) plus schema metadata length
SHARD_LIST_TOL = 0.05  # the list's fixed part (schema, footer, zstd frames) varies with its values
MANIFEST_FIXED_TOL = 0.10  # config, input paths, partition params: the same fields, other values
CATALOG_TOL = 262_144  # catalog.duckdb grows in DuckDB's 256 KiB blocks (the plan's line is a fit through this index and 5,000 passages)


def test_plan_matches_the_bytes_of_a_real_index(msmarco_100):
    """Every storage line of the plan against the files of an index built here (default codec
    auto = pca-192+residual-1 at dim 384, FAISS partitions of tokens and pooled, BM25)."""
    from mvr.operators import codecs
    from mvr.pipeline.indexing.index_info import codes_file_columns
    from mvr.storage.manifest import load_manifest
    from mvr.storage.shards import CODES_SUFFIX

    m = load_manifest(msmarco_100)
    t = pq.read_table([os.path.join(msmarco_100, s.path) for s in m.shards], columns=["doc_id", "text", "n_tokens"])
    assert not any(c in t.schema.names for c in ("tokens", "pooled", "first_m", "centroids"))  # no vectors in the Parquet files
    w = Workload(
        passages=m.counts["passages"],
        tokens_per_passage=m.counts["tokens"] / m.counts["passages"],  # the index's own counts
        dim=m.codecs["tokens"]["dim_in"],
        first_m=m.config["compress"]["first_m"],
        centroids=m.config["compress"]["centroids"],
        text_bytes_per_passage=float(np.mean([len(s.encode()) for s in t["text"].to_pylist()])),
        doc_id_chars=float(np.mean([len(s) for s in t["doc_id"].to_pylist()])),
        rows_per_shard=m.config["runtime"]["write_rows_per_shard"],
    )
    assert shard_count(w) == len(m.shards)  # one input block: a shard a rows_per_shard passages
    # the plan's codecs are the index's: names, decoded dims, bytes a vector, codebook size
    from mvr.storage.codec_file import KIND_GROUP, group_of, load_codec

    assert w.codec_name == m.codecs["tokens"]["name"] == codecs.resolve_name("auto", w.dim) and w.codec_dim == m.codecs["tokens"]["dim_out"] == m.dim
    for kind in KIND_GROUP:
        entry = m.codecs[group_of(m.codecs, kind)]  # first-m: the refinement of the token codes (its column's codes)
        assert (w.codec_of(kind), w.bytes_per_vector_of(kind), w.dim_of(kind)) == (entry["name"], entry["bytes_per_vector"], entry["dim_out"])
    codec = load_codec(msmarco_100, m.codecs["tokens"])
    assert len(codec.inner.centroids if hasattr(codec, "inner") else codec.centroids) == w.residual_centroids()

    plan = make_plan(w, AnnSettings("faiss-ivfpq", ("tokens", "pooled")), ServeSettings(partitions=1))
    lines = {x.item: x.bytes for x in plan.storage}
    assert math.isclose(plan.storage_bytes, sum(lines.values()))
    n_shards = len(m.shards)
    shard_lines = {k: v for k, v in lines.items() if k.startswith("shards:")}
    assert len(shard_lines) == 7

    # codes: exact, column by column, when no passage is shorter than first-m and centroids
    assert int(t["n_tokens"].to_numpy().min()) >= max(w.first_m, w.centroids)
    measured = {"file": 0, "cols": {}}
    for s in m.shards:
        assert s.codes.endswith(CODES_SUFFIX)
        info = codes_file_columns(msmarco_100, s.codes)
        assert info["file_bytes"] == s.codes_bytes == os.path.getsize(os.path.join(msmarco_100, s.codes))
        measured["file"] += info["file_bytes"]
        for c, v in info["columns"].items():
            measured["cols"][c] = measured["cols"].get(c, 0) + v["bytes"]
    batch_offsets = 4 * n_shards  # a list column's n + 1st offset, in the framing line (one record batch a shard)
    assert lines["shards: token codes"] == pytest.approx(measured["cols"]["tokens"] - batch_offsets, rel=1e-9)
    assert lines[f"shards: first-{w.first_m} codes"] == pytest.approx(measured["cols"]["first_m"] - batch_offsets, rel=1e-9)
    assert lines[f"shards: {w.centroids}-centroid codes"] == pytest.approx(measured["cols"]["centroids"] - batch_offsets, rel=1e-9)
    assert lines["shards: pooled codes"] == pytest.approx(measured["cols"]["pooled"], rel=1e-9)
    framing = measured["file"] - sum(measured["cols"].values()) + 3 * batch_offsets
    assert abs(lines["shards: codes files' framing"] - framing) <= IPC_FRAMING_TOL * n_shards
    codes_plan = sum(v for k, v in shard_lines.items() if "codes" in k)
    assert abs(codes_plan - sum(s.codes_bytes for s in m.shards)) <= IPC_FRAMING_TOL * n_shards

    # Parquet files: text, ids and spans, footers. The per-passage and per-shard figures are a
    # two-point fit through this index (3 shards of ≤ 40 passages) and the whole msmarco-sample
    # (5 of ≤ 1,024): here the check is of the arithmetic and the shard count, within the fit's
    # residual and the footers' variation (statistics differ by shard).
    parquet = sum(s.bytes for s in m.shards)
    parquet_plan = lines["shards: text (zstd)"] + lines["shards: ids, spans, footers"]
    assert abs(parquet_plan - parquet) <= PARQUET_FIT_TOL * parquet + FOOTER_TOL * n_shards * MEASURED["shard_footer_bytes"].value, (parquet_plan, parquet)

    # codec files: arrays exact, header measured
    assert w.refines_first_m and "first_m" in m.codecs
    for group in ("tokens", "pooled", "first_m"):
        assert abs(lines[f"codecs/{group}.mvrc"] - m.codecs[group]["bytes"]) <= 64, (group, lines[f"codecs/{group}.mvrc"], m.codecs[group]["bytes"])
    # catalog: a fit through this index and the 5,000-passage one; the file grows in DuckDB blocks
    assert abs(lines["catalog.duckdb"] - os.path.getsize(os.path.join(msmarco_100, "catalog.duckdb"))) <= CATALOG_TOL
    # manifest: nothing per shard in the JSON; the shard list file against its plan line
    raw = json.loads(open(os.path.join(msmarco_100, "manifest.json")).read())
    assert "shards" not in raw and raw["shard_list"]["count"] == n_shards
    assert lines["shard list"] == pytest.approx(raw["shard_list"]["bytes"], rel=SHARD_LIST_TOL)
    built = 3  # partitions: tokens, pooled, BM25 (P = 1)
    fixed = MEASURED["manifest_fixed_bytes"].value + built * MEASURED["manifest_bytes_per_partition"].value
    actual = os.path.getsize(os.path.join(msmarco_100, "manifest.json"))
    # fixed parts (config, paths, params) differ by what the two indexes were built with: 10 %
    assert abs(lines["manifest.json"] - actual) <= MANIFEST_FIXED_TOL * fixed, (lines["manifest.json"], actual)

    for kind in ("tokens", "pooled"):
        (part,) = m.ann[kind]["partitions"]
        files = part["files"]
        assert set(files) - {"passages.parquet"} == {n for n in files if n.startswith("index/")}  # ids + index, no vectors file
        ids_file = pq.read_schema(os.path.join(msmarco_100, part["path"], "passages.parquet")).names
        assert ids_file == ["passage", "doc_id", "passage_idx"]
        # ids only: the BM25 passages.parquet figures (same columns), within their tolerance
        assert lines[f"ann/{kind}: passages.parquet"] == pytest.approx(files["passages.parquet"]["bytes"], rel=PARQUET_TOL)
        index_bytes = sum(f["bytes"] for name, f in files.items() if name.startswith("index/") and name != "index/ann.json")
        assert lines[f"ann/{kind}: faiss-ivfpq index"] == pytest.approx(index_bytes, rel=0.01)
        idx = plan.ann_indexes[kind]
        for name in ("nlist", "m", "nbits"):
            if not part["params"]["brute_force"]:
                assert idx.params[name] == part["params"][name]
        assert idx.params.get("brute_force", False) == part["params"]["brute_force"]
    _check_bm25_plan(msmarco_100, m.bm25["partitions"], w.passages, lines["bm25 partitions"])
    # every line was checked
    checked = set(shard_lines) | {
        "codecs/tokens.mvrc",
        "codecs/pooled.mvrc",
        "codecs/first_m.mvrc",
        "catalog.duckdb",
        "manifest.json",
        "shard list",
        "bm25 partitions",
    }
    checked |= {f"ann/{k}: {x}" for k in ("tokens", "pooled") for x in ("passages.parquet", "faiss-ivfpq index")}
    assert checked == set(lines)
    # served RAM: the ANN index at the decoded dimension; codes mapped, not counted (hot fraction 0)
    ram = {x.item: x.bytes for x in plan.ram}
    assert ram[f"tokens: faiss-ivfpq index (dim {m.dim})"] == pytest.approx(plan.ann_indexes["tokens"].ram_bytes)
    assert ram["codes page cache (hot fraction 0)"] == 0


def test_stats_measures_bytes_a_vector(msmarco_100, capsys, monkeypatch):
    from mvr.jobs.stats import main
    from mvr.pipeline.indexing.index_info import index_stats
    from mvr.storage.manifest import load_manifest

    m = load_manifest(msmarco_100)
    s = index_stats(msmarco_100)
    vb = s["vector_bytes"]
    from mvr.storage.codec_file import group_of

    assert s["codec"] == vb["codecs"]["tokens"] == m.codecs["tokens"]["name"] and s["bytes_per_token_vector"] == m.codecs["tokens"]["bytes_per_vector"]
    assert s["pooled_codec"] == vb["codecs"]["pooled"] == m.codecs["pooled"]["name"]
    k = vb["kinds"]
    assert k["tokens"]["vectors"] == m.counts["tokens"] and k["pooled"]["vectors"] == m.counts["passages"]
    assert k["first-m"]["vectors"] == m.counts["passages"] * m.config["compress"]["first_m"]  # no passage shorter than m here
    for kind, v in k.items():
        entry = m.codecs[group_of(m.codecs, kind)]  # first-m: its column's, the refinement (beside the token codes)
        bpv = entry["bytes_per_vector"]
        assert (v["codec"], v["bytes_per_vector"]) == (entry["name"], bpv)
        list_col = kind != "pooled"
        # codes: bpv a vector + a 4-byte list offset a passage (+ one a shard) for list columns
        extra = 4 * (m.counts["passages"] + len(m.shards)) if list_col else 0
        assert v["codes_bytes"] == v["vectors"] * bpv + extra
        ann = sum(f["bytes"] for p in m.ann.get(kind, {}).get("partitions", []) for n, f in p["files"].items() if n.startswith("index/"))
        assert v["ann_bytes"] == ann and (ann > 0) == (kind in ("tokens", "pooled"))
        assert v["total_per_vector"] == pytest.approx((v["codes_bytes"] + ann) / v["vectors"])
    t = vb["total"]
    assert t["codes_files_bytes"] == sum(sh.codes_bytes for sh in m.shards)
    assert t["per_vector"] == pytest.approx((t["codes_files_bytes"] + t["ann_bytes"]) / sum(v["vectors"] for v in k.values()))
    monkeypatch.setenv("COLUMNS", "200")  # rich: wide enough not to fold the table
    assert main([msmarco_100]) == 0
    out = capsys.readouterr().out
    assert (
        m.codecs["tokens"]["name"] in out and m.codecs["pooled"]["name"] in out and "total B/vector" in out and f"{k['tokens']['total_per_vector']:.2f}" in out
    )


# The BM25 plan estimates three things from msmarco-sample's 5,000 passages; each is checked
# against the index with its own bound, and the bound on the total follows from them (first
# order), so the tolerance is what the model claims, not today's bytes of a library's files.
HEAPS_TOL = 0.10  # terms: Heaps' law (exponent 0.5) through the one measured point
POSTINGS_TOL = 0.10  # postings a passage: a 100-passage sample of a 5,000-passage mean
VOCAB_BYTES_TOL = 0.15  # vocabulary file bytes a term: shorter terms and ids in a smaller vocabulary
PARQUET_TOL = 0.05  # passages.parquet: zstd of ids measured at 100 and 5,000 passages


def _check_bm25_plan(index_url, partitions, passages, planned) -> None:
    (bm25,) = partitions
    files = bm25["files"]
    actual = sum(f["bytes"] for f in files.values())
    postings = np.load(os.path.join(index_url, bm25["path"], "index", "data.csc.index.npy"), mmap_mode="r").shape[0]
    parts = bm25_partition_files(passages)
    assert planned == pytest.approx(sum(parts.values()))
    assert bm25_partition(passages)[2] == pytest.approx(bm25["terms"], rel=HEAPS_TOL)
    assert postings / passages == pytest.approx(MEASURED["bm25_postings_per_passage"].value, rel=POSTINGS_TOL)
    per_term = files["index/vocab.index.json"]["bytes"] / bm25["terms"]
    assert per_term == pytest.approx(MEASURED["bm25_vocab_file_bytes_per_term"].value, rel=VOCAB_BYTES_TOL)
    tolerance = POSTINGS_TOL * parts["postings"] + (HEAPS_TOL + VOCAB_BYTES_TOL) * parts["terms"] + PARQUET_TOL * parts["passages"]
    assert abs(planned - actual) <= tolerance, (planned, actual, tolerance)
    # with the index's own counts, only the bytes a term and a passage remain estimated
    counted = bm25_partition_files(passages, postings=postings, terms=bm25["terms"])
    assert abs(sum(counted.values()) - actual) <= VOCAB_BYTES_TOL * counted["terms"] + PARQUET_TOL * counted["passages"]
