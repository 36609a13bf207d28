"""The metadata filter language (docs/filters.md): tokenizer, recursive-descent parser, a
tree, validation against the catalog's columns and types, and compilation to a SQL
``WHERE`` clause with ``?`` parameters. Pure Python: no Ray, no DuckDB.

    year >= 2010 AND (source IN ('wiki', 'news') OR NOT draft) AND rating IS NOT NULL

Grammar (keywords case-insensitive)::

    expr       := or_expr
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := not_expr ( AND not_expr )*
    not_expr   := NOT not_expr | primary
    primary    := '(' expr ')' | predicate | column            -- a bare boolean column
    predicate  := column op literal                            -- op: = != <> < <= > >=
                | column [NOT] IN '(' literal (',' literal)* ')'
                | column [NOT] BETWEEN literal AND literal
                | column IS [NOT] NULL
    column     := name | "quoted name"                         -- name: [A-Za-z_][A-Za-z0-9_]*
    literal    := 'string' | integer | float | TRUE | FALSE | DATE 'YYYY-MM-DD'

A string doubles its quote to hold one (``'it''s'``), a quoted name likewise (two double
quotes inside a double-quoted name stand for one).

Nothing a user writes reaches SQL as text: a column name is looked up in the validated column
list and written quoted from that list, every literal is a ``?`` parameter. Every error is a
``FilterError`` (a ValueError) naming the problem and the 1-based character position."""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from mvr.operators.encode.validation import lone_surrogate

MAX_FILTER_CHARS = 8192  # characters of one expression
MAX_DEPTH = 32  # nested parentheses and NOTs
MAX_IN_LIST = 1024  # values of one IN list
MAX_PARAMETERS = 4096  # literals in one expression
MAX_DOC_IDS = 10_000  # ids of a doc_ids filter

TYPES = ("integer", "float", "string", "boolean", "date", "json")
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
INT64 = (-(1 << 63), (1 << 63) - 1)


class FilterError(ValueError):
    """An expression that cannot be parsed, names an unknown column, compares a column with a
    literal of another type, or exceeds a limit. ``position``: 1-based character, when known."""

    def __init__(self, message: str, position: Optional[int] = None) -> None:
        self.position = position
        super().__init__(f"filter: {message}" + (f" at character {position}" if position is not None else ""))


# ---------------------------------------------------------------------------------------------
# tokens


@dataclass(frozen=True)
class Token:
    kind: str  # name, qname, string, int, float, op, lparen, rparen, comma, end
    text: str  # the source text (for names and keywords), or the decoded string
    pos: int  # 1-based
    value: Any = None

    def is_kw(self, *words: str) -> bool:
        return self.kind == "name" and self.text.upper() in words


