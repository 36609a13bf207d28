"""Shared pieces of the job entry points: the one error handler, config loading and printing.

Nothing heavy is imported at module level (no Ray, torch, transformers, pydantic configs):
``mvr --help`` and every job's ``parser()`` need only this module and argparse."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

from rich.console import Console

console = Console(stderr=True)

DEBUG_ENV = "MVR_DEBUG"  # set to 1: a failing command prints its full traceback as well

# Exception types whose message says it all; any other type is named before its message.
_PLAIN = {"ValueError", "RuntimeError", "TimeoutError", "NotADirectoryError", "IsADirectoryError", "UnicodeError"}
_PROJECT = ("mvr.",)
_RAY_WRAPPERS = ("RayTaskError", "RayActorError", "ActorDiedError", "ActorUnavailableError", "UserCodeException", "RayDataUserCodeException", "SystemException")
# "Type: message" lines of a traceback text (Ray keeps a remote error's chain only as text).
_EXC_NAME = re.compile(r"^[A-Z]\w*(Error|Exception|Exit|Interrupt|Failure)$")
_EXC_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)?(?P<type>[A-Za-z_][\w.]*)(?:\([\w.]*\))?: (?P<msg>\S.*)$")


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


# --- errors -------------------------------------------------------------------------------


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def run_job(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a job: its own exit status, or for an exception escaping it one line ``error:
    <cause>`` on stderr and 2 (the traceback too with MVR_DEBUG=1); Ctrl-C: 130."""
    try:
        return run(args)
    except KeyboardInterrupt:
        if debug():
            traceback.print_exc()
        _line("interrupted")
        return 130
    except Exception as exc:
        if debug():
            traceback.print_exc()
        else:  # the failed job's other Ray tasks, freed from here on, would log their errors with traces
            os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        return error(exc)


def error(exc: BaseException | str) -> int:
    """Print ``error: <cause>`` (one line) on stderr; the exit status for it (2)."""
    _line(f"error: {exc if isinstance(exc, str) else describe(exc)}")
    return 2


def _line(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def describe(exc: BaseException) -> str:
    """One line naming the root cause of ``exc``: through Ray's wrappers (a task's or actor's
    error, Ray Data's user-code error) to the user-facing exception, its message first; a full
    disk (or quota), however it was wrapped, as what to do about it."""
    line = _root_cause(exc)
    full = _NO_SPACE.search(line)
    if full is None:
        return line
    what = full.group("what").lower()
    if full.group("path"):
        return f"{what} writing {full.group('path')}: free space there and run the command again"
    if re.sub(r"^\[Errno \d+\] ", "", line).lower() != what:
        what += f" ({line})"
    return f"{what}: free space and run the command again"


# OSError's own line for a full disk or quota ("No space left on device: PATH", or as a remote
# traceback's text "[Errno 28] No space left on device: 'PATH'"), or any message saying so
# (pyarrow's, DuckDB's).
_NO_SPACE = re.compile(r"(?P<what>No space left on device|Disk quota exceeded)(?:: '?(?P<path>[^']+?)'?$)?", re.IGNORECASE)


def _root_cause(exc: BaseException) -> str:
    texts: list[str] = []
    current: BaseException | None = exc
    for _ in range(16):
        if current is None or not _is_ray_wrapper(current):
            break
        texts.append(str(current))
        cause = getattr(current, "cause", None)
        nxt = cause if isinstance(cause, BaseException) and cause is not current else current.__cause__
        if nxt is None:
            break
        current = nxt
    remote = getattr(current, "remote_traceback", None)  # raised elsewhere, kept as its traceback's text (a Serve replica's)
    found = _last_exception_line(remote) if isinstance(remote, str) else None
    if found:
        return found
    if current is not None and not _is_ray_wrapper(current):
        return _message(current)
    for text in texts:  # the user's exception survives only in the remote traceback's text
        found = _last_exception_line(text)
        if found:
            return found
    return _message(current if current is not None else exc)


def _is_ray_wrapper(exc: BaseException) -> bool:
    return any(t.__module__.startswith("ray.") and t.__name__.split("(")[0] in _RAY_WRAPPERS for t in type(exc).__mro__)


def _last_exception_line(text: str) -> str | None:
    found = None
    for line in text.splitlines():
        m = _EXC_LINE.match(line.rstrip())
        if not m:
            continue
        name = m.group("type")
        short = name.rsplit(".", 1)[-1]
        if not _EXC_NAME.search(short) or short in _RAY_WRAPPERS or name.startswith("ray."):
            continue
        found = _labelled(name, m.group("msg"))
    return found


def _message(exc: BaseException) -> str:
    if _is_validation_error(exc):
        return f"invalid {exc.title}: {validation_summary(exc)}"  # type: ignore[attr-defined]
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.strerror}: {exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
        return text
    t = type(exc)
    return _labelled(f"{t.__module__}.{t.__qualname__}", str(exc))


def _labelled(type_name: str, message: str) -> str:
    short = type_name.rsplit(".", 1)[-1]
    message = " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    if len(message) > 2000:
        message = message[:2000] + " …"
    if not message:
        return short
    if short in _PLAIN or type_name.startswith(_PROJECT) or short.endswith(("FileNotFoundError", "PermissionError", "ConnectionError", "OSError")):
        return message
    return f"{short}: {message}"


def _is_validation_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "ValidationError" and callable(getattr(exc, "errors", None)) and hasattr(exc, "title")


def validation_summary(exc: Any) -> str:
    """A pydantic ValidationError on one line: ``key.path: problem (got value)``; ..."""
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ()))
        if e.get("type") == "extra_forbidden":
            parts.append(f"unknown key {loc}")
            continue
        msg = e.get("msg", "invalid")
        value = e.get("input")
        got = f" (got {value!r})" if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 80 and e.get("type") not in ("missing",) else ""
        parts.append(f"{loc}: {msg}{got}" if loc else f"{msg}{got}")
    return "; ".join(parts) or str(exc)


