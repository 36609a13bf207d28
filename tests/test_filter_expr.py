"""The filter language alone (operators/retrieval/filters.py): parsing, validation against typed
columns, compilation to parameterised SQL, limits, and the three-valued reference evaluator.
No Ray, no DuckDB: milliseconds."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from mvr.operators.retrieval import filters as fx
from mvr.operators.retrieval.filters import FilterError, compile_filter

COLUMNS = {"doc_id": "string", "year": "integer", "score": "float", "src": "string", "draft": "boolean", "pub": "date", "extra": "json", "Two Words": "string"}

# (expression, a fragment the error must contain); the malicious and malformed set the issue asks for
BAD = [
    ("x = 1; DROP TABLE passages", "unexpected character ';'"),
    ("year = 1; DROP TABLE passages", "unexpected character ';'"),
    ("' OR 1=1 --", "unterminated string"),
    ("src = '' OR 1=1 --", "unexpected character '-'"),
    ("src = 'a' OR '1'='1'", "expected a column name"),
    ("doc_id = 'x' UNION SELECT * FROM passages", "unexpected character '*'"),
    ("doc_id = 'x' UNION SELECT doc_id FROM passages", "unexpected name 'UNION'"),
    ("year = 1 --", "unexpected character '-'"),
    ("year = 1 /* comment */", "unexpected character '/'"),
    ("nope = 1", "unknown column 'nope'"),
    ("passages.doc_id = 'x'", "unexpected character '.'"),
    ("year = '2010'", "type mismatch: column 'year' is integer"),
    ("src > 3", "type mismatch: column 'src' is string"),
    ("pub > '2020-01-01'", "type mismatch: column 'pub' is date"),
    ("draft = 1", "type mismatch: column 'draft' is boolean"),
    ("extra = 'x'", "nested JSON values"),
    ("(" * 100 + "draft" + ")" * 100, "nested more than 32 levels"),
    ("NOT " * 50 + "draft", "nested more than 32 levels"),
    ("year IN (" + ",".join(["1"] * 2000) + ")", "at most 1024 values"),
    ("year IN (" + ",".join(str(i) for i in range(100_000)) + ")", "characters; at most 8192"),
    ("src = 'abc", "unterminated string"),
    ('"src = 1', "unterminated quoted column name"),
    ("\x00\x01\x02", "unexpected character '\\x00'"),
    ("year = 1 \ud800", "unexpected character '\\ud800'"),
    ("src = 'a\ud800'", "not valid Unicode text: a lone surrogate (U+D800) at character 9"),
    ("src IN ('a', '\udfff')", "not valid Unicode text: a lone surrogate (U+DFFF) at character 15"),
    ("ÿþ\x1b[31m", "unexpected character"),
    ("year = NULL", "write column IS NULL"),
    ("year = 99999999999999999999", "outside the 64-bit range"),
    ("score > 1e999", "out of range"),
    ("pub = DATE '2020-02-30'", "is not a date"),
    ("pub = DATE 'yesterday'", "is not YYYY-MM-DD"),
    ("", "the expression is empty"),
    ("year >", "expected a value"),
    ("year = 1 year = 2", "missing AND / OR"),
    ("year BETWEEN 1 OR 2", "expected AND in BETWEEN"),
    ("year IS 1", "expected NULL after IS"),
    ("year", "is integer, not boolean"),
    ("draft < true", "only = and != compare it"),
    ('src = "a"', "a string takes single quotes"),
    ("(year = 1", "expected ')'"),
    ("year = 1)", "unexpected ')'"),
]


@pytest.mark.parametrize("expr, fragment", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_malicious_and_malformed_filters_are_filter_errors_naming_the_problem(expr, fragment):
    with pytest.raises(FilterError) as e:
        compile_filter(expr, COLUMNS)
    assert isinstance(e.value, ValueError)
    assert fragment in str(e.value), str(e.value)
    assert str(e.value).startswith("filter: ")
    assert len(str(e.value)) < 400  # an excerpt, never the whole input


def test_errors_name_the_position():
    with pytest.raises(FilterError) as e:
        compile_filter("year >= 2010 AND src = 5", COLUMNS)
    assert e.value.position == 24 and str(e.value).endswith("at character 24")
    with pytest.raises(FilterError) as e:
        compile_filter("year >= 2010 AND nope = 5", COLUMNS)
    assert e.value.position == 18


LITERAL = re.compile(r"'|\d")


@pytest.mark.parametrize(
    "expr, sql, params",
    [
        ("year >= 2010", '("year" >= ?)', (2010,)),
        ("year != 3", '("year" <> ?)', (3,)),
        ("year <> 3", '("year" <> ?)', (3,)),
        ("score > -1.5e3", '("score" > ?)', (-1500.0,)),
        ("score <= 2", '("score" <= ?)', (2,)),
        ("year < 2.5", '("year" < ?)', (2.5,)),
        ("src IN ('a', 'b''c')", '("src" IN (?, ?))', ("a", "b'c")),
        ("src NOT IN ('x')", '("src" NOT IN (?))', ("x",)),
        ("year BETWEEN 1 AND 9", '("year" BETWEEN ? AND ?)', (1, 9)),
        ("year NOT BETWEEN 1 AND 9", '("year" NOT BETWEEN ? AND ?)', (1, 9)),
        ("pub >= DATE '2020-01-31'", '("pub" >= ?)', (dt.date(2020, 1, 31),)),
        ("extra IS NULL", '("extra" IS NULL)', ()),
        ("extra is not null", '("extra" IS NOT NULL)', ()),
        ("draft", '("draft" = ?)', (True,)),
        ("not draft", '(NOT ("draft" = ?))', (True,)),
        ("draft = FALSE", '("draft" = ?)', (False,)),
        ("\"Two Words\" = 'x'", '("Two Words" = ?)', ("x",)),
        ("YEAR = 1", '("year" = ?)', (1,)),
        ("doc_id IN ('1; DROP TABLE passages', '\" OR 1=1')", '("doc_id" IN (?, ?))', ("1; DROP TABLE passages", '" OR 1=1')),
        (
            "year >= 2010 and (src = 'a' or not draft) and score is not null",
            '(("year" >= ?) AND (("src" = ?) OR (NOT ("draft" = ?))) AND ("score" IS NOT NULL))',
            (2010, "a", True),
        ),
        ("a_1 = 1 OR a_1 = 2 OR a_1 = 3", '(("a_1" = ?) OR ("a_1" = ?) OR ("a_1" = ?))', (1, 2, 3)),
    ],
)
def test_compiles_to_quoted_columns_and_parameters_only(expr, sql, params):
    cols = {**COLUMNS, "a_1": "integer"}
    c = compile_filter(expr, cols)
    assert c.sql == sql and c.params == params
    assert not LITERAL.search(c.sql.replace('"a_1"', "")), c.sql  # no literal in the SQL text
    assert c.sql.count("?") == len(c.params)


def test_and_or_chains_are_flat_so_long_expressions_need_no_recursion():
    expr = " AND ".join(f"year != {i}" for i in range(500))
    c = compile_filter(expr, COLUMNS)
    assert len(c.params) == 500 and c.sql.count("AND") == 499


def test_parameter_limit():
    expr = " OR ".join(f"year IN ({','.join(['1'] * 5)})" for _ in range(900))
    with pytest.raises(FilterError, match="characters|literals"):
        compile_filter(expr, COLUMNS)


def test_not_a_string():
    with pytest.raises(FilterError, match="must be a string"):
        compile_filter(b"year = 1", COLUMNS)


def test_doc_ids_filter_checks():
    assert fx.check_doc_ids(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(FilterError, match="list of document ids"):
        fx.check_doc_ids("a")
    with pytest.raises(FilterError, match=r"doc_ids\[1\] is int"):
        fx.check_doc_ids(["a", 1])
    with pytest.raises(FilterError, match="at most 10000"):
        fx.check_doc_ids([str(i) for i in range(fx.MAX_DOC_IDS + 1)])
    with pytest.raises(fx.FilterError, match=r"doc_ids\[1\] is not valid Unicode text: a lone surrogate U\+D800 at character 2"):
        fx.check_doc_ids(["ok", "id\ud800"])
