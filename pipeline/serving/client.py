"""A small Python client of the search service (``mvr serve``): ``POST /search``,
``POST /search/batch``, ``GET /health``, ``GET /stats`` over HTTP with an optional bearer
token. ``mvr search --url URL "query"`` uses it."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import requests

TOKEN_ENV = "MVR_TOKEN"


class ServiceError(RuntimeError):
    """The service answered with an error status; ``status`` and its ``detail`` (a message, or
    for a 422 from request validation a list of ``{"loc", "msg", "input"}`` errors)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {describe(detail)}")
        self.status = status
        self.detail = detail


def describe(detail: Any) -> str:
    """An error's ``detail`` as one line: validation errors as ``field: message; …``."""
    if isinstance(detail, list):
        parts = []
        for err in detail:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
                parts.append(f"{loc}: {err.get('msg', '')}" if loc else str(err.get("msg", "")))
            else:
                parts.append(str(err))
        return "; ".join(parts)
    return str(detail)


class SearchClient:
    """``url``: the service's base URL (``http://host:8000``); ``token``: bearer token
    (default: ``$MVR_TOKEN`` when set); ``timeout``: seconds per request."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        r = self.session.request(method, self.url + path, json=body, timeout=self.timeout)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ServiceError(r.status_code, detail)
        return r.json()

    def search(self, query: str, k: int = 10, mode: str = "maxsim", **knobs: Any) -> dict[str, Any]:
        """One query: the ``POST /search`` body (results, mode, path, timings_ms, degraded, …)."""
        return self._call("POST", "/search", {"query": query, "k": k, "mode": mode, **knobs})

    def search_batch(self, queries: Sequence[str], k: int = 10, mode: str = "maxsim", **knobs: Any) -> list[dict[str, Any]]:
        """Many queries in one request; one ``/search`` body each, in order."""
        return self._call("POST", "/search/batch", {"queries": list(queries), "k": k, "mode": mode, **knobs})["responses"]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "SearchClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
