"""``mvr train``'s pairs, built once a run: from a corpus (unsupervised pairs, one Ray Data
task a block of the input, as ``mvr index`` reads it), a BEIR directory's ``qrels/train.tsv``
or a JSONL file of pairs; checked against an evaluation set's queries; given hard negatives
mined with an mvr index; a seeded sample of at most ``max_pairs``."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

from mvr.operators.encode.validation import Document
from mvr.operators.training.pairs import Pair, overlap, pick_negatives, query_key, unsupervised_pairs
from mvr.pipeline.config import TrainConfig
from mvr.storage import fs
from mvr.storage.beir import read_collection
from mvr.storage.corpus import InputBlock, plan_blocks


class TrainingDataError(ValueError):
    """DATA cannot give training pairs (or overlaps the evaluation set): the job's one line."""


def data_kind(url: str) -> str:
    """``beir-train`` (a directory with qrels/train.tsv and queries.jsonl), ``pairs`` (a
    .jsonl file whose first object has "query" and "positive") or ``corpus``."""
    if fs.exists(fs.join(url, "qrels", "train.tsv")):
        return "beir-train"
    if url.endswith(".jsonl") and fs.exists(url):
        with fs.open_file(url) as f:
            first = f.readline()
        try:
            obj = json.loads(first)
        except ValueError:
            return "corpus"
        if isinstance(obj, dict) and "query" in obj and "positive" in obj:
            return "pairs"
    return "corpus"


def _block_pairs(spec: dict, seed: int, kinds: list[str]) -> list[dict[str, Any]]:
    from mvr.pipeline.indexing.stages import parse_block

    docs = [r for r in parse_block(InputBlock.from_dict(spec))[0] if isinstance(r, Document)]
    return [_row(p) for p in unsupervised_pairs(((d.doc_id, d.title, d.text) for d in docs), seed, kinds)]


def _row(p: Pair) -> dict[str, Any]:
    return {"query": p.query, "positive": p.positive, "positive_id": p.positive_id, "source": p.source, "negatives": list(p.negatives)}


def corpus_pairs(url: str, config: TrainConfig) -> list[dict[str, Any]]:
    """The unsupervised pairs of every document of a corpus, one Ray task a block."""
    import ray

    blocks, _ = plan_blocks(url, 4 << 20, 20_000)
    task = ray.remote(num_cpus=1)(_block_pairs)
    refs = [task.remote(b.to_dict(), config.train.seed, list(config.data.kinds)) for b in blocks]
    return [row for part in ray.get(refs) for row in part]


def beir_train_pairs(url: str) -> list[dict[str, Any]]:
    """(query, judged passage) of a BEIR directory's train split, every positive judgment."""
    from mvr.pipeline.indexing.stages import parse_block

    collection = read_collection(url, "train")
    wanted = {j.doc_id for j in collection.qrels if j.relevance > 0}
    texts: dict[str, str] = {}
    blocks, _ = plan_blocks(fs.join(url, "corpus.jsonl"), 4 << 20, 20_000)
    for b in blocks:
        for d in parse_block(b)[0]:
            if isinstance(d, Document) and d.doc_id in wanted:
                texts[d.doc_id] = f"{d.title} {d.text}" if d.title else d.text
    return [
        {"query": collection.queries[j.query_id], "positive": texts[j.doc_id], "positive_id": j.doc_id, "source": "labelled", "negatives": []}
        for j in collection.qrels
        if j.relevance > 0 and j.query_id in collection.queries and j.doc_id in texts
    ]


