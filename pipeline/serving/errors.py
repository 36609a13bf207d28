"""How the service answers what it refuses: 422 naming each bad field, 400 saying why a body
is unreadable, each echoing at most an excerpt of what the client sent (never the whole body,
never text that cannot be written as JSON); the two shapes of an error answer (``Refusal``,
``Invalid``: one a status) and how the OpenAPI schema lists them (``responses``)."""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Union

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

EXCERPT_CHARS = 100  # of any client-sent value echoed in an error
MESSAGE_CHARS = 300  # of an error message
ERRORS_SHOWN = 10  # validation errors listed in one answer


def excerpt(value: Any, chars: int = EXCERPT_CHARS) -> Any:
    """A client-sent value as an error may echo it: numbers and short strings as they are;
    anything else as text of at most ``chars`` characters ending with "…". Never NaN or a
    lone surrogate (neither can be written as JSON text)."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and abs(value) < 10**15):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        text = value[: chars * 4].decode("utf-8", "replace")
    elif isinstance(value, float):
        text = str(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except Exception:  # nested too deep, or not JSON at all
            text = f"<{type(value).__name__}>"
    text = text if len(text) <= chars else text[: chars - 1] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def short_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's errors as a 422 lists them, each with its input cut to an excerpt (never
    the whole body), at most ``ERRORS_SHOWN`` of them."""
    out = []
    for err in errors[:ERRORS_SHOWN]:
        loc = [p if isinstance(p, int) else excerpt(str(p), 40) for p in err.get("loc", ())]
        msg = str(err.get("msg", ""))
        if err.get("type") == "model_attributes_type" and loc == ["body"] and isinstance(err.get("input"), (str, bytes)):
            msg = "the body must be a JSON object, sent with content-type: application/json"
        item = {"type": err.get("type"), "loc": loc, "msg": excerpt(msg, MESSAGE_CHARS)}
        if "input" in err:
            item["input"] = excerpt(err["input"])
        ctx = {k: v for k, v in (err.get("ctx") or {}).items() if not (k == "error" and err.get("type") == "value_error")}  # msg says it
        if ctx:
            item["ctx"] = {str(k): excerpt(v if isinstance(v, (int, float, str)) else str(v)) for k, v in ctx.items()}
        out.append(item)
    if len(errors) > ERRORS_SHOWN:
        out.append({"type": "more_errors", "loc": ["body"], "msg": f"{len(errors) - ERRORS_SHOWN} more errors not shown"})
    return out


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each bad field, echoing at most an excerpt of what was sent."""
    return JSONResponse({"detail": short_errors(list(exc.errors()))}, 422)


async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
    """FastAPI's answer, with what made the body unreadable (not UTF-8, nested too deep, a
    number too long) in place of its generic 400 message. A 422 raised with a message (a knob
    out of range, a filter naming an unknown column, a query the encoder refused) is answered
    in the request models' shape, a list of errors, so a 422 has one shape."""
    if exc.status_code == 422 and isinstance(exc.detail, str):
        return JSONResponse({"detail": [{"type": "value_error", "loc": ["body"], "msg": excerpt(exc.detail, MESSAGE_CHARS)}]}, 422)
    if exc.status_code == 400 and exc.__cause__ is not None and exc.detail == "There was an error parsing the body":
        exc = HTTPException(400, f"the body is not readable JSON: {excerpt(str(exc.__cause__), MESSAGE_CHARS)}")
    elif isinstance(exc.detail, str):
        exc = HTTPException(exc.status_code, excerpt(exc.detail, MESSAGE_CHARS), getattr(exc, "headers", None))
    return await http_exception_handler(request, exc)


class Refusal(BaseModel):
    """Every error answer but a 422: what is wrong, in one line."""

    detail: str = Field(description=f"the reason, at most {MESSAGE_CHARS} characters")


class FieldError(BaseModel):
    """One problem of a refused request."""

    type: str = Field(description='pydantic\'s error type ("value_error" for a check of the service\'s own; "more_errors" for the count of those not shown)')
    loc: list[Union[str, int]] = Field(description='where: ["body", field, …]')
    msg: str
    input: Optional[Any] = Field(None, description=f"an excerpt of what was sent, at most {EXCERPT_CHARS} characters")
    ctx: Optional[dict[str, Any]] = Field(None, description='the bound that was broken, e.g. {"le": 10000}')


class Invalid(BaseModel):
    """A 422: the request's problems, at most ``ERRORS_SHOWN`` then a count of the rest."""

    detail: list[FieldError]


# The refusals of ``guard.RequestGuard``, on every route, before any parsing.
GUARD_REFUSALS = {
    401: "no or a wrong bearer token (`Authorization: Bearer <token>`), when the service has one",
    408: "the body was not received whole within `body_timeout_s`",
    413: "the body is over `max_body_bytes`",
    431: "the headers are over `max_header_bytes`",
}


def responses(statuses: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """FastAPI's ``responses=`` for the error statuses a route answers ({status:
    description}): a 422 in the ``Invalid`` shape, any other in the ``Refusal`` shape; a 401
    with its ``WWW-Authenticate`` header."""
    out: dict[int | str, dict[str, Any]] = {}
    for status, description in sorted(statuses.items()):
        out[status] = {"model": Invalid if status == 422 else Refusal, "description": description}
        if status == 401:
            out[status]["headers"] = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
    return out


class QueryRefused(HTTPException):
    """A 4xx for one query's text (not for the request's settings): ``/search/batch`` names
    the query."""


def install(app: FastAPI) -> None:
    """Answer ``app``'s validation and HTTP errors as above."""
    # FastAPI's decorator form of ``add_exception_handler`` (the same call): Starlette types a
    # handler as taking any Exception, so a handler of one exception class passes only this way
    app.exception_handler(RequestValidationError)(validation_error)
    app.exception_handler(StarletteHTTPException)(http_error)
