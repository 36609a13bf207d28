"""BEIR test collections: ``queries.jsonl`` and ``qrels/{split}.tsv`` of a dataset directory
(any fsspec URL). The corpus itself is read by ``storage/corpus.py`` like any other input."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

from mvr.storage import fs


@dataclass
class Judgment:
    query_id: str
    doc_id: str
    relevance: int


@dataclass
class TestCollection:
    """Queries ({query_id: text}, file order) and graded judgments of one split."""

    name: str
    queries: dict[str, str]
    qrels: list[Judgment]

    @property
    def judged_queries(self) -> dict[str, str]:
        """The queries with at least one judgment (the ones metrics are computed over)."""
        judged = {j.query_id for j in self.qrels}
        return {q: t for q, t in self.queries.items() if q in judged}


def read_collection(dataset_url: str, split: str = "test") -> TestCollection:
    """Read a BEIR dataset's queries and the qrels of ``split``; ValueError when a file is
    missing or malformed (naming the file and line)."""
    queries_url = fs.join(dataset_url, "queries.jsonl")
    qrels_url = fs.join(dataset_url, "qrels", f"{split}.tsv")
    for url in (queries_url, qrels_url):
        if not fs.exists(url):
            raise ValueError(f"{url} not found: a BEIR dataset directory has queries.jsonl and qrels/{split}.tsv")
    queries: dict[str, str] = {}
    for n, line in enumerate(fs.read_bytes(queries_url).decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            queries[str(row["_id"])] = str(row["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{queries_url} line {n}: not a query object with _id and text ({e})") from None
    qrels = []
    reader = csv.reader(io.StringIO(fs.read_bytes(qrels_url).decode("utf-8")), delimiter="\t")
    for n, row in enumerate(reader, 1):
        if not row or (n == 1 and row[0] == "query-id"):
            continue
        try:
            qrels.append(Judgment(row[0], row[1], int(row[2])))
        except (IndexError, ValueError):
            raise ValueError(f"{qrels_url} line {n}: expected query-id, corpus-id, score") from None
    name = dataset_url.rstrip("/").rsplit("/", 1)[-1]
    return TestCollection(name, queries, qrels)
