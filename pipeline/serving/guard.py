"""The service's guard, before any parsing: the bearer token and the body limit (pure ASGI
middleware, so it runs for every route and every transfer encoding)."""

from __future__ import annotations

import hashlib
import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mvr.pipeline.config import ServeConfig


def token_digest(token: str) -> str:
    """What the service keeps of its bearer token (the token itself never enters Serve's state)."""
    return hashlib.sha256(token.encode()).hexdigest()


class RequestGuard:
    """Pure ASGI middleware, before any parsing: 401 without the service's bearer token (when
    it has one); 413 for a body over ``max_body_bytes``, whether declared (Content-Length) or
    streamed (``Transfer-Encoding: chunked``: reading stops at the first byte over the limit).
    A body within the limit is read here and handed on whole."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        # the app being served (set by FastAPI before the middleware runs): in a Serve replica
        # that may be a copy of the ingress's ``app``, holding the state ``SearchService`` set
        state = scope["app"].state
        expected = getattr(state, "token_sha256", None)
        if expected is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(token.strip()), expected):
                detail = "missing or wrong bearer token (Authorization: Bearer <token>)"
                await JSONResponse({"detail": detail}, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        limit = getattr(state, "max_body_bytes", None) or ServeConfig.model_fields["max_body_bytes"].default
        declared = headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, receive, send, f"request body of {declared} bytes; at most {limit} are accepted")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            if message["type"] != "http.request":
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, f"request body over {limit} bytes; at most {limit} are accepted")
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

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
        # Connection: close: the rest of the body is not read, so the connection cannot be reused.
        await JSONResponse({"detail": detail}, 413, {"Connection": "close"})(scope, receive, send)