def jsonl_pairs(url: str) -> list[dict[str, Any]]:
    """A JSONL file of {"query", "positive"[, "positive_id", "negatives"]}; a bad line is
    refused naming its number."""
    rows = []
    for n, line in enumerate(fs.read_bytes(url).decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            query, positive = obj["query"], obj["positive"]
            negatives = obj.get("negatives", [])
            if not (isinstance(query, str) and isinstance(positive, str) and isinstance(negatives, list) and all(isinstance(x, str) for x in negatives)):
                raise TypeError("query and positive must be strings, negatives a list of strings")
        except (ValueError, KeyError, TypeError) as e:
            raise TrainingDataError(f"{url} line {n}: not a pair object with query and positive ({e})") from None
        rows.append(
            {"query": query, "positive": positive, "positive_id": str(obj.get("positive_id", f"line-{n}")), "source": "labelled", "negatives": negatives}
        )
    return rows


def check_overlap(rows: list[dict[str, Any]], config: TrainConfig, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """The pairs, none of whose queries is one of the evaluation set's: TrainingDataError
    when some is (``on_overlap: refuse``), or those pairs left out, said in the log (``drop``)."""
    sets = config.data.eval_datasets
    if not sets:
        return rows
    held = [q for url in sets for q in read_collection(url, config.data.eval_split).queries.values()]
    same = overlap((r["query"] for r in rows), held)
    if not same:
        return rows
    shown = "; ".join(repr(q[:60]) for q in same[:3])
    what = f"{len(same)} training queries are queries of {', '.join(sets)} ({config.data.eval_split}), e.g. {shown}"
    if config.data.on_overlap == "refuse":
        raise TrainingDataError(f"{what}: never train on a test query (data.on_overlap: drop leaves their pairs out)")
    keys = {query_key(q) for q in same}
    kept = [r for r in rows if query_key(r["query"]) not in keys]
    log(f"{what}: their {len(rows) - len(kept):,} pairs left out")
    return kept


def mine_negatives(rows: list[dict[str, Any]], config: TrainConfig, log: Callable[[str], None]) -> None:
    """Add ``config.data.negatives`` hard negatives to each pair, in place: passages ranked
    for its query (mode ``negatives_mode``) by the index of ``negatives_from`` that holds the
    positive's document (the first when none does), from place ``negatives_skip`` + 1 to
    ``negatives_depth``, never the positive's document."""
    d = config.data
    rng = np.random.default_rng(config.train.seed)
    todo = list(range(len(rows)))
    for n, index_url in enumerate(d.negatives_from):
        last = n == len(d.negatives_from) - 1
        todo = _mine_in(index_url, rows, todo, last, config, rng)
    log(f"hard negatives: {sum(len(r['negatives']) for r in rows):,} mined with {', '.join(d.negatives_from)} ({d.negatives_mode})")


def _mine_in(index_url: str, rows: list[dict[str, Any]], todo: list[int], take_all: bool, config: TrainConfig, rng: np.random.Generator) -> list[int]:
    """Mine the pairs of ``todo`` whose positive the index holds (all with ``take_all``);
    returns the others."""
    from mvr.operators.encode.query import EncodedQuery
    from mvr.pipeline.retrieval.searcher import Searcher

    d = config.data
    with Searcher(index_url, modes=("bm25",) if d.negatives_mode == "bm25" else (d.negatives_mode,)) as searcher:
        held = set(searcher.catalog.doc_ids_present([rows[i]["positive_id"] for i in todo]))
        here = [i for i in todo if take_all or rows[i]["positive_id"] in held]
        for start in range(0, len(here), 256):
            part = [rows[i] for i in here[start : start + 256]]
            texts = [r["query"] for r in part]
            queries = [EncodedQuery.text_only(t) for t in texts] if d.negatives_mode == "bm25" else searcher.encode(texts)
            results = searcher.search_encoded_batch(queries, d.negatives_depth, d.negatives_mode)
            picked = [pick_negatives(list(res.ranked.doc_ids), r["positive_id"], d.negatives, rng, d.negatives_skip) for r, res in zip(part, results)]
            docs = searcher.catalog.documents([i for ids in picked for i in ids])
            for r, ids in zip(part, picked):
                r["negatives"] = r["negatives"] + [f"{docs[i]['title']} {docs[i]['text']}" if docs[i]["title"] else docs[i]["text"] for i in ids if i in docs]
    taken = set(here)
    return [i for i in todo if i not in taken]


def build_pairs(data_url: str, config: TrainConfig, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every training pair of a run (module docstring), in a seeded order."""
    kind = data_kind(data_url)
    rows = {"beir-train": beir_train_pairs, "pairs": jsonl_pairs}.get(kind, lambda u: corpus_pairs(u, config))(data_url)
    if not rows:
        raise TrainingDataError(f"{data_url}: no training pairs ({kind}: unsupervised pairs need documents with two sentences or a title)")
    rows = check_overlap(rows, config, log)
    order = np.random.default_rng(config.train.seed).permutation(len(rows))
    rows = [rows[i] for i in order[: config.data.max_pairs]]
    sources: dict[str, int] = {}
    for r in rows:
        sources[r["source"]] = sources.get(r["source"], 0) + 1
    log(f"pairs: {len(rows):,} from {data_url} ({kind}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(sources.items())) + ")")
    if config.data.negatives_from and config.data.negatives:
        mine_negatives(rows, config, log)
    return rows
