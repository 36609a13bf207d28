"""The service's guard, before any parsing: the header size, the bearer token, the body limit
and the body's deadline (pure ASGI middleware, so it runs for every route and every transfer
encoding)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mvr.pipeline.config import ServeConfig


def token_digest(token: str) -> str:
    """What the service keeps of its bearer token (the token itself never enters Serve's state)."""
    return hashlib.sha256(token.encode()).hexdigest()


class RequestGuard:
    """Pure ASGI middleware, before any parsing: 431 for headers over ``max_header_bytes``
    (as sent: names, values, separators); 401 without the service's bearer token (when it
    has one); 413 for a body over ``max_body_bytes``, whether declared (Content-Length) or
    streamed (``Transfer-Encoding: chunked``: reading stops at the first byte over the
    limit); 408 for a body not received whole within ``body_timeout_s`` seconds of the
    headers (a slow or stalled client, a Content-Length larger than what is sent). A body
    within the limits is read here and handed on whole. Every refusal but the 401 closes the
    connection (``Connection: close``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = scope.get("headers", [])
        # the app being served (set by FastAPI before the middleware runs): in a Serve replica
        # that may be a copy of the ingress's ``app``, holding the state ``SearchService`` set
        state = scope["app"].state
        header_limit = setting(state, "max_header_bytes")
        header_bytes = sum(len(k) + len(v) + 4 for k, v in raw_headers)  # as sent: "name: value\r\n"
        if header_bytes > header_limit:
            await _refuse(scope, receive, send, 431, f"request headers of {header_bytes} bytes; at most {header_limit} are accepted")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        expected = getattr(state, "token_sha256", None)
        if expected is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(token.strip()), expected):
                detail = "missing or wrong bearer token (Authorization: Bearer <token>)"
                await JSONResponse({"detail": detail}, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        limit = setting(state, "max_body_bytes")
        declared = headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            await _refuse(scope, receive, send, 413, f"request body of {declared} bytes; at most {limit} are accepted")
            return
        timeout_s = setting(state, "body_timeout_s")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), deadline - loop.time())
            except asyncio.TimeoutError:
                await _refuse(scope, receive, send, 408, f"request body not received whole within {timeout_s:g} s ({size} bytes came)")
                return
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            if message["type"] != "http.request":
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(scope, receive, send, 413, f"request body over {limit} bytes; at most {limit} are accepted")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def setting(state: Any, name: str) -> Any:
    """``ServeConfig.<name>`` as the ingress set it on the app's state, else its default."""
    value = getattr(state, name, None)
    return ServeConfig.model_fields[name].default if value is None else value


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
    """Answer ``status`` with ``detail``, closing the connection (``Connection: close``): the
    rest of the request is not read, so the connection cannot be reused."""
    await JSONResponse({"detail": detail}, status, {"Connection": "close"})(scope, receive, send)
