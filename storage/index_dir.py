"""Whole-index housekeeping: clearing a target directory, removing orphan shards."""

from __future__ import annotations

from storage import fs
from storage.shards import SHARDS_DIR


def clear(index_url: str) -> None:
    """Remove everything under ``index_url`` (``mvr index --overwrite``)."""
    fs.remove(index_url, recursive=True)


def remove_orphan_shards(index_url: str, keep: set[str]) -> int:
    """Delete shard files no commit record lists (left by a killed run). Returns the count."""
    removed = 0
    for url in fs.list_files(fs.join(index_url, SHARDS_DIR), ".parquet"):
        rel = f"{SHARDS_DIR}/{url.rstrip('/').rsplit('/', 1)[-1]}"
        if rel not in keep:
            fs.remove(url)
            removed += 1
    return removed
