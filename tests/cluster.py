"""A real multi-node Ray cluster on this machine, for tests: a head node and worker nodes,
each started with ``ray start --block`` as a process of its own, under one unique temp dir.

Why ``--block``: each node's Ray processes (GCS, raylet, dashboard, agents, workers) are then
children of that node's ``ray start`` process, which kills them when it gets SIGTERM, when
one of them dies unexpectedly (so SIGKILL to a worker node's raylet takes the whole node
down, as a machine failure would), and, through kernel fate-sharing, when it is killed
itself. Tear-down stops only what this helper started: the ``ray start`` processes it
spawned, every process they spawned, and anything left whose command line names the
cluster's temp dir (``/tmp/mvrc-XXXX``: the GCS's ``--log_dir``, the raylet's socket names
and the dashboard's ``--temp-dir`` all contain it); never ``ray stop``.

Every node has a temp dir of its own under the cluster's root, as separate machines would
(by default a worker node takes the head's): a node's runtime-env agent deletes a job's
unpacked ``working_dir`` when that node no longer uses it, and with a shared temp dir that
pulled the directory out from under the job's driver on the head node.

Isolation from the embedded Ray of other tests: ``ray start`` records the cluster's address
in ``{temp dir}/ray_current_cluster``, and a plain ``ray.init()`` (address None, no
``RAY_ADDRESS``) only reads ``/tmp/ray/ray_current_cluster`` (Ray 2.60,
``services.get_ray_address_from_environment`` / ``find_bootstrap_address(None)``), so with
a temp dir of its own the cluster is never joined by accident. This helper never sets
``RAY_ADDRESS`` in the test process, and it checks at start and at tear-down that
``/tmp/ray/ray_current_cluster`` does not name this cluster (and removes it if it ever does).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import psutil

DEFAULT_ADDRESS_FILE = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Node:
    """One ``ray start --block`` process and what it runs."""

    name: str
    proc: subprocess.Popen
    log: Path
    head: bool
    resources: dict = field(default_factory=dict)
    node_id: Optional[str] = None
    killed: bool = False  # stopped on purpose (``LocalCluster.kill_node``)

    def processes(self) -> list[psutil.Process]:
        """The ``ray start`` process and all its descendants still alive."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def raylet(self) -> Optional[psutil.Process]:
        for p in self.processes():
            try:
                if p.name() == "raylet":
                    return p
            except psutil.NoSuchProcess:
                pass
        return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class LocalCluster:
    """``LocalCluster().start(workers=2)``: a head node (``--num-cpus head_cpus``) and worker
    nodes (``--num-cpus 1 --resources {"mvr_worker": 1}``), all on 127.0.0.1. Use
    ``dashboard_url`` for the job submission and state APIs; ``gcs_address`` for
    ``ray start --address``. ``shutdown()`` stops everything it started."""

    def __init__(self, object_store_mb: int = 150) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mvrc-", dir="/tmp"))  # short: socket paths ≤ 107 chars
        self.temp_dir = self.root / "ray"
        self.data = self.root / "data"
        self.data.mkdir()
        self.object_store_bytes = object_store_mb << 20
        self.nodes: list[Node] = []
        self.gcs_port, self.dashboard_port = 0, 0
        self.token = secrets.token_hex(32)  # Ray token auth, on explicitly (its default when ~/.ray/auth_token exists)
        self._default_address_before = _read(DEFAULT_ADDRESS_FILE)

    # -- addresses -------------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def headers(self) -> dict:
        """HTTP headers of a client of this cluster's dashboard (job submission, state API)."""
        return {"Authorization": f"Bearer {self.token}"}

    def state_client(self):
        from ray.util.state import StateApiClient

        return StateApiClient(self.dashboard_url, headers={**self.headers, "Content-Type": "application/json"})

    def list_state(self, resource: str, filters: Optional[list] = None, detail: bool = False, timeout: float = 15) -> list:
        """``list_actors`` / ``list_nodes`` / ``list_tasks`` … of this cluster (``resource``:
        "actors", "nodes", "tasks", "workers")."""
        from ray.util.state.common import ListApiOptions, StateResource

        options = ListApiOptions(limit=10_000, timeout=int(timeout), filters=filters or [], detail=detail)
        return self.state_client().list(StateResource(resource), options=options, raise_on_missing_output=False)

    def env(self) -> dict:
        """Environment of the nodes (and so of job drivers and workers): this test process's,
        without any Ray address, with this Python first on PATH (``python`` in entrypoints)."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "PYTEST_CURRENT_TEST")}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env.update({"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token})
        # A dead node is declared dead after ~1.5 s of failed health checks, not Ray's ~15 s.
        env.update({"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"})
        # Serve's direct ingress, as ray_cluster.yaml can set it (a service with direct_ingress);
        # replicas leaving hold their port 2 s, not 30, for a load balancer to let go of them
        env.update({"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"})
        return env

    # -- starting --------------------------------------------------------------------------
    def start(self, workers: int = 2, head_cpus: int = 1, timeout: float = 90) -> "LocalCluster":
        try:
            self.start_head(head_cpus, timeout)
            for _ in range(workers):
                self.add_worker(timeout=timeout, wait=False)
            self.wait_for_nodes(1 + workers, timeout)
        except BaseException:
            self.shutdown()
            raise
        return self

    def _spawn(self, name: str, args: list[str], head: bool, resources: dict) -> Node:
        log = self.root / f"{name}.log"
        cmd = ["ray", "start", "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1"]
        cmd += ["--object-store-memory", str(self.object_store_bytes), *args]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(), start_new_session=True, preexec_fn=_die_with_parent
            )
        node = Node(name, proc, log, head, resources)
        self.nodes.append(node)
        return node

    def start_head(self, num_cpus: int = 1, timeout: float = 90) -> Node:
        self.gcs_port, self.dashboard_port, client_port, agent_port, metrics_port = free_ports(5)
        node = self._spawn(
            "head",
            [
                "--head",
                "--port",
                str(self.gcs_port),
                "--num-cpus",
                str(num_cpus),
                "--num-gpus",
                "0",
                "--temp-dir",
                str(self.temp_dir),
                "--include-dashboard",
                "true",
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(self.dashboard_port),
                "--ray-client-server-port",
                str(client_port),
                "--dashboard-agent-listen-port",
                str(agent_port),
                "--metrics-export-port",
                str(metrics_port),
            ],
            head=True,
            resources={},
        )
        deadline = time.time() + timeout
        while True:
            self._check_alive(node)
            try:
                request = urllib.request.Request(f"{self.dashboard_url}/api/version", headers=self.headers)
                with urllib.request.urlopen(request, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise TimeoutError(f"head node not up within {timeout} s:\n{self.tail(node)}")
            time.sleep(0.5)
        self.wait_for_nodes(1, timeout)
        self.check_isolated()
        return node

    def add_worker(self, num_cpus: int = 1, resources: Optional[dict] = None, timeout: float = 90, wait: bool = True) -> Node:
        resources = resources or {"mvr_worker": 1}
        agent_port, metrics_port = free_ports(2)
        name = f"worker{sum(not n.head for n in self.nodes) + 1}"
        node = self._spawn(
            name,
            [
                "--address",
                self.gcs_address,
                "--num-cpus",
                str(num_cpus),
                "--num-gpus",
                "0",
                "--temp-dir",
                str(self.root / name),  # a disk of its own, as a machine has
                "--resources",
                json.dumps(resources),
                "--dashboard-agent-listen-port",
                str(agent_port),
                "--metrics-export-port",
                str(metrics_port),
            ],
            head=False,
            resources=resources,
        )
        if wait:
            self.wait_for_nodes(len(self.alive_nodes()), timeout)
        return node

    def _check_alive(self, node: Node) -> None:
        if not node.alive:
            raise RuntimeError(f"`ray start` of {node.name} exited with {node.proc.returncode}:\n{self.tail(node)}")

    def wait_for_nodes(self, n: int, timeout: float = 90) -> list[dict]:
        """Wait until the cluster has exactly ``n`` alive nodes; map them to our ``Node``s."""
        deadline = time.time() + timeout
        while True:
            for node in self.nodes:
                if not node.killed:
                    self._check_alive(node)
            try:
                alive = [s for s in self.list_state("nodes", timeout=10) if s.state == "ALIVE"]
            except Exception:  # dashboard still starting
                alive = []
            if len(alive) == n:
                self._map_node_ids()
                return alive
            if time.time() > deadline:
                logs = "\n".join(f"--- {x.name}:\n{self.tail(x, 1500)}" for x in self.nodes)
                raise TimeoutError(f"{len(alive)} alive nodes after {timeout} s, expected {n}\n{logs}")
            time.sleep(0.5)

    def _map_node_ids(self) -> None:
        """Each ``Node``'s Ray node id, from its raylet's ``--node_id=`` argument."""
        for node in self.nodes:
            raylet = node.raylet()
            if node.node_id or raylet is None:
                continue
            try:
                args = raylet.cmdline()
            except psutil.NoSuchProcess:
                continue
            for arg in args:
                if arg.startswith("--node_id="):
                    node.node_id = arg.split("=", 1)[1]

    # -- inspecting ------------------------------------------------------------------------
    def alive_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive]

    def workers(self) -> list[Node]:
        return [n for n in self.nodes if not n.head and n.alive]

    def node_of(self, node_id: str) -> Optional[Node]:
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def tail(self, node: Node, chars: int = 4000) -> str:
        try:
            return node.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def check_isolated(self) -> None:
        """A plain ``ray.init()`` must not find this cluster: the default address file
        (``/tmp/ray/ray_current_cluster``) must not name it (removed if it ever does)."""
        if _read(DEFAULT_ADDRESS_FILE) == self.gcs_address:
            _restore(DEFAULT_ADDRESS_FILE, self._default_address_before)
            raise AssertionError(f"`ray start` wrote {self.gcs_address} into {DEFAULT_ADDRESS_FILE}")

    # -- faults ----------------------------------------------------------------------------
    def kill_node(self, node: Node, timeout: float = 30) -> None:
        """A node failure: SIGKILL the node's raylet; its ``ray start --block`` then kills the
        node's other processes (and exits). Waits until they are gone."""
        raylet = node.raylet()
        assert raylet is not None, f"{node.name} has no raylet"
        node.killed = True
        raylet.send_signal(signal.SIGKILL)
        try:
            node.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(node)

    # -- tear-down -------------------------------------------------------------------------
    def shutdown(self, timeout: float = 2) -> None:
        """Stop every node (SIGTERM to all at once, SIGKILL to what is left after ``timeout``
        seconds: nothing here needs a graceful stop), then any process left whose command
        line names this cluster's temp dir, then remove the dir."""
        started = set()
        for node in self.nodes:
            started.update(p.pid for p in node.processes())
        for node in self.nodes:
            if node.alive:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + timeout
        for node in self.nodes:
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _kill_tree(node)
                node.proc.wait(timeout=10)
        leftovers = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                cmd = " ".join(p.info["cmdline"] or [])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if p.pid in started or str(self.root) in cmd:
                if p.pid != os.getpid():
                    leftovers.append(p)
        _kill_all(leftovers)
        if _read(DEFAULT_ADDRESS_FILE) == self.gcs_address:
            _restore(DEFAULT_ADDRESS_FILE, self._default_address_before)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (Linux), so a killed
    pytest does not leave a cluster behind (``ray start --block`` cleans up on SIGTERM)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _kill_tree(node: Node) -> None:
    _kill_all(node.processes())


def _kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL each of ``procs`` and wait (up to 10 s) until they are gone."""
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _restore(path: Path, content: Optional[str]) -> None:
    if content is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(content)
