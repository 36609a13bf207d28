"""BM25 partitions on storage: the same passage ranges as the ANN partitions
(``storage.partitions.plan_partitions``), one directory a partition under
``bm25/{build}/part-{p:05d}/``:

- ``passages.parquet``: ``passage`` (int64 global number), ``doc_id``, ``passage_idx``;
- ``index/``: the bm25s index (its own ``save`` format: CSC score matrix, vocabulary, params)
  whose rows are those passages in order.

The manifest's ``bm25`` entry lists the partitions with each file's size and sha256, the
analyzer and scoring settings, and the collection statistics' totals."""

from __future__ import annotations

import posixpath
from typing import Any, Optional, Sequence

import numpy as np

from mvr.operators.retrieval.bm25 import BM25Partition
from mvr.storage.partitions import INDEX_SUBDIR, PASSAGES_FILE, ShardSlice, local_copy, passages_parquet, read_partition_passages, saved_files, write_files
from mvr.storage.shards import read_shard
from mvr.storage.tombstones import live_mask

BM25_DIR = "bm25"


def build_dir(build: str) -> str:
    """Relative directory of one BM25 build."""
    return posixpath.join(BM25_DIR, build)


def read_passage_texts(index_url: str, slices: Sequence[ShardSlice]) -> tuple[list[str], np.ndarray, list[str]]:
    """(doc_ids, passage_idx (n,) int32, texts) of the passages in ``slices``, in order."""
    doc_ids: list[str] = []
    texts: list[str] = []
    pidx = []
    for sl in slices:
        t = read_shard(index_url, sl.path, ["doc_id", "passage_idx", "text"]).slice(sl.start, sl.stop - sl.start)
        doc_ids.extend(t["doc_id"].to_pylist())
        texts.extend(t["text"].to_pylist())
        pidx.append(t["passage_idx"].to_numpy())
    return doc_ids, (np.concatenate(pidx).astype(np.int32) if pidx else np.zeros(0, np.int32)), texts


def write_bm25_partition(index_url: str, rel_dir: str, first_passage: int, part: BM25Partition) -> dict[str, Any]:
    """Write one BM25 partition under ``rel_dir``; its manifest entry (path, first_passage,
    passages, terms in its vocabulary, files with bytes and sha256)."""
    n = len(part)
    files = {PASSAGES_FILE: passages_parquet(first_passage, part.doc_ids, part.passage_idx), **saved_files(part.save, INDEX_SUBDIR)}
    return {
        "path": rel_dir,
        "first_passage": int(first_passage),
        "passages": n,
        "terms": len(part.index.vocab_dict),
        "files": write_files(index_url, rel_dir, files),
    }


def load_bm25_partition(index_url: str, entry: dict[str, Any], verify: bool = False, tombstones: Optional[dict[str, Any]] = None) -> BM25Partition:
    """Open a built BM25 partition (``verify``: check every file's sha256 first); the deleted
    passages of the version's ``tombstones`` entry score 0."""
    table = read_partition_passages(index_url, entry, verify)
    doc_ids, pidx = table["doc_id"].to_pylist(), table["passage_idx"].to_numpy()
    live = live_mask(index_url, tombstones or {}, entry["first_passage"], entry["passages"])
    return local_copy(index_url, entry, INDEX_SUBDIR, lambda d: BM25Partition.load(d, doc_ids, pidx, live), verify)


def tiling(ranges: Sequence[tuple[int, int]], entries: Sequence[dict[str, Any]]) -> list[list[int]]:
    """For each passage range (first passage, passages) of a dense mode's partitions, the BM25
    partitions (by number) that cover exactly that range; ValueError when their boundaries
    differ (rebuild BM25 with the dense build's number of partitions)."""
    out = []
    for first, n in ranges:
        picked = [i for i, e in enumerate(entries) if first <= e["first_passage"] and e["first_passage"] + e["passages"] <= first + n]
        if sum(entries[i]["passages"] for i in picked) != n:
            raise ValueError(
                f"the BM25 partitions do not line up with the dense partition of passages [{first}, {first + n}): "
                f"rebuild BM25 with the same number of partitions (mvr build-bm25 INDEX --partitions P)"
            )
        out.append(picked)
    return out