KEYWORDS = {"AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "TRUE", "FALSE", "DATE"}
_NUMBER = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = ("<=", ">=", "!=", "<>", "=", "<", ">")


def show(text: str, limit: int = 40) -> str:
    """Source text as an error quotes it: cut, control characters and surrogates escaped."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else repr(c)[1:-1] for c in cut)


def tokenize(source: str) -> list[Token]:
    """The tokens of ``source`` (FilterError for a character that starts none, an unterminated
    string or quoted name, a malformed number)."""
    out: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in " \t\r\n":
            i += 1
            continue
        pos = i + 1
        if c in "'\"":
            j, buf = i + 1, []
            while True:
                k = source.find(c, j)
                if k < 0:
                    what = "string" if c == "'" else "quoted column name"
                    raise FilterError(f"unterminated {what} starting '{show(source[i:], 20)}'", pos)
                buf.append(source[j:k])
                if k + 1 < n and source[k + 1] == c:  # doubled quote: one quote character
                    buf.append(c)
                    j = k + 2
                    continue
                i = k + 1
                break
            text = "".join(buf)
            if c == '"' and not text:
                raise FilterError("empty quoted column name", pos)
            out.append(Token("string" if c == "'" else "qname", text, pos))
            continue
        if c.isdigit() or (c in "-." and i + 1 < n and (source[i + 1].isdigit() or source[i + 1] == ".")):
            m = _NUMBER.match(source, i)
            if m is None:
                raise FilterError(f"malformed number '{show(source[i : i + 20])}'", pos)
            end = m.end()
            if end < n and (source[end].isalnum() or source[end] in "_."):
                raise FilterError(f"malformed number '{show(source[i : end + 1])}'", pos)
            text = m.group()
            if re.fullmatch(r"-?\d+", text):
                value = int(text)
                if not INT64[0] <= value <= INT64[1]:
                    raise FilterError(f"integer {show(text)} is outside the 64-bit range", pos)
                out.append(Token("int", text, pos, value))
            else:
                number = float(text)
                if not math.isfinite(number):
                    raise FilterError(f"number {show(text)} is out of range", pos)
                out.append(Token("float", text, pos, number))
            i = end
            continue
        m = _NAME.match(source, i)
        if m is not None:
            out.append(Token("name", m.group(), pos))
            i = m.end()
            continue
        op = next((o for o in _OPS if source.startswith(o, i)), None)
        if op is not None:
            out.append(Token("op", "!=" if op == "<>" else op, pos))
            i += len(op)
            continue
        if c in "(),":
            out.append(Token({"(": "lparen", ")": "rparen", ",": "comma"}[c], c, pos))
            i += 1
            continue
        hint = "; end an expression with nothing after it (no ';')" if c == ";" else ""
        raise FilterError(f"unexpected character '{show(c)}'{hint}", pos)
    out.append(Token("end", "", n + 1))
    return out


# ---------------------------------------------------------------------------------------------
# tree


@dataclass(frozen=True)
class Literal:
    type: str  # integer, float, string, boolean, date
    value: Any
    pos: int


@dataclass(frozen=True)
class Column:
    name: str
    pos: int


@dataclass(frozen=True)
class Compare:
    column: Column
    op: str
    value: Literal


@dataclass(frozen=True)
class In:
    column: Column
    values: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    column: Column
    low: Literal
    high: Literal
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    column: Column
    negated: bool = False


@dataclass(frozen=True)
class IsTrue:
    """A bare boolean column used as a condition (``draft``, ``NOT draft``)."""

    column: Column


@dataclass(frozen=True)
class Not:
    operand: "Node"


@dataclass(frozen=True)
class And:
    operands: tuple["Node", ...]


@dataclass(frozen=True)
class Or:
    operands: tuple["Node", ...]


Node = Union[Compare, In, Between, IsNull, IsTrue, Not, And, Or]


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.i = 0
        self.params = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise FilterError(f"expected {what}, found {describe(self.tok)}", self.tok.pos)
        return self.take()

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise FilterError("the expression is empty")
        node = self.or_expr(0)
        if self.tok.kind != "end":
            raise FilterError(f"unexpected {describe(self.tok)} after a complete condition (missing AND / OR?)", self.tok.pos)
        return node

    def or_expr(self, depth: int) -> Node:
        parts = [self.and_expr(depth)]
        while self.tok.is_kw("OR"):
            self.take()
            parts.append(self.and_expr(depth))
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_expr(self, depth: int) -> Node:
        parts = [self.not_expr(depth)]
        while self.tok.is_kw("AND"):
            self.take()
            parts.append(self.not_expr(depth))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def _deeper(self, depth: int) -> int:
        if depth + 1 > MAX_DEPTH:
            raise FilterError(f"nested more than {MAX_DEPTH} levels deep (parentheses and NOTs)", self.tok.pos)
        return depth + 1

    def not_expr(self, depth: int) -> Node:
        if self.tok.is_kw("NOT"):
            self.take()
            return Not(self.not_expr(self._deeper(depth)))
        return self.primary(depth)

    def primary(self, depth: int) -> Node:
        t = self.tok
        if t.kind == "lparen":
            inner_depth = self._deeper(depth)
            self.take()
            node = self.or_expr(inner_depth)
            self.expect("rparen", "')'")
            return node
        column = self.column()
        t = self.tok
        if t.kind == "op":
            self.take()
            return Compare(column, t.text, self.literal())
        negated = False
        if t.is_kw("NOT") and self.tokens[self.i + 1].is_kw("IN", "BETWEEN"):
            self.take()
            negated = True
            t = self.tok
        if t.is_kw("IN"):
            self.take()
            self.expect("lparen", "'(' after IN")
            values = [self.literal()]
            while self.tok.kind == "comma":
                self.take()
                if len(values) >= MAX_IN_LIST:
                    raise FilterError(f"an IN list holds at most {MAX_IN_LIST} values", self.tok.pos)
                values.append(self.literal())
            self.expect("rparen", "',' or ')' in the IN list")
            return In(column, tuple(values), negated)
        if t.is_kw("BETWEEN"):
            self.take()
            low = self.literal()
            if not self.tok.is_kw("AND"):
                raise FilterError(f"expected AND in BETWEEN … AND …, found {describe(self.tok)}", self.tok.pos)
            self.take()
            return Between(column, low, self.literal(), negated)
        if t.is_kw("IS"):
            self.take()
            neg = False
            if self.tok.is_kw("NOT"):
                self.take()
                neg = True
            if not self.tok.is_kw("NULL"):
                raise FilterError(f"expected NULL after IS{' NOT' if neg else ''}, found {describe(self.tok)}", self.tok.pos)
            self.take()
            return IsNull(column, neg)
        if t.kind in ("end", "rparen") or t.is_kw("AND", "OR"):
            return IsTrue(column)
        raise FilterError(f"expected a comparison, IN, BETWEEN or IS [NOT] NULL after column '{show(column.name)}', found {describe(t)}", t.pos)

    def column(self) -> Column:
        t = self.tok
        if t.kind == "qname" or (t.kind == "name" and t.text.upper() not in KEYWORDS):
            self.take()
            return Column(t.text, t.pos)
        raise FilterError(f"expected a column name, found {describe(t)}", t.pos)

    def literal(self) -> Literal:
        t = self.take()
        self.params += 1
        if self.params > MAX_PARAMETERS:
            raise FilterError(f"more than {MAX_PARAMETERS} literals in one expression", t.pos)
        if t.kind == "string":
            return Literal("string", t.text, t.pos)
        if t.kind == "int":
            return Literal("integer", t.value, t.pos)
        if t.kind == "float":
            return Literal("float", t.value, t.pos)
        if t.is_kw("TRUE", "FALSE"):
            return Literal("boolean", t.text.upper() == "TRUE", t.pos)
        if t.is_kw("DATE"):
            s = self.tok
            if s.kind != "string":
                raise FilterError(f"expected a date string after DATE (DATE '2020-01-31'), found {describe(s)}", s.pos)
            self.take()
            return Literal("date", parse_date(s.text, t.pos), t.pos)
        if t.kind == "qname":
            raise FilterError(f'expected a value, found column "{show(t.text, 30)}" (double quotes name a column; a string takes single quotes)', t.pos)
        if t.is_kw("NULL"):
            raise FilterError("NULL is not a value to compare with: write column IS NULL or column IS NOT NULL", t.pos)
        raise FilterError(f"expected a value ('text', a number, true, false or DATE 'YYYY-MM-DD'), found {describe(t)}", t.pos)


def parse_date(text: str, pos: int) -> _dt.date:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise FilterError(f"date '{show(text)}' is not YYYY-MM-DD", pos)
    try:
        return _dt.date.fromisoformat(text)
    except ValueError:
        raise FilterError(f"'{show(text)}' is not a date", pos) from None


def describe(t: Token) -> str:
    if t.kind == "end":
        return "the end of the expression"
    if t.kind == "string":
        return f"string '{show(t.text, 30)}'"
    if t.kind == "qname":
        return f'column "{show(t.text, 30)}"'
    if t.kind == "name":
        return f"{'keyword' if t.text.upper() in KEYWORDS else 'name'} '{show(t.text, 30)}'"
    return repr(show(t.text, 30))


def parse(source: Any) -> Node:
    """The tree of a filter expression (FilterError when it is not one)."""
    if not isinstance(source, str):
        raise FilterError(f"an expression must be a string, got {type(source).__name__}")
    if len(source) > MAX_FILTER_CHARS:
        raise FilterError(f"the expression has {len(source)} characters; at most {MAX_FILTER_CHARS} are accepted")
    tree = _Parser(source).parse()
    if lone_surrogate(source) is not None:  # in a string literal (anywhere else the parser refused it)
        at = next(i for i, ch in enumerate(source) if "\ud800" <= ch <= "\udfff")
        raise FilterError(f"the expression is not valid Unicode text: a lone surrogate (U+{ord(source[at]):04X}) at character {at + 1}")
    return tree


# ---------------------------------------------------------------------------------------------
# validation against the columns


def _literal_ok(column_type: str, literal: Literal) -> bool:
    if column_type in ("integer", "float"):
        return literal.type in ("integer", "float")
    return column_type == literal.type


def _hint(column_type: str) -> str:
    return {
        "integer": "a number",
        "float": "a number",
        "string": "a 'quoted string'",
        "boolean": "true or false",
        "date": "DATE 'YYYY-MM-DD'",
        "json": "nothing (it holds nested values: test it with IS NULL / IS NOT NULL)",
    }[column_type]


@dataclass
class Validated:
    """A parsed expression whose columns are the catalog's (``names``: the catalog spelling of
    each column the expression names, by the spelling used)."""

    tree: Node
    names: dict[str, str] = field(default_factory=dict)


def resolve(name: Column, columns: Mapping[str, str]) -> str:
    """The catalog's spelling of ``name``: exact, else case-insensitive (DuckDB's rule)."""
    if name.name in columns:
        return name.name
    folded = [c for c in columns if c.lower() == name.name.lower()]
    if len(folded) == 1:
        return folded[0]
    known = ", ".join(sorted(columns)[:20]) + (" …" if len(columns) > 20 else "")
    raise FilterError(f"unknown column '{show(name.name)}' (columns: {known})", name.pos)


def validate(tree: Node, columns: Mapping[str, str]) -> Validated:
    """Check every column exists in ``columns`` ({name: type}, types of ``TYPES``) and every
    literal has its column's type; FilterError naming the first problem."""
    out = Validated(tree)

    def col(c: Column) -> str:
        name = resolve(c, columns)
        out.names[c.name] = name
        return columns[name]

    def check(c: Column, ctype: str, lit: Literal, what: str) -> None:
        if ctype == "json":
            raise FilterError(f"column '{show(c.name)}' holds nested JSON values: only IS NULL / IS NOT NULL can test it", c.pos)
        if not _literal_ok(ctype, lit):
            raise FilterError(f"type mismatch: column '{show(c.name)}' is {ctype}, {what} is {lit.type}; compare it with {_hint(ctype)}", lit.pos)

    stack: list[Node] = [tree]
    while stack:  # iterative: And / Or are flat, Not is depth-limited, but be safe anyway
        node = stack.pop()
        if isinstance(node, (And, Or)):
            stack.extend(node.operands)
        elif isinstance(node, Not):
            stack.append(node.operand)
        elif isinstance(node, IsNull):
            col(node.column)
        elif isinstance(node, IsTrue):
            t = col(node.column)
            if t != "boolean":
                raise FilterError(
                    f"column '{show(node.column.name)}' is {t}, not boolean: compare it with a value (e.g. {show(node.column.name)} = …)", node.column.pos
                )
        elif isinstance(node, Compare):
            t = col(node.column)
            check(node.column, t, node.value, "the value")
            if t == "boolean" and node.op not in ("=", "!="):
                raise FilterError(f"column '{show(node.column.name)}' is boolean: only = and != compare it", node.value.pos)
        elif isinstance(node, In):
            t = col(node.column)
            for v in node.values:
                check(node.column, t, v, "a value of the IN list")
        elif isinstance(node, Between):
            t = col(node.column)
            if t == "boolean":
                raise FilterError(f"column '{show(node.column.name)}' is boolean: BETWEEN does not apply", node.column.pos)
            check(node.column, t, node.low, "the lower bound")
            check(node.column, t, node.high, "the upper bound")
    return out


