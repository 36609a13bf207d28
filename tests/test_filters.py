"""Metadata filters end to end on a metadata-carrying copy of msmarco-sample (the
``msmarco_meta_index`` fixture: every document's metadata computed from itself, FAISS IVFPQ
P = 2 over every vector kind, BM25): the catalog's allowed documents equal a brute-force
filter over the corpus file read here with plain Python; exact filtered search returns the
top-10 of the unfiltered exact scores restricted to the allowed documents; ANN filtered search
returns only allowed documents and k of them whenever k exist, selective (~1 %) and broad
(~50 %) filters alike; malicious and malformed filters are refused (FilterError in process,
4xx over HTTP, one error line from the CLI) without ever reaching DuckDB as text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from conftest import serve_config
from helpers import read_jsonl
from mvr.operators.retrieval.filters import FilterError
from mvr.operators.retrieval.ranking import top_documents
from mvr.pipeline.config import SearchConfig
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.catalog import Catalog
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import load_manifest
from mvr.storage.partitions import exact_partition

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]

# (expression, the same condition in plain Python over a document's metadata dict)
FILTERS = [
    ("bucket = 7", lambda m: m["bucket"] == 7),  # ~1 %
    ("year < 2005", lambda m: m["year"] < 2005),  # ~50 %
    ("topic IN ('alpha', 'beta') AND has_digit", lambda m: m["topic"] in ("alpha", "beta") and m["has_digit"]),
    ("rating IS NULL OR published >= DATE '2015-01-01'", lambda m: m["rating"] is None or m["published"] >= "2015-01-01"),
    ("NOT (score BETWEEN 10 AND 90) AND length > 200", lambda m: not (10 <= m["score"] <= 90) and m["length"] > 200),
    (
        "tags IS NOT NULL AND year NOT IN (1990, 1991, 1992) AND rating != 3",
        lambda m: m["year"] not in (1990, 1991, 1992) and m["rating"] is not None and m["rating"] != 3,
    ),
    ("bucket < 2 AND NOT has_digit", lambda m: m["bucket"] < 2 and not m["has_digit"]),  # < 1 %
]
N_QUERIES = 20
MODES = ("maxsim", "pooled")


def corpus_documents(path: str) -> dict[str, dict]:
    """{doc_id: metadata} of the corpus file, read with json alone; rows whose metadata the
    index must reject (tests/metadata_corpus.py's BAD_ROWS) left out."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if not d["_id"].startswith("bad-"):
                out[d["_id"]] = d["metadata"]
    return out


@pytest.fixture(scope="module")
def meta(msmarco_meta_index, datasets):
    index = msmarco_meta_index["index"]
    docs = corpus_documents(msmarco_meta_index["corpus"])
    queries = list(read_jsonl(datasets / "msmarco-sample" / "queries.jsonl"))[:N_QUERIES]
    ann = Searcher(index, modes=MODES + ("bm25", "hybrid"))
    exact = Searcher(index, modes=MODES, config=SearchConfig(exact=True), encoder=ann.query_encoder.encoder)
    m = load_manifest(index)
    codecs = load_codecs(index, m.codecs)
    full = {}  # unfiltered exact scores of every passage, per mode and query
    encoded = {q["_id"]: ann.encode([q["text"]])[0] for q in queries}
    for mode, kind in (("maxsim", "tokens"), ("pooled", "pooled")):
        part = exact_partition(index, m, kind, codecs)
        full[mode] = {qid: (part.rescore(mode, e), part.doc_ids, part.passage_idx) for qid, e in encoded.items()}
    yield {"index": index, "docs": docs, "queries": queries, "ann": ann, "exact": exact, "full": full, "encoded": encoded}
    ann.close()
    exact.close()


def allowed_docs(docs: dict[str, dict], predicate) -> set[str]:
    return {d for d, m in docs.items() if predicate(m)}


def test_every_row_is_indexed_or_rejected_with_its_metadata_reason(msmarco_meta_index):
    from metadata_corpus import BAD_ROWS

    catalog = Catalog(msmarco_meta_index["index"])
    try:
        rejects = dict(catalog.con.execute("SELECT doc_id, reason FROM rejects").fetchall())
        assert set(rejects) == {r["_id"] for r, _ in BAD_ROWS}
        for row, reason in BAD_ROWS:
            assert rejects[row["_id"]].startswith(reason), rejects[row["_id"]]
        assert catalog.totals()["documents"] == len(msmarco_meta_index["docs"])
        types = catalog.filter_columns()
        assert types == {
            "doc_id": "string",
            "bucket": "integer",
            "has_digit": "boolean",
            "length": "integer",
            "published": "date",
            "rating": "integer",
            "score": "float",
            "tags": "json",
            "topic": "string",
            "year": "integer",
        }
        # passage numbers: the shards in manifest order, rows in shard order
        m = load_manifest(msmarco_meta_index["index"])
        numbers = catalog.con.execute("SELECT passage FROM passages ORDER BY passage").fetchnumpy()["passage"]
        np.testing.assert_array_equal(numbers, np.arange(int(m.counts["passages"])))
    finally:
        catalog.close()


@pytest.mark.parametrize("expr, predicate", FILTERS, ids=[f[0] for f in FILTERS])
def test_catalog_selects_what_a_brute_force_filter_over_the_corpus_selects(meta, expr, predicate):
    catalog = meta["ann"].catalog
    want = allowed_docs(meta["docs"], predicate)
    assert want, expr
    assert set(catalog.filter_doc_ids(expr)) == want
    passages = catalog.allowed_passages(expr)
    assert np.all(np.diff(passages) > 0)
    in_docs = {d for (d,) in catalog.con.execute("SELECT doc_id FROM passages WHERE passage IN (SELECT unnest(?))", [passages.tolist()]).fetchall()}
    assert in_docs == want


def restricted_top10(full, qid: str, allowed: set[str]) -> list[tuple[str, float]]:
    scores, doc_ids, pidx = full[qid]
    keep = np.array([d in allowed for d in doc_ids])
    s = np.where(keep, scores, -np.inf)
    ranked = top_documents(s, doc_ids, pidx, 10)
    return [(d, float(x)) for d, x in zip(ranked.doc_ids, ranked.scores) if np.isfinite(x)]


def same_top10(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    """Same scores rank by rank, and the same documents above any tie at the cut."""
    assert len(a) == len(b)
    np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-4)
    if a:
        last = a[-1][1]
        assert {d for d, s in a if s > last + 1e-4} == {d for d, s in b if s > last + 1e-4}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("expr, predicate", FILTERS, ids=[f[0] for f in FILTERS])
def test_filtered_search_equals_the_restricted_exact_ranking_and_ann_keeps_k(meta, mode, expr, predicate):
    allowed = allowed_docs(meta["docs"], predicate)
    k = 10
    overlaps = []
    # the queries encoded once (the fixture's), searched together: the filter's restriction as
    # ``search(filter=…)`` makes it; exact answers all of them in one pass over the vectors
    encoded = [meta["encoded"][q["_id"]] for q in meta["queries"]]
    exact = meta["exact"].search_encoded_batch(encoded, k, mode, restriction=meta["exact"].restriction(expr))
    knob_sets = ({}, {"candidate_cap": 20})  # default; and a cap that sends even ~1 % filters down the ANN path
    ann = [meta["ann"].search_encoded_batch(encoded, k, mode, restriction=meta["ann"].restriction(expr), **knobs) for knobs in knob_sets]
    for i, q in enumerate(meta["queries"]):
        ex = exact[i]
        assert ex.path == "exact" and ex.allowed_passages >= len(allowed)
        got = ex.hits()
        assert {d for d, _ in got} <= allowed
        same_top10(got, restricted_top10(meta["full"][mode], q["_id"], allowed))
        for knobs, answers in zip(knob_sets, ann):
            an = answers[i]
            assert {d for d in an.ranked.doc_ids} <= allowed, (expr, knobs)
            assert len(an.ranked) == min(k, len(allowed)), (expr, knobs, an.path, len(an.ranked))
            if knobs or an.allowed_passages > 1000:  # ANN, or exact when it found fewer than k
                assert an.path in ("ann", "exact")
            else:  # few allowed passages: straight to exact scoring
                assert an.path == "exact"
                same_top10(an.hits(), got)
            if not knobs:
                overlaps.append(len(set(an.ranked.doc_ids) & {d for d, _ in got}) / max(1, len(got)))
    assert np.mean(overlaps) >= 0.8, (expr, mode, np.mean(overlaps))


def test_doc_ids_filter_and_its_combination_with_an_expression(meta):
    docs = sorted(meta["docs"])
    ids = docs[::250] + ["no-such-document"]
    q = meta["queries"][0]["text"]
    (r,) = meta["ann"].search([q], 10, "maxsim", doc_ids=ids)
    assert set(r.ranked.doc_ids) <= set(ids) and len(r.ranked) == min(10, len(ids) - 1) and r.path == "exact"
    both = {d for d in ids if d in meta["docs"] and meta["docs"][d]["year"] < 2005}
    (r,) = meta["ann"].search([q], 10, "maxsim", filter="year < 2005", doc_ids=ids)
    assert set(r.ranked.doc_ids) == both if len(both) <= 10 else set(r.ranked.doc_ids) <= both
    (r,) = meta["ann"].search([q], 10, "maxsim", doc_ids=[])
    assert len(r.ranked) == 0


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_sparse_and_hybrid_modes_keep_to_the_filter(meta, mode):
    for expr, predicate in FILTERS[:3]:
        allowed = allowed_docs(meta["docs"], predicate)
        for q in meta["queries"][:5]:
            (r,) = meta["ann"].search([q["text"]], 10, mode, filter=expr)
            assert set(r.ranked.doc_ids) <= allowed and len(r.ranked) > 0, (mode, expr)


# -- malicious and malformed filters -----------------------------------------------------

# (filter, a fragment of the message); at least 10, each refused before DuckDB sees anything
BAD_FILTERS = [
    ("x = 1; DROP TABLE passages", "unexpected character ';'"),
    ("year = 2001; DROP TABLE passages; --", "unexpected character ';'"),
    ("' OR 1=1 --", "unterminated string"),
    ("topic = 'alpha' OR '1'='1'", "expected a column name"),
    ("doc_id = 'x' UNION SELECT doc_id FROM passages", "unexpected name 'UNION'"),
    ("passages.text = 'x'", "unexpected character '.'"),
    ("nope = 1", "unknown column 'nope'"),
    ("text = 'hello'", "unknown column 'text'"),  # a passages column, not a filter column
    ("year = '2001'", "type mismatch: column 'year' is integer"),
    ("topic > 3", "type mismatch: column 'topic' is string"),
    ("published > '2020-01-01'", "type mismatch: column 'published' is date"),
    ("tags = 'alpha'", "nested JSON values"),
    ("has_digit < true", "only = and != compare it"),
    ("(" * 200 + "has_digit" + ")" * 200, "nested more than 32 levels"),
    ("year IN (" + ",".join(str(i) for i in range(100_000)) + ")", "at most 8192 are accepted"),
    ("year IN (" + ",".join(["1"] * 2000) + ")", "at most 1024 values"),
    ("topic = 'alpha", "unterminated string"),
    ("\x00\x7f\x1b[2J", "unexpected character"),
    ("year = 1 \ud83d", "unexpected character"),
    ("", "the expression is empty"),
]


class RecordingConnection:
    """The catalog's real DuckDB connection, recording every statement and its parameters."""

    def __init__(self, con) -> None:
        self.con, self.calls = con, []

    def cursor(self):
        return RecordingCursor(self.con.cursor(), self.calls)

    def __getattr__(self, name):
        return getattr(self.con, name)


class RecordingCursor:
    def __init__(self, cur, calls) -> None:
        self.cur, self.calls = cur, calls

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.cur.close()

    def sql(self, query, params=None, **kw):
        self.calls.append((query, list(params or [])))
        return self.cur.sql(query, params=params, **kw)

    def execute(self, query, params=None):
        self.calls.append((query, list(params or [])))
        return self.cur.execute(query, params) if params is not None else self.cur.execute(query)

    def __getattr__(self, name):
        return getattr(self.cur, name)


def test_bad_filters_are_filter_errors_and_never_reach_duckdb(msmarco_meta_index):
    catalog = Catalog(msmarco_meta_index["index"])
    rec = RecordingConnection(catalog.con)
    catalog.con = rec
    try:
        catalog.filter_columns()  # the column list is read once, before any filter
        rec.calls.clear()
        for expr, fragment in BAD_FILTERS:
            with pytest.raises(FilterError) as e:
                catalog.allowed_passages(expr)
            assert fragment in str(e.value), (expr[:40], str(e.value))
        assert rec.calls == []  # nothing was sent to DuckDB
        # a valid filter full of SQL-looking values: they travel as parameters only
        expr = "doc_id IN ('x''; DROP TABLE passages; --', '\" OR 1=1') OR topic = 'alpha' AND year >= 2001"
        assert len(catalog.allowed_passages(expr))
        ((sql, params),) = [c for c in rec.calls if "chosen" in c[0]]  # the filter's one statement
        assert all(not p for q, p in rec.calls if "chosen" not in q)  # the others: the catalog's own, no input
        assert "DROP" not in sql and "1=1" not in sql and "alpha" not in sql and "2001" not in sql
        assert params == ["x'; DROP TABLE passages; --", '" OR 1=1', "alpha", 2001]
        assert sql.count("?") == len(params)
        assert catalog.con.execute("SELECT count(*) FROM passages").fetchone()[0] > 0  # still there
    finally:
        catalog.con = rec.con
        catalog.close()


def test_cli_refuses_a_bad_filter_with_one_error_line(msmarco_meta_index):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args, fragment in (
        (["search", msmarco_meta_index["index"], "a query", "--filter", "year = 'x'"], "type mismatch"),
        (["search", msmarco_meta_index["index"], "a query", "--filter", "1; DROP TABLE passages"], "unexpected character ';'"),
        (["eval", msmarco_meta_index["index"], "--dataset", "unused", "--filter", "nope IS NULL"], "unknown column 'nope'"),
    ):
        p = subprocess.run([sys.executable, "-m", "mvr.jobs.cli", *args], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 2, p.stderr
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert lines == [lines[-1]] and lines[-1].startswith("error: filter: ") and fragment in lines[-1], p.stderr


def test_cli_eval_with_a_filter(msmarco_meta_index, datasets, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "eval.json"
    cmd = [
        sys.executable,
        "-m",
        "mvr.jobs.cli",
        "eval",
        msmarco_meta_index["index"],
        "--dataset",
        str(datasets / "msmarco-sample"),
        "--modes",
        "maxsim",
        "-k",
        "10",
        "--no-overlap",
        "--filter",
        "year < 2005",
        "--json",
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    body = json.loads(out.read_text())
    assert body["filter"] == "year < 2005" and body["allowed_passages"] > 1000
    assert 0 < body["modes"]["maxsim"]["nDCG@10"] < 1


# -- the service ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(msmarco_meta_index, serve_port):
    from ray import serve

    from mvr.pipeline.serving.app import deploy, shutdown

    # the partitions in the ingress, and two trips to them here (test_serve.py serves the
    # defaults: partition deployments, one trip)
    config = serve_config(serve_port, "t-filters", one_trip_max_partitions=0, partition={"placement": "ingress"})
    d = deploy(msmarco_meta_index["index"], config, log=print)
    assert d.index_app is None and not any(a.startswith("t-filters-index") for a in serve.status().applications)
    yield d.url
    shutdown(config)


def test_service_filters_equal_the_search_core(meta, service):
    for expr, predicate in FILTERS[:4]:
        allowed = allowed_docs(meta["docs"], predicate)
        for q in meta["queries"][:5]:
            r = requests.post(f"{service}/search", json={"query": q["text"], "k": 10, "mode": "maxsim", "filter": expr}, timeout=120)
            assert r.status_code == 200, r.text
            body = r.json()
            (local,) = meta["ann"].search([q["text"]], 10, "maxsim", filter=expr)
            assert [x["doc_id"] for x in body["results"]] == local.ranked.doc_ids and body["path"] == local.path
            assert {x["doc_id"] for x in body["results"]} <= allowed and body["allowed_passages"] == local.allowed_passages
    r = requests.post(f"{service}/search/batch", json={"queries": [q["text"] for q in meta["queries"][:3]], "k": 5, "filter": "bucket = 7"}, timeout=120)
    assert r.status_code == 200, r.text
    allowed = allowed_docs(meta["docs"], FILTERS[0][1])
    assert all({x["doc_id"] for x in b["results"]} <= allowed and len(b["results"]) == 5 for b in r.json()["responses"])
    ids = sorted(meta["docs"])[:3]
    r = requests.post(f"{service}/search", json={"query": "temperature", "k": 10, "doc_ids": ids + ["missing"]}, timeout=120)
    assert r.status_code == 200 and {x["doc_id"] for x in r.json()["results"]} == set(ids)


@pytest.mark.parametrize("expr, fragment", BAD_FILTERS, ids=[f"bad{i}" for i in range(len(BAD_FILTERS))])
def test_service_answers_bad_filters_with_4xx_naming_the_problem(service, expr, fragment):
    for path, body in (("/search", {"query": "what is the temperature", "filter": expr}), ("/search/batch", {"queries": ["a", "b"], "filter": expr})):
        r = requests.post(service + path, json=body, timeout=120)
        assert 400 <= r.status_code < 500, (expr[:40], r.status_code, r.text[:300])
        assert fragment in r.text or r.status_code == 413, (expr[:40], r.text[:300])
        assert len(r.content) < 5000  # an excerpt of the input at most


def test_service_refuses_malformed_doc_ids(service):
    for doc_ids in ("abc", [1, 2], [None], {"a": 1}, ["x"] * 10_001):
        r = requests.post(f"{service}/search", json={"query": "q", "doc_ids": doc_ids}, timeout=120)
        assert r.status_code == 422, (str(doc_ids)[:40], r.status_code, r.text[:200])
    r = requests.post(f"{service}/search", json={"query": "q", "filter": 5}, timeout=120)
    assert r.status_code == 422
    r = requests.get(f"{service}/health", timeout=60)  # still serving
    assert r.status_code == 200 and r.json()["partitions"] == 2


def test_service_with_the_partitions_in_the_ingress_answers_every_mode_as_the_search_core(meta, service):
    for mode in MODES + ("bm25", "hybrid"):
        for q in meta["queries"][:3]:
            for expr in (None, FILTERS[1][0]):
                r = requests.post(f"{service}/search", json={"query": q["text"], "k": 10, "mode": mode, "filter": expr}, timeout=120)
                assert r.status_code == 200 and not r.json()["degraded"], r.text
                (local,) = meta["ann"].search([q["text"]], 10, mode, filter=expr)
                assert [x["doc_id"] for x in r.json()["results"]] == local.ranked.doc_ids, (mode, expr)
    stats = requests.get(f"{service}/stats", timeout=60).json()
    assert stats["partitions_answering"] == [0, 1] and stats["fanout"]["trips"] == stats["fanout"]["calls"] > 0
    assert stats["config"]["partition"]["placement"] == "ingress"
