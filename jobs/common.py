"""Shared pieces of the job entry points: config loading and printing."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from rich.console import Console
from rich.syntax import Syntax

from pipeline.config import IndexConfig
from storage import fs

console = Console(stderr=True)


def error(exc: BaseException) -> int:
    """Print a job's error on stderr; the exit status for it (2)."""
    console.print(f"[red]error:[/red] {exc}")
    return 2


def output_console() -> Console:
    """Console for tables on stdout: a terminal's width, or 160 columns when piped to a file."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with an IndexConfig (see configs/)")
    p.add_argument("--model", help="model directory, hub id, or 'minilm' (packaged default)")
    p.add_argument("--limit", type=int, help="index only the first N input rows")


def load_index_config(args: argparse.Namespace) -> IndexConfig:
    return IndexConfig.from_yaml(args.config, **{"model.name": args.model, "limit": args.limit})


def print_config(title: str, config) -> None:
    console.rule(title)
    console.print(Syntax(config.to_yaml(), "yaml", background_color="default"))


def write_outputs(json_out: str | None, payload: Callable[[], dict], plot: str | None, png: Callable[[str], bytes] | None) -> None:
    """Write a job's JSON (``payload()``) to ``json_out`` and its PNG (``png(file name)``) to
    ``plot``, or next to the JSON when ``plot`` is not given (paths or URLs)."""
    if json_out:
        fs.write_bytes_atomic(json_out, json.dumps(payload(), indent=1).encode())
        console.print(f"wrote {json_out}")
    plot = plot or (json_out.rsplit(".", 1)[0] + ".png" if json_out else None)
    if plot and png is not None:
        fs.write_bytes_atomic(plot, png(plot.rsplit("/", 1)[-1]))
        console.print(f"wrote {plot}")
