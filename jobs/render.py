"""Rich rendering of search results shared by ``mvr search`` and ``mvr demo``."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table


def snippet(text: str, title: str = "", width: int = 100) -> str:
    """``text`` on one line without a leading copy of ``title``, cut to about ``width``
    characters at a word boundary."""
    flat = " ".join(text.split())
    if title and flat.startswith(title + " "):
        flat = flat[len(title) + 1 :]
    if len(flat) <= width:
        return flat
    cut = flat.rfind(" ", 0, width)
    return flat[: cut if cut > width // 2 else width].rstrip() + " …"


def results_table(title: str, results: Sequence[dict], caption: str | None = None, show_title: bool = True) -> Table:
    """One row per result: rank, doc_id, score, title (unless ``show_title`` is False), snippet."""
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    table.add_column("#", justify="right", style="bold")
    table.add_column("doc_id", style="cyan", overflow="fold", max_width=40)
    table.add_column("score", justify="right", style="green", no_wrap=True)
    if show_title:
        table.add_column("title", style="magenta", max_width=30, overflow="fold")
    table.add_column("text", overflow="fold")
    for rank, r in enumerate(results, 1):
        cells = [str(rank), r["doc_id"], f"{r['score']:.4f}"]
        if show_title:
            cells.append(r["title"])
        table.add_row(*cells, snippet(r["text"], r["title"]))
    return table
