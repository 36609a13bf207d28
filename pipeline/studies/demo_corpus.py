"""The demo corpus: real text that ships with Python, so ``mvr demo`` needs no download.

Two sources: the language-reference topics of ``pydoc_data.topics`` (one document per topic)
and the docstrings of a fixed list of standard-library modules (one document for the module
and one per public function or class). The selection is deterministic for a given Python
version: candidates are ranked by tier (module docstrings and topics first, then each
module's first member, second member, …; functions before classes before exceptions), so a
limit keeps every module represented; the result is sorted by id. No Ray, no I/O.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from types import ModuleType
from typing import Iterator

DEMO_MODULES: tuple[str, ...] = (
    "abc",
    "argparse",
    "array",
    "asyncio",
    "bisect",
    "builtins",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "http.client",
    "inspect",
    "itertools",
    "json",
    "locale",
    "logging",
    "math",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "queue",
    "random",
    "re",
    "select",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "traceback",
    "typing",
    "unittest",
    "urllib.parse",
    "warnings",
    "weakref",
    "zipfile",
)
DEFAULT_LIMIT = 600
MIN_CHARS = 40  # shorter docstrings say too little to retrieve
MAX_CHARS = 1500  # longer texts are clipped (at a word boundary) to bound indexing time

Row = dict[str, str]

_RULE = re.compile(r"^[ \t]*[*=\-~^+|]{3,}[*=\-~^+| \t]*$\n?", re.MULTILINE)  # reST underlines, table borders


def clip(text: str, max_chars: int = MAX_CHARS) -> str:
    """``text`` cut to at most ``max_chars`` characters, at the last whitespace if there is one."""
    if len(text) <= max_chars:
        return text
    cut = max(text.rfind(" ", 0, max_chars + 1), text.rfind("\n", 0, max_chars + 1))
    return text[: cut if cut > 0 else max_chars].rstrip()


def strip_rules(text: str) -> str:
    """``text`` without lines made only of reST heading underlines or table borders."""
    return _RULE.sub("", text)


def _doc(obj: object) -> str:
    """The object's own docstring, dedented and stripped ('' when it has none)."""
    doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _import(name: str) -> ModuleType | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except ImportError:  # e.g. ssl or sqlite3 missing from a minimal build
            return None


def _kind(obj: object) -> int:
    """Ranking within a module: 0 functions, 1 classes, 2 exceptions and warnings."""
    if inspect.isclass(obj):
        return 2 if issubclass(obj, BaseException) else 1
    return 0


def public_members(module: ModuleType) -> list[tuple[str, object]]:
    """(name, object) of the module's public functions and classes: the names in ``__all__``
    when it is defined, else those defined in the module itself; ranked by kind, then name."""
    exported = getattr(module, "__all__", None)
    names = sorted(exported) if exported is not None else sorted(dir(module))
    out = []
    for name in names:
        if name.startswith("_"):
            continue
        obj = getattr(module, name, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if exported is None and getattr(obj, "__module__", None) != module.__name__:
            continue
        out.append((name, obj))
    return sorted(out, key=lambda item: (_kind(item[1]), item[0]))


def module_documents(name: str, max_chars: int = MAX_CHARS) -> list[Row]:
    """The module's docstring, then its public members' docstrings, in rank order."""
    module = _import(name)
    if module is None:
        return []
    entries = [(name, _doc(module))] + [(f"{name}.{member}", _doc(obj)) for member, obj in public_members(module)]
    return [{"_id": f"doc:{title}", "title": title, "text": clip(text, max_chars)} for title, text in entries if len(text) >= MIN_CHARS]


def topic_documents(max_chars: int = MAX_CHARS) -> list[Row]:
    """One document per ``pydoc_data.topics`` entry (title: the topic key; text: the topic
    without its reST rules), sorted by key."""
    from pydoc_data.topics import topics

    texts = {key: strip_rules(text).strip() for key, text in topics.items()}
    return [{"_id": f"topic:{key}", "title": key, "text": clip(text, max_chars)} for key, text in sorted(texts.items()) if len(text) >= MIN_CHARS]


def _candidates(modules: tuple[str, ...], max_chars: int) -> Iterator[tuple[int, Row]]:
    """(tier, row): topics and each module's first document are tier 0, its i-th is tier i."""
    for row in topic_documents(max_chars):
        yield 0, row
    for name in modules:
        for tier, row in enumerate(module_documents(name, max_chars)):
            yield tier, row


def build_demo_corpus(limit: int = DEFAULT_LIMIT, modules: tuple[str, ...] = DEMO_MODULES, max_chars: int = MAX_CHARS) -> list[Row]:
    """At most ``limit`` BEIR-style rows ``{"_id", "title", "text"}``, ids unique and sorted,
    texts non-empty and distinct (a repeated docstring, e.g. of an alias, is kept once)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    ranked = sorted(_candidates(modules, max_chars), key=lambda c: (c[0], c[1]["_id"]))
    chosen: dict[str, Row] = {}
    seen_texts: set[str] = set()
    for _, row in ranked:
        if len(chosen) == limit:
            break
        if row["_id"] in chosen or row["text"] in seen_texts:
            continue
        chosen[row["_id"]] = row
        seen_texts.add(row["text"])
    return [chosen[i] for i in sorted(chosen)]
