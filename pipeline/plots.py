"""Matplotlib without a display: the pyplot module on the Agg backend, and a figure as PNG
bytes (jobs write them through storage/)."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Any, dpi: int = 120) -> bytes:
    """``fig`` rendered as PNG (then closed)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return buf.getvalue()