# ---------------------------------------------------------------------------------------------
# SQL


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class CompiledFilter:
    """``sql``: a boolean SQL expression over the columns (quoted names, ``?`` placeholders,
    no literal); ``params``: the values, in placeholder order; ``source``: the expression."""

    sql: str
    params: tuple[Any, ...]
    source: str


def to_sql(v: Validated) -> tuple[str, list[Any]]:
    params: list[Any] = []

    def ident(c: Column) -> str:
        return quote_identifier(v.names[c.name])

    def emit(node: Node) -> str:
        if isinstance(node, (And, Or)):
            glue = " AND " if isinstance(node, And) else " OR "
            return "(" + glue.join(emit(o) for o in node.operands) + ")"
        if isinstance(node, Not):
            return f"(NOT {emit(node.operand)})"
        if isinstance(node, IsNull):
            return f"({ident(node.column)} IS {'NOT ' if node.negated else ''}NULL)"
        if isinstance(node, IsTrue):
            params.append(True)
            return f"({ident(node.column)} = ?)"
        if isinstance(node, Compare):
            params.append(node.value.value)
            return f"({ident(node.column)} {'<>' if node.op == '!=' else node.op} ?)"
        if isinstance(node, In):
            params.extend(x.value for x in node.values)
            return f"({ident(node.column)} {'NOT ' if node.negated else ''}IN ({', '.join('?' * len(node.values))}))"
        if isinstance(node, Between):
            params.extend((node.low.value, node.high.value))
            return f"({ident(node.column)} {'NOT ' if node.negated else ''}BETWEEN ? AND ?)"
        raise TypeError(f"not a filter node: {node!r}")

    return emit(v.tree), params