# --- configuration ------------------------------------------------------------------------


class ConfigError(ValueError):
    """A configuration that cannot be used, named in one line."""


def load_config(cls: Any, path: str | None, **overrides: object):
    """``cls.from_yaml(path, **overrides)`` with every way a config can be wrong (no such file,
    not YAML, top level not a mapping, unknown key, wrong type or value) as a ConfigError."""
    from pydantic import ValidationError

    where = f"--config {path}" if path else "configuration"
    loaded = _check_yaml(path, cls().model_dump(mode="json", by_alias=True)) if path is not None else None
    try:  # the file read once: a pipe (--config <(...)) has nothing left for a second read
        return cls.from_mapping(loaded, **overrides)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {validation_summary(exc)}") from None


def _check_yaml(path: str, defaults: dict) -> Optional[dict]:
    """The YAML file's content, checked to be a mapping whose sections are mappings."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--config {path}: no such file")
    if p.is_dir():
        raise ConfigError(f"--config {path}: is a directory, not a YAML file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"--config {path}: not valid YAML: {problem}{where}") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror or exc})") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the top level must be a mapping of settings (key: value), got {_yaml_type(data)}")
    _check_sections(path, data or {}, defaults, "")
    return data


def _check_sections(path: str, data: dict, defaults: dict, prefix: str) -> None:
    for key, value in data.items():
        default = defaults.get(key) if isinstance(key, str) else None
        if isinstance(default, dict) and value is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"--config {path}: {prefix}{key} must be a mapping of settings, got {_yaml_type(value)}")
            _check_sections(path, value, default, f"{prefix}{key}.")


def _yaml_type(value: object) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(type(value), type(value).__name__)


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with an IndexConfig (see configs/)")
    p.add_argument("--model", help="model directory, hub id, or 'minilm' (packaged default)")
    p.add_argument("--limit", type=positive_int, help="index only the first N input rows (N ≥ 1)")
    p.add_argument("--codec", help="token vectors' codec (compress.codec): auto, float16, int8, residual-N, pq-M, pca-D+C (docs/codecs.md)")
    p.add_argument("--pooled-codec", help="codec of the pooled, first-m and centroid vectors (compress.pooled_codec, default int8)")


def load_index_config(args: argparse.Namespace):
    from mvr.pipeline.config import IndexConfig

    overrides = {"model.name": args.model, "limit": args.limit}
    overrides |= {"compress.codec": getattr(args, "codec", None), "compress.pooled_codec": getattr(args, "pooled_codec", None)}
    config = load_config(IndexConfig, args.config, **overrides)
    check_model(config.model.name)
    return config


def check_model(name: str) -> None:
    """``checkpoint.check_model_name`` as a configuration error (before any work starts)."""
    from mvr.operators.encode.checkpoint import check_model_name

    try:
        check_model_name(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_index_manifest(index_url: str):
    """The index's manifest; a damaged ``manifest.json`` is a ValueError naming it."""
    from pydantic import ValidationError

    from mvr.storage.manifest import MANIFEST_FILE, load_manifest

    try:
        return load_manifest(index_url)
    except ValidationError as exc:
        raise ValueError(f"{index_url}: {MANIFEST_FILE} is damaged ({validation_summary(exc)})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{index_url}: {MANIFEST_FILE} is damaged (not UTF-8 text)") from None


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
