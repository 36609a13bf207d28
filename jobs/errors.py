"""The one error handler of the job entry points: a failing command ends in one line,
``error: <cause>``, naming the root cause through Ray's wrappers (``MVR_DEBUG=1``: the
traceback too), and exit status 2."""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from typing import Any, Callable

DEBUG_ENV = "MVR_DEBUG"  # set to 1: a failing command prints its full traceback as well

# Exception types whose message says it all; any other type is named before its message.
_PLAIN = {"ValueError", "RuntimeError", "TimeoutError", "NotADirectoryError", "IsADirectoryError", "UnicodeError"}
_PROJECT = ("mvr.",)
_RAY_WRAPPERS = ("RayTaskError", "RayActorError", "ActorDiedError", "ActorUnavailableError", "UserCodeException", "RayDataUserCodeException", "SystemException")
# "Type: message" lines of a traceback text (Ray keeps a remote error's chain only as text).
_EXC_NAME = re.compile(r"^[A-Z]\w*(Error|Exception|Exit|Interrupt|Failure)$")
_EXC_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)?(?P<type>[A-Za-z_][\w.]*)(?:\([\w.]*\))?: (?P<msg>\S.*)$")


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
