"""Shared pieces of the job entry points: argparse types and the parser, checks of
arguments before any work, and output (the progress console on stderr, tables on stdout).
The error handler is ``errors.py``; configuration files and the index's manifest ``inputs.py``.

Nothing heavy is imported at module level (no Ray, torch, transformers, pydantic configs):
``mvr --help`` and every job's ``parser()`` need only this module and argparse."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from rich.console import Console

console = Console(stderr=True)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with options and positionals in any order (``mvr search INDEX --mode
    bm25 "query"``), unless a positional takes the rest of the line (``mvr submit``)."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing or any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions()):
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def positive_int(value: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def port_number(value: str) -> int:
    """argparse type: a TCP port, 1..65535."""
    n = positive_int(value)
    if n > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {n}")
    return n


def number_list(option: str, text: str) -> list[float]:
    """Comma-separated numbers of an option, or a ValueError naming it."""
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated numbers, got {text!r}") from None


def check_port_free(host: str, port: int) -> None:
    """Refuse, before Ray starts, a host:port this machine cannot listen on (in use, or not
    one of its addresses)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ValueError(f"cannot listen on {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the HTTP proxy does: TIME_WAIT is no conflict
        try:
            s.bind(address)
        except OSError as exc:
            import errno

            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"port {port} on {host} is in use") from None
            raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def check_utf8(what: str, text: str) -> None:
    """Refuse a command-line argument that was not valid UTF-8 (Python hands its bytes over as
    lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8") from None


# --- output -------------------------------------------------------------------------------


def output_console() -> Console:
    """Console for tables on stdout: a terminal's width, or 160 columns when piped to a file."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def print_update(result: Any) -> None:
    """The last line of ``mvr add``, ``delete`` and ``compact``: what the update did, the
    index version it committed and its seconds (an ``UpdateResult``)."""
    output_console().print(f"{result.summary} (version {result.manifest.version}, {result.seconds:.1f} s)")


def print_config(title: str, config) -> None:
    from rich.syntax import Syntax

    console.rule(title)
    console.print(Syntax(config.to_yaml(), "yaml", background_color="default"))


def write_outputs(json_out: str | None, payload: Callable[[], dict], plot: str | None, png: Callable[[str], bytes] | None) -> None:
    """Write a job's JSON (``payload()``) to ``json_out`` and its PNG (``png(file name)``) to
    ``plot``, or next to the JSON when ``plot`` is not given (paths or URLs)."""
    from mvr.storage import fs

    if json_out:
        fs.write_bytes_atomic(json_out, json.dumps(payload(), indent=1).encode())
        console.print(f"wrote {json_out}")
    plot = plot or (json_out.rsplit(".", 1)[0] + ".png" if json_out else None)
    if plot and png is not None:
        fs.write_bytes_atomic(plot, png(plot.rsplit("/", 1)[-1]))
        console.print(f"wrote {plot}")
