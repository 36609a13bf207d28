"""DuckDB over the index: duplicate-id detection across blocks, the rejects file, and the
catalog (``catalog.duckdb``: passages without vectors, documents with their metadata as typed
columns, rejects) for lookups, stats and metadata filters (docs/filters.md)."""

from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Any, Optional, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.operators.retrieval.filters import CompiledFilter, check_doc_ids, compile_filter, quote_identifier
from mvr.storage import fs, local_cache
from mvr.storage.corpus import InputBlock
from mvr.storage.staging import duplicates_url, raw_rows, scan_urls, write_duplicates

CATALOG_FILE = "catalog.duckdb"
REJECTS_FILE = "rejects.parquet"


def connect(url: str, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that can read ``url``'s filesystem (fsspec registered if remote)."""
    con = duckdb.connect(database)
    if not fs.is_local(url):
        con.register_filesystem(fs.resolve(url)[0])
    return con


def _one(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of an aggregate query's ``result`` (it always has one)."""
    row = result.fetchone()
    assert row is not None
    return row


def _arrow(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run ``sql`` and fetch an Arrow table (DuckDB 1.x and 2.x spell this differently)."""
    rel = con.sql(sql)
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _arrow_params(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any]) -> pa.Table:
    """Run ``sql`` with ``?`` parameters bound to ``params`` and fetch an Arrow table."""
    rel = con.sql(sql, params=list(params))
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _list(urls: Sequence[str]) -> str:
    return "[" + ", ".join("'" + u.replace("'", "''") + "'" for u in urls) + "]"


def find_duplicates(index_url: str, blocks: Sequence[InputBlock]) -> int:
    """Rows whose id appeared earlier in input order (first one wins) → duplicates file.
    Returns how many rows are duplicates."""
    con = connect(index_url)
    table = _arrow(
        con,
        f"""
        WITH valid AS (
            SELECT block_id, row_index, doc_id FROM read_parquet({_list(scan_urls(index_url, blocks))})
            WHERE reason IS NULL),
        ranked AS (
            SELECT *, first_value(block_id) OVER w AS first_block, first_value(row_index) OVER w AS first_row,
                   row_number() OVER w AS rn
            FROM valid WINDOW w AS (PARTITION BY doc_id ORDER BY block_id, row_index))
        SELECT block_id, row_index::INTEGER AS row_index, doc_id,
               'duplicate id: first seen in block ' || first_block || ' row ' || first_row AS reason
        FROM ranked WHERE rn > 1 ORDER BY block_id, row_index
        """,
    )
    write_duplicates(index_url, table)
    return table.num_rows


def write_rejects(index_url: str, blocks: Sequence[InputBlock]) -> int:
    """All rejected rows (validation + duplicates) → ``rejects.parquet`` with the source file,
    the 1-based line (or row) number in that file, the id if any, and the reason."""
    firsts: list[tuple[str, str, int]] = []
    line_base: dict[str, int] = {}
    for b in blocks:
        line_base.setdefault(b.url, 0)
        firsts.append((b.block_id, b.url, line_base[b.url]))
        line_base[b.url] += raw_rows(index_url, b.block_id)
    con = connect(index_url)
    con.register("block_lines", pa.table({"block_id": [f[0] for f in firsts], "source": [f[1] for f in firsts], "base": [f[2] for f in firsts]}))
    table = _arrow(
        con,
        f"""
        WITH r AS (
            SELECT block_id, row_index, doc_id, reason FROM read_parquet({_list(scan_urls(index_url, blocks))}) WHERE reason IS NOT NULL
            UNION ALL
            SELECT block_id, row_index, doc_id, reason FROM read_parquet({_list([duplicates_url(index_url)])}))
        SELECT l.source, (l.base + r.row_index + 1)::BIGINT AS line, r.block_id, r.row_index, r.doc_id, r.reason
        FROM r JOIN block_lines l USING (block_id) ORDER BY l.source, line
        """,
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    fs.write_bytes_atomic(fs.join(index_url, REJECTS_FILE), buf.getvalue())
    return table.num_rows


def scan_counts(index_url: str, blocks: Sequence[InputBlock]) -> dict:
    """Input rows, valid rows and duplicates over the staging scan results."""
    con = connect(index_url)
    rows, valid = _one(con.execute(f"SELECT count(*), count(*) FILTER (WHERE reason IS NULL) FROM read_parquet({_list(scan_urls(index_url, blocks))})"))
    (dups,) = _one(con.execute(f"SELECT count(*) FROM read_parquet({_list([duplicates_url(index_url)])})"))
    return {"input_rows": int(rows), "valid_rows": int(valid), "duplicates": int(dups)}


def build_catalog(
    index_url: str,
    shard_paths: Sequence[str],
    shard_rows: Optional[Sequence[int] | np.ndarray] = None,
    dead: Optional[np.ndarray] = None,
    out: str = CATALOG_FILE,
) -> dict:
    """Write ``catalog.duckdb`` (tables passages, documents, rejects) and return the counts it
    reconciles: passages, documents, tokens, distinct (block, seq) and (block, row) keys.
    ``passages.passage`` is each passage's global number: the shards in ``shard_paths``'
    order (the manifest's), rows in shard order; ``shard_rows``, the shards' passage counts
    when known, saves reading the shards' footers. ``dead``: deleted passages' global numbers
    (the version's tombstones), left out of the catalog. ``out``: the file, relative to the
    index (a version of a live index has its own, ``catalogs/``). ``documents``: one row a
    live document, ``doc_id`` and one typed column a top-level metadata key
    (``build_documents``)."""
    urls = [fs.join(index_url, p) for p in shard_paths]
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, CATALOG_FILE)
        con = connect(index_url, local)
        cols = "doc_id, passage_idx, block_id, row_index, seq, title, text, char_start, char_end, n_tokens, filename AS shard"
        if urls:
            # passage: the global passage number (shards in the given, manifest order; rows in shard order)
            rows = np.asarray(shard_rows if shard_rows is not None else [_parquet_rows(u) for u in urls], np.int64)
            first = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
            con.register("shard_order", pa.table({"shard_url": urls, "first_passage": first}))
            # shards written before the metadata column have none: read by name, null there
            names = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({_list(urls)}, union_by_name=true)").fetchall()}
            meta = "p.metadata" if "metadata" in names else "NULL::VARCHAR"
            con.execute(
                f"""CREATE TABLE passages AS SELECT {cols.replace("filename AS shard", "p.filename AS shard")},
                    (o.first_passage + p.file_row_number)::BIGINT AS passage, {meta} AS metadata
                    FROM read_parquet({_list(urls)}, filename=true, file_row_number=true, union_by_name=true) p
                    JOIN shard_order o ON p.filename = o.shard_url
                    ORDER BY passage"""
            )
            if dead is not None and len(dead):
                con.register("dead", pa.table({"passage": np.asarray(dead, np.int64)}))
                con.execute("DELETE FROM passages WHERE passage IN (SELECT passage FROM dead)")
                con.unregister("dead")
            con.unregister("shard_order")
        else:
            con.execute(
                "CREATE TABLE passages (doc_id VARCHAR, passage_idx INTEGER, block_id VARCHAR, row_index INTEGER, seq INTEGER,"
                " title VARCHAR, text VARCHAR, char_start INTEGER, char_end INTEGER, n_tokens INTEGER, shard VARCHAR, passage BIGINT,"
                " metadata VARCHAR)"
            )
        build_documents(con)
        con.execute("ALTER TABLE passages DROP COLUMN metadata")
        con.execute(f"CREATE TABLE rejects AS SELECT * FROM read_parquet({_list([fs.join(index_url, REJECTS_FILE)])})")
        counts = _one(
            con.execute(
                """SELECT count(*), count(DISTINCT doc_id), coalesce(sum(n_tokens), 0),
                      count(DISTINCT (block_id, seq)), count(DISTINCT (block_id, row_index)) FROM passages"""
            )
        )
        con.execute("CREATE INDEX passages_doc ON passages (doc_id)")
        con.close()
        with open(local, "rb") as f:
            fs.write_bytes_atomic(fs.join(index_url, out), f.read())
    keys = ("passages", "documents", "tokens", "distinct_passage_keys", "distinct_document_keys")
    return dict(zip(keys, (int(c) for c in counts)))


# metadata → typed columns (docs/filters.md, "Types")
MAX_METADATA_COLUMNS = 1024
_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
# DuckDB column type → filter type (operators/retrieval/filters.py TYPES)
FILTER_TYPES = {"BIGINT": "integer", "DOUBLE": "float", "VARCHAR": "string", "BOOLEAN": "boolean", "DATE": "date", "JSON": "json"}
_DATE = r"\d{4}-\d{2}-\d{2}"


def metadata_columns(structure: dict[str, Any]) -> dict[str, str]:
    """{key: DuckDB type} of the documents table's metadata columns, from the merged JSON
    structure of every document's metadata (DuckDB's ``json_group_structure``): integers
    BIGINT, numbers with a fraction (or integers mixed with them) DOUBLE, text VARCHAR,
    booleans BOOLEAN; objects, arrays, values of mixed types and keys that are only ever null
    JSON. A key named ``doc_id`` (any case) is not a column (the document id is), and of keys
    equal but for case (DuckDB's names are case-insensitive) the first in sorted order is."""
    out: dict[str, str] = {}
    seen = {"doc_id"}
    for key in sorted(structure):
        if key.lower() in seen or len(out) >= MAX_METADATA_COLUMNS:
            continue
        seen.add(key.lower())
        t = structure[key]
        if isinstance(t, str) and t in _INTEGER_TYPES:
            out[key] = "BIGINT"
        elif t in ("DOUBLE", "FLOAT", "VARCHAR", "BOOLEAN"):
            out[key] = "DOUBLE" if t == "FLOAT" else t
        else:
            out[key] = "JSON"
    return out


def build_documents(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Create the ``documents`` table from ``passages`` (with its ``metadata`` JSON column):
    one row a document (its metadata from its first passage), ``doc_id`` and the
    ``metadata_columns``; a text column whose every value is an ISO date (YYYY-MM-DD) becomes
    DATE. Returns {column: filter type}."""
    con.execute("CREATE TEMP TABLE doc_meta AS SELECT doc_id, arg_min(metadata, passage) AS metadata FROM passages GROUP BY doc_id")
    (structure,) = _one(con.execute("SELECT json_group_structure(metadata::JSON) FROM doc_meta WHERE metadata IS NOT NULL"))
    parsed = json.loads(structure) if structure else {}
    columns = metadata_columns(parsed if isinstance(parsed, dict) else {})
    if columns:
        con.execute("CREATE TABLE documents AS SELECT doc_id, unnest(json_transform(metadata::JSON, ?)) FROM doc_meta ORDER BY doc_id", [json.dumps(columns)])
        for key, t in columns.items():
            if t != "VARCHAR":
                continue
            q = quote_identifier(key)
            n, all_dates = _one(
                con.execute(
                    f"SELECT count({q}), bool_and({q} IS NULL OR (regexp_full_match({q}, '{_DATE}') AND TRY_CAST({q} AS DATE) IS NOT NULL)) FROM documents"
                )
            )
            if n and all_dates:
                con.execute(f"ALTER TABLE documents ALTER {q} TYPE DATE USING CAST({q} AS DATE)")
    else:
        con.execute("CREATE TABLE documents AS SELECT doc_id FROM doc_meta ORDER BY doc_id")
    con.execute("DROP TABLE doc_meta")
    con.execute("CREATE INDEX documents_doc ON documents (doc_id)")
    return table_filter_columns(con)


def table_filter_columns(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """{column: filter type} of the ``documents`` table (``{"doc_id": "string"}`` for a catalog
    written before it existed)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "documents" not in tables:
        return {"doc_id": "string"}
    return {name: FILTER_TYPES.get(str(t).upper(), "json") for name, t, *_ in con.execute("DESCRIBE documents").fetchall()}


def _parquet_rows(url: str) -> int:
    with fs.open_file(url) as f:
        return pq.read_metadata(f).num_rows


class Catalog:
    """Read-only view of ``catalog.duckdb`` (a remote index's from the node's cache,
    ``storage/local_cache.py``)."""

    def __init__(self, index_url: str, path: Optional[str] = None) -> None:
        """``path``: the catalog file relative to the index (``Manifest.catalog`` of the
        version being served); default: the latest version's."""
        if path is None:
            from mvr.storage.manifest import read_manifest

            m = read_manifest(index_url)
            path = m.catalog if m is not None else CATALOG_FILE
        url = fs.join(index_url, path)
        if not fs.exists(url):
            raise FileNotFoundError(f"no catalog at {url}: the index was not committed")
        # a remote index's catalog: this node's cached copy (shared by its processes, fetched once)
        self.con = duckdb.connect(local_cache.local_copy(url), read_only=True)
        self._columns: Optional[dict[str, str]] = None

    def filter_columns(self) -> dict[str, str]:
        """{column: filter type} a filter may name: ``doc_id`` and the metadata columns."""
        if self._columns is None:
            with self.con.cursor() as cur:
                self._columns = table_filter_columns(cur)
        return dict(self._columns)

    def compile_filter(self, expr: str) -> CompiledFilter:
        """``expr`` parsed, validated against this catalog's columns and compiled
        (``FilterError`` naming the problem)."""
        return compile_filter(expr, self.filter_columns())

    def _documents_source(self) -> str:
        return "documents" if "documents" in self._tables() else "(SELECT DISTINCT doc_id FROM passages)"

    def _tables(self) -> set[str]:
        with self.con.cursor() as cur:
            return {r[0] for r in cur.execute("SELECT table_name FROM information_schema.tables").fetchall()}

    def _select(self, what: str, where: Optional[CompiledFilter], doc_ids: Optional[Sequence[str]], order: str) -> pa.Table:
        """``SELECT {what}`` over the passages of the documents that pass ``where`` and are
        among ``doc_ids`` (each None: no condition). The filter's SQL holds quoted column names
        and ``?`` only; its values go to DuckDB as parameters, ``doc_ids`` as an Arrow table."""
        chosen = f"SELECT doc_id FROM {self._documents_source()}" + (f" WHERE {where.sql}" if where is not None else "")
        join_ids = " JOIN wanted USING (doc_id)" if doc_ids is not None else ""
        sql = f"WITH chosen AS ({chosen}) SELECT {what} FROM passages JOIN chosen USING (doc_id){join_ids} ORDER BY {order}"
        with self.con.cursor() as cur:
            if doc_ids is not None:
                cur.register("wanted", pa.table({"doc_id": pa.array(list(doc_ids), pa.string())}))
            return _arrow_params(cur, sql, list(where.params) if where is not None else [])

    def allowed_passages(self, expr: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> np.ndarray:
        """The global numbers (sorted int64) of this version's passages whose documents pass
        the filter ``expr`` and are among ``doc_ids`` (both given: both hold; ``FilterError``
        for an invalid filter)."""
        where = self.compile_filter(expr) if expr is not None else None
        ids = check_doc_ids(doc_ids) if doc_ids is not None else None
        t = self._select("passage", where, ids, "passage")
        return t["passage"].to_numpy().astype(np.int64, copy=False)

    def filter_doc_ids(self, expr: str) -> list[str]:
        """The ids of this version's documents that pass the filter ``expr`` (sorted)."""
        where = self.compile_filter(expr)
        t = self._select("DISTINCT doc_id", where, None, "doc_id")
        return t["doc_id"].to_pylist()

    def passages_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The global passage numbers (sorted int64) of the documents ``doc_ids`` that this
        catalog's version holds (deleted ones are not in it)."""
        if not len(doc_ids):
            return np.zeros(0, np.int64)
        with self.con.cursor() as cur:
            cur.register("wanted", pa.table({"doc_id": pa.array(list(doc_ids), pa.string())}))
            t = _arrow(cur, "SELECT passage FROM passages JOIN wanted USING (doc_id) ORDER BY passage")
        return t["passage"].to_numpy().astype(np.int64, copy=False)

    def doc_ids_present(self, doc_ids: Sequence[str]) -> list[str]:
        """Those of ``doc_ids`` this catalog's version holds."""
        if not len(doc_ids):
            return []
        with self.con.cursor() as cur:
            cur.register("wanted", pa.table({"doc_id": pa.array(list(doc_ids), pa.string())}))
            return [r[0] for r in cur.execute("SELECT DISTINCT doc_id FROM passages JOIN wanted USING (doc_id) ORDER BY doc_id").fetchall()]

    def rejects_by_reason(self) -> list[tuple[str, int]]:
        return self.con.execute("SELECT split_part(reason, ':', 1) AS kind, count(*) FROM rejects GROUP BY kind ORDER BY 2 DESC, 1").fetchall()

    def totals(self) -> dict:
        ((p, d, t),) = self.con.execute("SELECT count(*), count(DISTINCT doc_id), coalesce(sum(n_tokens), 0) FROM passages").fetchall()
        return {"passages": int(p), "documents": int(d), "tokens": int(t)}

    def documents(self, doc_ids: Sequence[str]) -> dict[str, dict]:
        """doc_id → {title, text}: the document text rebuilt from its passages' spans
        (overlaps removed, the title prefix the passages carry taken off)."""
        if not doc_ids:
            return {}
        wanted = list(dict.fromkeys(doc_ids))
        with self.con.cursor() as cur:  # a cursor per call: callers may overlap (the Serve ingress)
            # an IN list is answered from the doc_id index (a join is planned as a scan of the table)
            rows = cur.execute(
                f"""SELECT doc_id, title, text, char_start, char_end FROM passages WHERE doc_id IN ({", ".join("?" * len(wanted))})
                    ORDER BY doc_id, passage_idx""",
                wanted,
            ).fetchall()
        out: dict[str, dict] = {}
        for doc_id, title, text, start, end in rows:
            doc = out.setdefault(doc_id, {"title": title, "text": "", "_end": 0})
            doc["text"] += text[max(doc["_end"] - start, 0) :]
            doc["_end"] = max(doc["_end"], end)
        for doc in out.values():
            del doc["_end"]
            if doc["title"] and doc["text"].startswith(doc["title"]):
                doc["text"] = doc["text"][len(doc["title"]) :].lstrip()
        return out

    def close(self) -> None:
        self.con.close()
