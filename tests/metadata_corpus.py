"""A metadata-carrying copy of msmarco-sample for the filter tests: every document keeps its
id, title and text and gets a BEIR ``metadata`` object computed from itself (so the test can
recompute it in plain Python), with integer, float, string, boolean, date, null and nested
values; plus a few rows whose metadata cannot be stored (each must be one reject)."""

from __future__ import annotations

import datetime as dt
import json
import zlib
from pathlib import Path

TOPICS = ("alpha", "beta", "gamma", "delta")

# rows that must be rejected, with the reason's beginning
BAD_ROWS = [
    ({"_id": "bad-list", "title": "", "text": "metadata that is a list", "metadata": [1, 2]}, "bad metadata: metadata is a list, not an object"),
    (
        {"_id": "bad-deep", "title": "", "text": "metadata nested too deep", "metadata": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}},
        "bad metadata: nested more than",
    ),
    ({"_id": "bad-big", "title": "", "text": "metadata too large", "metadata": {"blob": "x" * 70_000}}, "bad metadata: metadata is"),
]


def derived_metadata(doc: dict) -> dict:
    """The metadata of one msmarco-sample document: a function of its id and text alone."""
    h = zlib.crc32(doc["_id"].encode())
    text = doc["text"]
    topic = TOPICS[(h >> 4) % 4]
    return {
        "length": len(text),  # integer
        "year": 1990 + h % 30,  # integer, uniform over 1990..2019
        "score": ((h >> 8) % 1000) / 10,  # float
        "bucket": h % 100,  # integer: bucket = 7 selects about 1 %
        "topic": topic,  # string
        "has_digit": any(c.isdigit() for c in text),  # boolean
        "published": (dt.date(2000, 1, 1) + dt.timedelta(days=h % 7000)).isoformat(),  # a date column
        "rating": None if h % 3 == 0 else h % 5,  # integer with nulls
        "tags": [topic, {"n": h % 7}],  # nested: a JSON column
    }


def write_corpus(source: Path, out: Path) -> list[dict]:
    """Write the metadata copy of ``source`` (a BEIR corpus.jsonl) to ``out`` and return the
    valid documents as written (with their metadata)."""
    docs = []
    with open(source, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                d["metadata"] = derived_metadata(d)
                docs.append(d)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
            if i in (10, 20, 30):
                f.write(json.dumps(BAD_ROWS[(i // 10) - 1][0]) + "\n")
    return docs
