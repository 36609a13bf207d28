"""The light per-batch callables of the indexing graph (Ray Data ``map_batches``): validating
blocks, reading and tokenizing them, writing shards. They import no torch, so their workers
start fast; the encode actor is in ``encode_stage.py``. Ray wiring lives in ``corpus_job.py``."""

from __future__ import annotations

import functools
import json
import zlib
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute  # pa.compute (not imported by pyarrow itself)

from mvr.operators import codecs
from mvr.operators.ann.base import set_build_threads
from mvr.operators.encode.checkpoint import load_tokenizer
from mvr.operators.encode.tokenizer import PassageTokenizer
from mvr.operators.encode.validation import Document, Reject, parse_rows
from mvr.operators.packed import Packed
from mvr.storage import staging
from mvr.storage.corpus import InputBlock, parquet_fields, read_block, read_tsv_header
from mvr.storage.schema import PASSAGE_FIELDS, arrow_to_packed
from mvr.storage.shards import committed_in_block, covered_seqs, write_shard

PASSAGE_SCHEMA = pa.schema(PASSAGE_FIELDS + [pa.field("input_ids", pa.list_(pa.int32()))])


def parse_block(block: InputBlock) -> tuple[list, int]:
    """(parsed rows: Document | Reject, raw lines or rows read) of one block, rows capped at
    ``block.max_rows``. A Parquet file's columns are all read (the ones besides id, text and
    title are the documents' metadata); a TSV block after the file's first gets the file's
    header (its metadata columns)."""
    fields = parquet_fields(block.url) if block.format == "parquet" else None
    header = read_tsv_header(block) if block.format == "tsv" and block.start > 0 else None
    raw = list(read_block(block))
    rows = parse_rows(raw, block.format, block.start == 0, fields, header)
    return (rows if block.max_rows is None else rows[: block.max_rows]), len(raw)


def scan_block(spec: dict, index_url: str) -> dict:
    """Validate one block and record its rows' outcomes in staging. Returns its counts."""
    block = InputBlock.from_dict(spec)
    rows, raw_rows = parse_block(block)
    staging.write_scan(index_url, block, [(r.index, r.doc_id, r.reason if isinstance(r, Reject) else None) for r in rows], raw_rows=raw_rows)
    return {"block_id": block.block_id, "rows": len(rows), "valid": sum(isinstance(r, Document) for r in rows)}


@functools.lru_cache(maxsize=4)
def _tokenizer(model_name: str, settings_json: str) -> PassageTokenizer:
    """One tokenizer per worker process and settings (loaded on first use)."""
    return PassageTokenizer(load_tokenizer(model_name), **json.loads(settings_json))


def read_tokenize(batch: pa.Table, index_url: str, model_name: str, tokenizer_settings: dict) -> pa.Table:
    """Block specs → their passages with token ids, minus rejects, duplicates and passages
    already written, ordered by token count within each block (length bucketing: consecutive
    rows pad little when batched for the encoder)."""
    tokenizer = _tokenizer(model_name, json.dumps(tokenizer_settings, sort_keys=True))
    parts = [_block_passages(InputBlock.from_dict(spec), index_url, tokenizer) for spec in batch.to_pylist()]
    return pa.concat_tables(parts) if parts else PASSAGE_SCHEMA.empty_table()


def _block_passages(block: InputBlock, index_url: str, tokenizer: PassageTokenizer) -> pa.Table:
    duplicates = staging.duplicates_in_block(index_url, block.block_id)
    docs = [r for r in parse_block(block)[0] if isinstance(r, Document) and r.index not in duplicates]
    passages = tokenizer.split([d.doc_id for d in docs], [d.title for d in docs], [d.text for d in docs])
    written = set(covered_seqs(committed_in_block(index_url, block.block_id)).tolist())
    todo = [seq for seq in range(len(passages)) if seq not in written]
    todo.sort(key=lambda seq: len(passages[seq].input_ids))
    doc_of = {d.doc_id: d for d in docs}
    rows = [passages[seq] for seq in todo]
    return pa.table(
        {
            "doc_id": [p.doc_id for p in rows],
            "passage_idx": [p.passage_idx for p in rows],
            "block_id": [block.block_id] * len(rows),
            "row_index": [doc_of[p.doc_id].index for p in rows],
            "seq": todo,
            "title": [doc_of[p.doc_id].title for p in rows],
            "text": [p.text for p in rows],
            "char_start": [p.char_start for p in rows],
            "char_end": [p.char_end for p in rows],
            "metadata": [doc_of[p.doc_id].metadata for p in rows],
            "input_ids": [p.input_ids for p in rows],
        },
        schema=PASSAGE_SCHEMA,
    )


