"""Start-up failures retried where they happen, each injected once: Ray's own "timed out
during startup" on a local ``ray.init`` (``init_ray`` stops the failed attempt's processes and
starts again, at most ``RAY_START_ATTEMPTS`` times), and Serve's HTTP proxy killed while
``serve.start`` waits for it (``start_serve`` waits for the one Serve starts in its place).

Each scenario runs in a process of its own (``python tests/test_startup_retry.py SCENARIO``),
which starts a local Ray of its own (the test worker's process already has one), and prints
what it saw as one JSON line for the test to check."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]


def _child(scenario: str) -> dict[str, Any]:
    """Run ``scenario`` in a process with a local Ray of its own; what it printed last (JSON),
    with its ``stderr`` and wall ``seconds`` added."""
    env = {**os.environ, "RAY_ADDRESS": "local"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, __file__, scenario], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return {**result, "stderr": r.stderr, "seconds": time.monotonic() - t0}


# --- init_ray: Ray's start-up timeout ---------------------------------------------------------


def test_local_start_timing_out_once_is_started_again():
    """The first start's raylet registers, then ``Node.__init__``'s wait raises Ray's own
    timeout error: every process of that start is gone, and the next start gives a working
    cluster."""
    from mvr.pipeline.ray_runtime import RAY_START_ATTEMPTS

    r = _child("ray-timeout-once")
    # 2 starts: the injected failure, then a working one (3 only if Ray's own start-up timed
    # out as well under load: retried the same way)
    assert 2 <= r["starts"] <= RAY_START_ATTEMPTS and r["task"] == 42, r
    assert r["noted"] >= 2, r  # the failed start's processes: the GCS, the raylet and more
    assert r["alive"] == [], r  # none outlived it
    assert r["stderr"].count("starting again") == r["starts"] - 1 and f"(attempt 2 of {RAY_START_ATTEMPTS})" in r["stderr"], r["stderr"][-3000:]


def test_local_start_timing_out_every_time_raises_ray_error_after_the_bound():
    """The bound is the module's ``RAY_START_ATTEMPTS``, read when ``init_ray`` runs: the
    scenario sets it to 2 (one Ray start fewer than the default's 3, the same loop)."""
    from mvr.pipeline.ray_runtime import RAY_START_TIMEOUT

    r = _child("ray-timeout-always")
    assert r["bound"] == 2 and r["starts"] == r["bound"], r
    assert r["error"].startswith(f"Exception: {RAY_START_TIMEOUT}"), r  # Ray's own error, as Ray raised it
    assert r["alive"] == [] and r["noted"] >= 2 * r["bound"], r  # every attempt's processes stopped
    assert r["stderr"].count("starting again") == r["bound"] - 1 and "(attempt 2 of 2)" in r["stderr"], r["stderr"][-3000:]


def test_other_start_errors_are_not_retried():
    r = _child("ray-other-error")
    assert r["starts"] == 1, r
    assert r["error"] == "OSError: injected: not a start-up timeout", r
    assert "starting again" not in r["stderr"], r["stderr"][-3000:]


# --- start_serve: the proxy killed while starting --------------------------------------------


def test_serve_start_waits_through_a_proxy_killed_while_starting():
    """The proxy ``serve.start`` waits for is killed (as Serve's controller kills one whose
    readiness check fails): ``start_serve`` returns once the replacement is ready, and an
    application deployed then answers through it."""
    r = _child("serve-proxy-killed")
    assert len(r["killed"]) == 1, r
    assert r["log"] == ["Serve's HTTP proxy died while starting; waiting for the one Serve starts in its place (attempt 2 of 3)"], r
    (proxy,) = r["proxies"]
    assert proxy["status"] == "HEALTHY" and proxy["actor_id"] not in r["killed"], r  # the replacement
    assert r["healthz"] == [200, "success"] and r["answer"] == [200, "hello"], r


# --- the scenarios, in their own process ------------------------------------------------------

RAY_TIMEOUT_ERROR = (  # ray/_private/node.py's words, raised where it raises them
    "The current node timed out during startup. This could happen because some of the raylet failed to startup or the GCS has become overloaded."
)


def _inject_into_raylet_wait(fail: Callable[[int], BaseException | None]) -> tuple[list[str], list[Any]]:
    """Replace ``ray._private.services.get_node``, which ``Node.__init__`` of a local start
    (and nothing else here) calls in its loop waiting for the node's raylet to register. Where
    ``fail(n)`` gives an error for the n-th start (a node of its own), it waits for the
    registration (the whole node up, agents included: the most a timeout can leave), notes
    every process under this one and raises that error; otherwise it is Ray's own. Returns the
    starts seen (node ids) and the processes noted, filled as Ray starts."""
    import psutil
    from ray._private import services

    real = services.get_node
    starts: list[str] = []
    noted: list[psutil.Process] = []

    def get_node(gcs_address: str, node_id: str) -> dict:
        if node_id not in starts:
            starts.append(node_id)
        error = fail(starts.index(node_id) + 1)
        if error is None:
            return real(gcs_address, node_id)
        deadline = time.monotonic() + 120
        while True:
            try:
                real(gcs_address, node_id)
                break
            except RuntimeError:  # not registered yet
                if time.monotonic() > deadline:
                    raise  # Ray's own loop then raises its timeout
                time.sleep(0.1)
        noted.extend(psutil.Process().children(recursive=True))
        raise error

    services.get_node = get_node
    return starts, noted


def _alive(processes: list[Any]) -> list[str]:
    """Those of ``processes`` (psutil, each with its start time) still running."""
    import psutil

    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _scenario_ray(kind: str) -> dict[str, Any]:
    import ray

    from mvr.pipeline import ray_runtime

    if kind == "ray-timeout-always":
        ray_runtime.RAY_START_ATTEMPTS = 2  # the bound, as init_ray reads it

    def fail(n: int) -> BaseException | None:
        if kind == "ray-other-error":
            return OSError("injected: not a start-up timeout")
        if kind == "ray-timeout-always" or n == 1:
            return Exception(RAY_TIMEOUT_ERROR)
        return None

    starts, noted = _inject_into_raylet_wait(fail)
    out: dict[str, Any] = {}
    try:
        ray_runtime.init_ray()
        out["task"] = ray.get(ray.remote(lambda: 42).options(num_cpus=0).remote())
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out.update(starts=len(starts), noted=len(noted), alive=_alive(noted) if kind != "ray-other-error" else [], bound=ray_runtime.RAY_START_ATTEMPTS)
    return out


def _scenario_serve() -> dict[str, Any]:
    import urllib.error
    import urllib.request

    import ray
    from ray import serve
    from ray.serve._private import api as serve_api
    from ray.serve.schema import ServeInstanceDetails

    from mvr.pipeline.config import ServeConfig
    from mvr.pipeline.serving.app import start_serve

    real = serve_api._create_controller_and_proxy_refs
    killed: list[str] = []

    def create(*args: Any, **kwargs: Any):
        """Serve's controller and proxies created, and (the first time) its proxies killed
        before ``serve.start`` has waited for them to be ready."""
        controller, ready_refs = real(*args, **kwargs)
        if not killed:
            for handle in ray.get(controller.get_proxies.remote()).values():
                killed.append(handle._actor_id.hex())
                ray.kill(handle, no_restart=True)
        return controller, ready_refs

    serve_api._create_controller_and_proxy_refs = create
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logged: list[str] = []
    start_serve(ServeConfig(port=port), log=logged.append)
    proxies = ServeInstanceDetails(**serve.context._get_global_client().get_serve_details()).proxies

    def get(path: str) -> list:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
                return [response.status, response.read().decode()]
        except urllib.error.HTTPError as e:
            return [e.code, e.read().decode()]

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def hello(request: Any) -> str:
        return "hello"

    serve.run(hello.bind(), name="hello", route_prefix="/")
    return {
        "killed": killed,
        "log": logged,
        "healthz": get("/-/healthz"),
        "answer": get("/"),
        "proxies": [{"actor_id": p.actor_id, "status": p.status.value} for p in proxies.values()],
    }


if __name__ == "__main__":
    name = sys.argv[1]
    print(json.dumps(_scenario_serve() if name == "serve-proxy-killed" else _scenario_ray(name)), flush=True)