def compile_filter(source: Any, columns: Mapping[str, str]) -> CompiledFilter:
    """Parse, validate against ``columns`` ({name: type}) and compile ``source``."""
    tree = parse(source)
    sql, params = to_sql(validate(tree, columns))
    return CompiledFilter(sql, tuple(params), source)


def check_doc_ids(doc_ids: Any) -> list[str]:
    """A ``doc_ids`` filter: a list of at most ``MAX_DOC_IDS`` strings (FilterError otherwise)."""
    if not isinstance(doc_ids, (list, tuple)):
        raise FilterError(f"doc_ids must be a list of document ids, got {type(doc_ids).__name__}")
    if len(doc_ids) > MAX_DOC_IDS:
        raise FilterError(f"doc_ids holds {len(doc_ids)} ids; at most {MAX_DOC_IDS} are accepted")
    bad = next((i for i, d in enumerate(doc_ids) if not isinstance(d, str)), None)
    if bad is not None:
        raise FilterError(f"doc_ids[{bad}] is {type(doc_ids[bad]).__name__}, not a string")
    for i, d in enumerate(doc_ids):
        where = lone_surrogate(d)
        if where is not None:
            raise FilterError(f"doc_ids[{i}] is not valid Unicode text: a lone surrogate {where}")
    return list(dict.fromkeys(doc_ids))
