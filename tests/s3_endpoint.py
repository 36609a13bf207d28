"""An S3 endpoint on loopback for the suite: moto's server (the stand-in s3fs's own tests
use), and a proxy in front of it that strips ``If-None-Match`` from every request, as some
S3-compatible stores and gateways do (they accept the header and ignore it).

The endpoint's address and test credentials go into the environment when this module is
imported (``conftest.py`` imports it first thing), before any Ray starts: Ray's workers
inherit the environment of the process that starts the cluster, as a cluster's nodes get
theirs from their instance role or ``ray start`` environment (docs/cluster.md). The server
itself starts on first use (``MotoEndpoint``)."""

from __future__ import annotations

import http.client
import logging
import os
import random
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

# The endpoint's port is chosen when the environment is set, at conftest import, and bound only
# when a test first needs the server, maybe many minutes later: an ephemeral port (what
# binding port 0 gives) could be taken by then by any outgoing connection. Ports here are
# neither ephemeral (32768+) nor Ray's worker ports (10002-19999) nor Serve's direct ingress
# (30000-31000).
PORTS = range(20000, 30000)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    rng = random.Random(os.getpid())
    return next(p for p in (rng.choice(PORTS) for _ in range(1000)) if _free(p))


CHOSEN_BY = "MVR_TESTS_S3_CHOSEN_BY"  # the pid of the process that chose the endpoint's port


def configure_environment() -> str:
    """Point botocore (s3fs's client) at this process's endpoint, with test credentials,
    unless the environment names one already; the endpoint URL. A port chosen here by another
    process is chosen again: pytest-xdist's controller imports conftest too and its workers
    inherit its environment, and two workers' servers on one port collide (the second finds
    it taken)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    chosen_by = os.environ.get(CHOSEN_BY)
    if "AWS_ENDPOINT_URL_S3" not in os.environ or (chosen_by is not None and chosen_by != str(os.getpid())):
        os.environ["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{_free_port()}"
        os.environ[CHOSEN_BY] = str(os.getpid())
    return os.environ["AWS_ENDPOINT_URL_S3"]


class MotoEndpoint:
    """moto's S3 server at the environment's endpoint (``configure_environment``), in this
    process's threads."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line a request otherwise
        self.url = os.environ["AWS_ENDPOINT_URL_S3"]
        host, port = self.url.removeprefix("http://").split(":")
        if not _free(int(port)):  # moto's start would wait forever for a server that cannot bind
            raise RuntimeError(f"the S3 endpoint's port {port} (chosen at conftest import) is taken; run the tests again")
        self._server = ThreadedMotoServer(ip_address=host, port=int(port), verbose=False)
        self._server.start()

    def make_bucket(self, name: str) -> str:
        """A new bucket; its ``s3://`` URL."""
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        self._server.stop()


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and "Expect: 100-continue" answered (botocore's PUTs wait for it)
    target: tuple[str, int]
    stripped: list[str]

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("if-none-match", "expect")}
        if "If-None-Match" in self.headers:
            self.stripped.append(f"{self.command} {self.path}")
        conn = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            self.send_response(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    self.send_header(k, v)
            # a HEAD's length is the object's, as the target said it
            self.send_header("Content-Length", r.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args) -> None:
        pass


class StrippingProxy:
    """An HTTP proxy to ``target_url`` that drops ``If-None-Match`` from every request (the
    store then overwrites what a conditional PUT should have refused); ``stripped``: the
    requests it took the header from. ``url``: its own address."""

    def __init__(self, target_url: str) -> None:
        host, port = target_url.removeprefix("http://").split(":")
        self.stripped: list[str] = []
        handler = type("Forward", (_Forward,), {"target": (host, int(port)), "stripped": self.stripped})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: Optional[threading.Thread] = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