def sample_keys(block_ids: np.ndarray, seqs: np.ndarray, seed: int) -> np.ndarray:
    """(n,) float64 in [0, 1): a fixed pseudo-random number for each passage (block, seq),
    the same in every run and on every worker (a multiplicative hash, vectorised; one crc32
    per distinct block)."""
    out = np.empty(len(seqs), dtype=np.float64)
    for block in np.unique(block_ids):
        rows = block_ids == block
        h = (seqs[rows].astype(np.uint64) + np.uint64(zlib.crc32(f"{seed}:{block}".encode()))) * np.uint64(0x9E3779B97F4A7C15)
        out[rows] = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return out


def select_sample(batch: pa.Table, fraction: float, seed: int) -> pa.Table:
    """The passages of ``batch`` whose ``sample_keys`` fall below ``fraction``: a seeded
    sample drawn from every block alike, the same whichever worker sees the rows."""
    if batch.num_rows == 0 or fraction >= 1:
        return batch
    keys = sample_keys(batch["block_id"].to_numpy(zero_copy_only=False), batch["seq"].to_numpy(), seed)
    return batch.filter(pa.array(keys < fraction))


def sample_vectors(batches: Iterable[pa.Table], cap: int, seed: int) -> tuple[np.ndarray, int]:
    """(≤ ``cap`` token vectors (float32, (n, dim)), passages they came from) out of the
    ``EncodeSample`` output ``batches``: passages put in (block, seq) order (the order Ray
    delivers them in varies), then a seeded choice of ``cap`` vectors when there are more,
    so the same corpus and seed give the same sample."""
    keys, parts = [], []
    for b in batches:
        if b.num_rows:
            keys.append(b.select(["block_id", "seq"]))
            parts.append(arrow_to_packed(b["tokens"]))
    if not parts:
        return np.zeros((0, 0), np.float32), 0
    table = pa.concat_tables(keys)
    packed = Packed.concat(parts)
    order = pa.compute.sort_indices(table, sort_keys=[("block_id", "ascending"), ("seq", "ascending")]).to_numpy()
    vectors = packed.take(order).vectors
    if len(vectors) > cap:
        rows = np.sort(np.random.default_rng(seed).choice(len(vectors), cap, replace=False))
        vectors = vectors[rows]
    return np.ascontiguousarray(vectors, dtype=np.float32), len(order)


def train_codecs(names: dict[str, str], sample: np.ndarray, seed: int, n_vectors: int, threads: Optional[int] = None) -> dict[str, bytes]:
    """Train each codec of ``names`` ({group: codec name}; a ``first_m`` refinement after the
    tokens codec it refines) on ``sample`` (a Ray task body): {group: its file's bytes}. ``threads``: FAISS's OpenMP threads for the k-means and PCA
    (``EncodePlan.threads``: all the node's cores; Ray would give a task as many as it
    reserves: on 2 cores, pca-64+residual-2 on 65,536 vectors took 8.7 s on one, 5.0 s on two)."""
    if threads:
        set_build_threads(threads)
    trained = {g: codecs.train(name, sample, seed=seed, n_vectors=n_vectors) for g, name in names.items() if g != "first_m"}
    if "first_m" in names:  # the token codec's refinement, trained given it on the same sample
        trained["first_m"] = codecs.train_refinement(names["first_m"], sample, trained["tokens"], seed=seed)
    return {g: codecs.to_bytes(c) for g, c in trained.items()}


def write_shards(batch: pa.Table, index_url: str) -> pa.Table:
    """Write the batch as shards, one per input block it contains (rows ordered by ``seq``).
    Returns one row per shard written: block_id, passages, tokens."""
    out: dict[str, list] = {"block_id": [], "passages": [], "tokens": []}
    if batch.num_rows:
        batch = batch.sort_by([("block_id", "ascending"), ("seq", "ascending")])
        blocks = batch["block_id"].to_numpy(zero_copy_only=False)
        breaks = np.flatnonzero(blocks[1:] != blocks[:-1]) + 1
        for start, end in zip(np.r_[0, breaks], np.r_[breaks, len(blocks)]):
            record = write_shard(index_url, batch.slice(start, end - start), str(blocks[start]))
            out["block_id"].append(record["block_id"])
            out["passages"].append(record["rows"])
            out["tokens"].append(record["tokens"])
    return pa.table(out, schema=pa.schema([("block_id", pa.string()), ("passages", pa.int64()), ("tokens", pa.int64())]))
