"""Staging records of an unfinished job (storage/staging.py), no Ray."""

from __future__ import annotations

import pyarrow.parquet as pq

from mvr.storage import staging
from mvr.storage.corpus import InputBlock


def test_scan_record_holds_an_unencodable_id_escaped(tmp_path):
    """A reject whose id carries a lone surrogate (which UTF-8 cannot hold) is still written;
    the id is kept with the surrogate as an escape."""
    block = InputBlock("00000-000000", "c.jsonl", "jsonl", 0, 10)
    staging.write_scan(str(tmp_path), block, [(0, "ok", None), (1, "bad\ud800", "invalid unicode: x"), (2, None, "empty line: blank line")], raw_rows=3)
    table = pq.read_table(staging.scan_url(str(tmp_path), block.block_id))
    assert table["doc_id"].to_pylist() == ["ok", "bad\\ud800", None]
    assert staging.raw_rows(str(tmp_path), block.block_id) == 3
    assert staging.reject_reasons(str(tmp_path), [block]) == [("empty line", 1), ("invalid unicode", 1)]
