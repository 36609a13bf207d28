"""``mvr demo``: the whole path offline on a small real corpus. Builds the stdlib-docs corpus
(``pipeline.demo_corpus``), writes it as ``WORKDIR/corpus.jsonl``, indexes it into
``WORKDIR/index`` with the default configuration (packaged MiniLM), and answers a few fixed
queries with exact MaxSim. Rerunning with the same workdir reuses the committed index; when
the corpus file had to be (re)written, the workdir's index is rebuilt from scratch."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from pipeline.config import IndexConfig
from pipeline.demo_corpus import DEFAULT_LIMIT, build_demo_corpus
from pipeline.indexing import IndexResult, index_corpus
from pipeline.local_search import answer
from pipeline.search import Searcher
from storage import fs
from storage.catalog import Catalog
from storage.jsonl import write_jsonl

DEMO_QUERIES: tuple[str, ...] = (
    "how do I parse JSON from a string",
    "run a shell command and capture its output",
    "with statement context manager protocol",
    "sort a list in place with a key function",
    "read and write zip archives",
)
DEMO_MODE = "maxsim"


@dataclass
class DemoResult:
    workdir: str
    corpus_url: str
    index_url: str
    documents: int  # rows written to the corpus
    corpus_written: bool  # False: an identical corpus file was already there
    index: IndexResult
    answers: list[dict]  # one ``answer`` body per query, with "query" added
    seconds: float


def run_demo(
    workdir: str,
    limit: int = DEFAULT_LIMIT,
    k: int = 3,
    log: Callable[[str], None] = print,
    config: IndexConfig | None = None,
) -> DemoResult:
    """Corpus → index → ``k`` exact MaxSim results for each of ``DEMO_QUERIES``."""
    t0 = time.time()
    corpus_url = fs.join(workdir, "corpus.jsonl")
    index_url = fs.join(workdir, "index")
    rows = build_demo_corpus(limit)
    written = write_jsonl(corpus_url, rows)
    log(f"{'wrote' if written else 'reusing'} {corpus_url}: {len(rows)} documents from the Python docs")
    result = index_corpus(corpus_url, index_url, config or IndexConfig(), overwrite=written, log=log)
    log(result.summary)
    searcher = Searcher(index_url, modes=(DEMO_MODE,))
    catalog = Catalog(index_url)
    try:
        answers = [{"query": q, **answer(searcher, catalog, q, k, DEMO_MODE)} for q in DEMO_QUERIES]
    finally:
        catalog.close()
    return DemoResult(workdir, corpus_url, index_url, len(rows), written, result, answers, time.time() - t0)
