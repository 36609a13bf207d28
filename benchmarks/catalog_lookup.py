"""Catalog look-up of a response's documents (``storage.catalog.Catalog.documents``): the
indexed ``doc_id IN (…)`` it asks against the join it replaced, as the catalog grows.

    python benchmarks/catalog_lookup.py [--sizes 5000,5000000] [--lookups 200] [--k 10]

For each size, a catalog-shaped DuckDB table (``passages``: doc_id, passage_idx, title,
300-character text, spans; two passages a document; the ``doc_id`` index ``build_catalog``
creates) in a temporary file; ``--lookups`` random sets of k document ids, each answered both
ways (the same rows, checked); mean ms a look-up, and the scan DuckDB reports for the IN list
(``EXPLAIN ANALYZE``: its type and the row groups it read)."""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import time

import duckdb
import pyarrow as pa

COLUMNS = "doc_id, title, text, char_start, char_end"


def build(path: str, passages: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(path)
    con.execute(
        f"""CREATE TABLE passages AS SELECT 'doc' || (i // 2)::VARCHAR AS doc_id, (i % 2)::INTEGER AS passage_idx, 'title' AS title,
            repeat('x', 300) AS text, 0 AS char_start, 300 AS char_end, i AS passage FROM range({passages}) t(i) ORDER BY passage"""
    )
    con.execute("CREATE INDEX passages_doc ON passages (doc_id)")
    return con


def by_join(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list:
    with con.cursor() as cur:
        cur.register("wanted", pa.table({"doc_id": ids}))
        return cur.execute(f"SELECT {COLUMNS} FROM passages JOIN wanted USING (doc_id) ORDER BY doc_id, passage_idx").fetchall()


def by_in_list(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list:
    """The query ``Catalog.documents`` asks."""
    with con.cursor() as cur:
        return cur.execute(f"SELECT {COLUMNS} FROM passages WHERE doc_id IN ({', '.join('?' * len(ids))}) ORDER BY doc_id, passage_idx", ids).fetchall()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="5000,5000000")
    p.add_argument("--lookups", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    args = p.parse_args()
    print(f"{'passages':>10} {'join ms':>8} {'IN ms':>8} {'ratio':>6}  IN-list scan")
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            con = build(os.path.join(tmp, "catalog.duckdb"), n)
            rng = random.Random(0)
            sets = [[f"doc{rng.randrange(n // 2)}" for _ in range(args.k)] for _ in range(args.lookups)]
            for ids in sets[:5]:
                assert sorted(by_join(con, ids)) == sorted(by_in_list(con, ids))
            ms = {}
            for f in (by_join, by_in_list):
                t0 = time.perf_counter()
                for ids in sets:
                    f(con, ids)
                ms[f.__name__] = (time.perf_counter() - t0) / len(sets) * 1e3
            plan = con.execute(f"EXPLAIN ANALYZE SELECT {COLUMNS} FROM passages WHERE doc_id IN ({', '.join('?' * args.k)})", sets[0]).fetchall()[0][1]
            scan = re.search(r"Type: (Index Scan|Sequential Scan)", plan)  # the table scan under the IN list
            groups = re.search(r"Row Groups Scanned: ([\d ,/]+?)\s*│", plan)
            print(
                f"{n:>10} {ms['by_join']:>8.2f} {ms['by_in_list']:>8.2f} {ms['by_join'] / ms['by_in_list']:>6.2f}  "
                f"{scan.group(1) if scan else '?'}, row groups read {groups.group(1) if groups else '?'}"
            )
            con.close()


if __name__ == "__main__":
    main()
