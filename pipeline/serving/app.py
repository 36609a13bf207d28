"""Building, deploying and switching the Serve applications of ``mvr serve``.

Serve applications, so an index version can be replaced without refusing a query:

- ``{app}-index-v{version}-{hash}``: the ``Partition{i}`` deployments of one index version
  (none with ``partition.placement: ingress``: every ingress replica then maps the partitions);
- ``{app}`` (HTTP route ``/``): the ``Searcher`` ingress, bound to one index app; it encodes
  the queries itself (``encoder.placement: ingress``, the default: one hop less a query), or
- ``{app}-encoder-{hash}`` (``encoder.placement: deployment``): a ``QueryEncoder`` of a
  model + query settings, shared by index versions built with the same model.

``deploy`` starts the index app (and encoder app) of the index's current manifest beside whatever
is serving, waits until they run, then moves the ingress to them: in place when nothing of the
ingress itself changes (its replicas follow the service's ``Switchboard``,
``pipeline/serving/switchboard.py``), else by rolling it over (Serve's rolling update with
surge: new ingress replicas start before old ones stop, and old ones still reach the old
partitions); only then it deletes the apps nothing uses any more. The first deploy (nothing
served) starts the ingress together with them.

Resources are reserved on purpose (``plan_resources``); docs/serve.md gives the reasoning and
benchmarks/serve_load.py the measurements."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Collection, Optional, cast

import ray
from ray import serve
from ray.actor import ActorClass
from ray.serve._private.constants import SERVE_PROXY_NAME
from ray.serve.schema import ProxyStatus, ServeInstanceDetails

from mvr.pipeline.config import ServeConfig
from mvr.pipeline.ray_runtime import init_ray
from mvr.pipeline.retrieval.layout import ServingLayout
from mvr.pipeline.serving.api import SearchService
from mvr.pipeline.serving.deployment import Deployment, ReplicaPlan, ResourcePlan
from mvr.pipeline.serving.guard import token_digest
from mvr.pipeline.serving.partition import FirstPartitionServer, PartitionServer
from mvr.pipeline.serving.query_encoder import QueryEncoderServer
from mvr.pipeline.serving.switchboard import NAMESPACE, served_layout, switchboard, switchboard_name
from mvr.storage.integrity import require_intact
from mvr.storage.manifest import Manifest, load_manifest
from mvr.storage.verify import expected_files

if TYPE_CHECKING:
    from ray.serve._private.client import ServeControllerClient

# Replicas a deployment that loads partitions (``Partition{i}``, or the ingress holding them)
# starts before its deploy fails when each raises (Serve's default: 3 a replica, up to 20):
# loading the same damaged files again fails again, so the first failure ends the deploy
# (``start_failure``) rather than a loop of restarts. A replica that dies once it has
# started is still restarted.
LOADS_ONCE: dict[str, Any] = {"max_constructor_retry_count": 1}


def plan_resources(config: ServeConfig, n_partitions: int) -> ResourcePlan:
    """Replica reservations from the cluster's resources, where the config leaves them unset.

    One index version (encoder + partitions + ingress) reserves at most ``cluster_share`` of
    the cluster's CPUs, so the next version can start beside it during a switch. Inside that
    share: the encoder takes 40% (at most 4 CPUs; on a GPU cluster a GPU and 1 CPU) and runs
    torch on all of a node's cores, since queries come one at a time between batches; the
    partitions split 50% (at most 1 CPU each) and run 1 thread each, since a query's
    partitions work side by side. With the encoder in the ingress (``encoder.placement``), the
    ingress replicas take the encoder's reservation and threads on top of their own.
    Reservations are logical: they decide placement, the threads decide the work."""
    resources = ray.cluster_resources()
    cpus, gpus = float(resources.get("CPU", 1)), float(resources.get("GPU", 0))
    node_cpus = max((n["Resources"].get("CPU", 1) for n in ray.nodes() if n.get("Alive")), default=cpus)
    share = config.cluster_share * cpus
    e, p, s = config.encoder, config.partition, config.searcher
    enc_gpus = e.num_gpus if e.num_gpus is not None else (1.0 if gpus else 0.0)
    enc_cpus = e.num_cpus or (1.0 if enc_gpus else round(min(4.0, 0.4 * share / e.replicas), 3))
    enc_threads = e.threads or (None if enc_gpus else int(node_cpus))
    part_cpus = p.num_cpus or round(min(1.0, 0.5 * share / (max(1, n_partitions) * p.replicas)), 3)
    part_threads = p.threads or max(1, int(part_cpus))
    searcher = ReplicaPlan(s.replicas, s.num_cpus or 0.1, 0.0, s.threads, s.max_ongoing_requests)
    if e.placement == "ingress":  # the ingress replicas encode: each takes the encoder's reservation as well
        searcher = ReplicaPlan(max(s.replicas, e.replicas), round(searcher.num_cpus + enc_cpus, 3), enc_gpus, enc_threads, s.max_ongoing_requests)
    if p.placement == "ingress":  # ... and holds every partition: their reservations as well
        searcher = replace(searcher, replicas=max(searcher.replicas, p.replicas), num_cpus=round(searcher.num_cpus + n_partitions * part_cpus, 3))
    return ResourcePlan(
        ReplicaPlan(e.replicas, enc_cpus, enc_gpus, enc_threads, e.max_ongoing_requests),
        ReplicaPlan(p.replicas, part_cpus, 0.0, part_threads, p.max_ongoing_requests),
        searcher,
    )


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:10]


def encoder_digest(config: ServeConfig, manifest: Manifest, plan: ResourcePlan) -> str:
    """What the query encoder loads and reserves (model, query settings, codecs, batching)."""
    model = {k: manifest.config.get(k) for k in ("model", "tokenizer", "compress")}
    codecs = sorted((g, c["sha256"]) for g, c in manifest.codecs.items())
    return _digest([model, manifest.model.get("fingerprint"), codecs, plan.encoder, config.encoder.max_batch_size, config.encoder.batch_wait_ms])


def ingress_digest(config: ServeConfig, manifest: Manifest, plan: ResourcePlan, encoder_app: Optional[str], token_sha256: Optional[str]) -> str:
    """What a version switch in place keeps of the ingress: its configuration, its encoder
    (its app, or what it loads itself), its token and its reservations. A new version with the
    same digest is switched to by the running replicas (``pipeline/serving/switchboard.py``);
    any other change starts new ones."""
    return _digest([config.model_dump(mode="json"), encoder_app, encoder_digest(config, manifest, plan), token_sha256, plan.searcher])


def app_names(config: ServeConfig, manifest: Manifest, layout: ServingLayout, plan: ResourcePlan) -> tuple[Optional[str], Optional[str]]:
    """(encoder app, index app) names: a change in what they load or reserve changes the name.
    No encoder app (None) when the encoder runs in the ingress, no index app when the
    partitions do."""
    enc = encoder_digest(config, manifest, plan)
    idx = _digest([layout.tag, plan.partition, sorted((g, c["sha256"]) for g, c in manifest.codecs.items())])
    enc_name = f"{config.app_name}-encoder-{enc}" if config.encoder.placement == "deployment" else None
    idx_name = f"{config.app_name}-index-v{layout.version}-{idx}" if config.partition.placement == "deployment" else None
    return enc_name, idx_name


def encoder_app(index_url: str, manifest: Manifest, config: ServeConfig, plan: ReplicaPlan) -> serve.Application:
    e = config.encoder
    # @serve.deployment made the class a Deployment (mypy keeps a decorated class's own type)
    return cast(serve.Deployment, QueryEncoderServer).options(**plan.options()).bind(index_url, manifest, plan.threads, e.max_batch_size, e.batch_wait_ms / 1e3)


def index_app(layout: ServingLayout, manifest: Manifest, config: ServeConfig, plan: ReplicaPlan) -> serve.Application:
    """The ``Partition{i}`` deployments of ``layout``, ``Partition0`` the app's ingress."""
    first, *rest = layout.shards
    others = [PartitionServer.options(**plan.options(f"Partition{s.index}"), **LOADS_ONCE).bind(layout.index_url, s, manifest, plan.threads) for s in rest]
    ingress = FirstPartitionServer.options(**plan.options(f"Partition{first.index}"), **LOADS_ONCE)
    return ingress.bind(layout.index_url, first, manifest, plan.threads, *others)


def http_url(config: ServeConfig, host: Optional[str] = None, port: Optional[int] = None) -> str:
    """The URL of ``config``'s proxy (or of a replica at ``host``:``port``, its node's address,
    with ``direct_ingress``); a wildcard listening host is reached at its node's address (the
    proxy: loopback)."""
    if config.host not in ("0.0.0.0", "::"):
        host = config.host
    return f"http://{host or '127.0.0.1'}:{port or config.port}"


DIRECT_INGRESS_ENV = "RAY_SERVE_ENABLE_DIRECT_INGRESS"


# Serve's proxy deaths while it starts that ``start_serve`` waits through (Serve's controller
# kills a proxy whose readiness check fails 3 times, 5 s each the first time, and starts another)
SERVE_START_ATTEMPTS = 3
PROXY_START_TIMEOUT_S = 180.0  # one attempt's wait for the proxies (Serve's own checks end it sooner)


class ProxyDied(RuntimeError):
    """A Serve HTTP proxy (the actor ``actor_id``) died before it was ready."""

    def __init__(self, actor_id: Optional[str], reason: str) -> None:
        self.actor_id = actor_id
        super().__init__(reason)


def start_serve(config: ServeConfig, address: Optional[str] = None, log: Callable[[str], None] = print) -> None:
    """Connect to (or start) Ray, start Serve's HTTP proxies on ``config``'s host and port
    (on every node, or the head only: ``config.proxy_location``) and wait until they are
    ready. A proxy that dies while it starts (Serve's controller kills one whose readiness
    check keeps timing out, as under load, and starts another) is waited through, up to
    ``SERVE_START_ATTEMPTS`` starts in all; then its error is raised. With
    ``direct_ingress``, a Ray started here gets Serve's direct ingress switched on (a
    cluster's own ``ray start`` environment must have it: ``direct_urls`` says when it does
    not)."""
    if config.direct_ingress and not ray.is_initialized() and not (address or os.environ.get("RAY_ADDRESS")):
        os.environ.setdefault(DIRECT_INGRESS_ENV, "1")  # read by the controller and replicas Ray starts
    init_ray(address)
    dead: set[str] = set()  # proxies known dead: their replacements are waited for, not counted again
    for attempt in range(1, SERVE_START_ATTEMPTS + 1):
        try:
            # waits for the proxies it starts; once Serve runs (an earlier attempt), only connects
            serve.start(proxy_location=config.proxy_location, http_options={"host": config.host, "port": config.port})
            wait_proxies_ready(dead)
            check_listening(config)
            return
        except (ray.exceptions.RayActorError, ProxyDied) as exc:
            if not isinstance(exc, ProxyDied) and SERVE_PROXY_NAME not in str(exc):
                raise  # not a proxy (the controller)
            if attempt == SERVE_START_ATTEMPTS:
                raise
            if exc.actor_id:  # Ray's actor errors may carry none
                dead.add(exc.actor_id)
            log(f"Serve's HTTP proxy died while starting; waiting for the one Serve starts in its place (attempt {attempt + 1} of {SERVE_START_ATTEMPTS})")


def check_listening(config: ServeConfig) -> None:
    """Refuse a ``config`` whose host or port is not where this cluster's Serve listens: Serve
    runs one set of HTTP proxies a Ray cluster, started by the first ``serve.start`` (a
    joined cluster may already run one), and ignores the HTTP options of later starts, so the
    service would answer at another URL than the one ``deploy`` reports."""
    http = _serve_client().http_config
    if (http.host, http.port) != (config.host, config.port):
        raise ValueError(
            f"Serve already runs on this Ray cluster with its HTTP proxy on {http.host}:{http.port}, not {config.host}:{config.port}: "
            f"serve there (--host {http.host} --port {http.port}), or stop that Serve first (serve shutdown)"
        )


def wait_proxies_ready(dead: Collection[str] = (), timeout_s: float = PROXY_START_TIMEOUT_S) -> None:
    """Wait until every Serve proxy has started (none STARTING or UNHEALTHY: each answers HTTP).
    ``ProxyDied`` when one seen starting is replaced meanwhile (Serve killed it: a
    replacement starts); a proxy whose actor is in ``dead`` is already known to be going.
    TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Optional[str]] = {}  # node → the proxy actor first seen there
    while True:
        proxies = ServeInstanceDetails(**_serve_client().get_serve_details()).proxies
        for node, p in proxies.items():
            first = seen.setdefault(node, p.actor_id)
            if first != p.actor_id and first not in dead:
                raise ProxyDied(first, f"Serve's HTTP proxy on node {node} (actor {first}) was replaced before it was ready")
            seen[node] = p.actor_id
        if proxies and all(p.status not in (ProxyStatus.STARTING, ProxyStatus.UNHEALTHY) for p in proxies.values()):
            return
        if time.monotonic() > deadline:
            states = ", ".join(f"{n}: {p.status.value}" for n, p in proxies.items())
            raise TimeoutError(f"Serve's HTTP proxies were not ready within {timeout_s:.0f} s ({states or 'none'})")
        time.sleep(0.1)


def _serve_client() -> ServeControllerClient:
    """Serve's controller client (``_get_global_client`` raises, never returns None, when no
    Serve runs: it is asked to)."""
    client = serve.context._get_global_client()
    assert client is not None
    return client


def _running(app: str) -> bool:
    status = serve.status().applications.get(app)
    return status is not None and str(getattr(status.status, "value", status.status)) == "RUNNING"


def wait_settled(app: str, timeout_s: float = 300.0) -> None:
    """Wait until ``app`` runs and none of its replicas is starting or stopping (a rolling
    update has finished: old ingress replicas have drained)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(app)
        if status is not None and _running(app):
            states = [str(getattr(s, "value", s)) for d in status.deployments.values() for s, n in d.replica_states.items() if n]
            if all(s == "RUNNING" for s in states):
                return
        time.sleep(0.25)
    raise TimeoutError(f"Serve application {app} did not settle within {timeout_s:.0f} s")


def deploy(
    index_url: str,
    config: ServeConfig,
    token: Optional[str] = None,
    log: Callable[[str], None] = print,
    address: Optional[str] = None,
    token_sha256: Optional[str] = None,
) -> Deployment:
    """Serve the index's current manifest at ``config.host:port``, replacing (without a
    refused query) whatever version this app served. ``token``: require it as a bearer token
    (or ``token_sha256``, its digest, as the reloader keeps it)."""
    t0 = time.perf_counter()
    manifest = load_manifest(index_url)
    layout = served_layout(index_url, manifest, config)
    check_served_files(index_url, manifest, layout)  # before anything starts
    start_serve(config, address, log)
    plan = plan_resources(config, len(layout.shards))
    enc_name, idx_name = app_names(config, manifest, layout, plan)
    targets = []
    apps = []
    if enc_name is not None:
        apps.append((enc_name, lambda: encoder_app(index_url, manifest, config, plan.encoder)))
    if idx_name is not None:
        apps.append((idx_name, lambda: index_app(layout, manifest, config, plan.partition)))
    for name, build in apps:
        if _running(name):
            log(f"{name}: already running, reused")
        else:
            log(f"{name}: starting")
            targets.append(serve.RunTarget(build(), name=name, route_prefix=None))
    digest = token_digest(token) if token else token_sha256
    in_ingress = manifest if enc_name is None or idx_name is None else None  # the ingress loads the encoder or the partitions itself
    fixed = ingress_digest(config, manifest, plan, enc_name, digest)
    board = switchboard(config.app_name, create=True)
    before = ray.get(board.get.remote())
    target = {"fixed": fixed, "version": layout.version, "index_app": idx_name}
    # a Deployment, as QueryEncoderServer in encoder_app
    ingress = (
        cast(serve.Deployment, SearchService)
        .options(**plan.searcher.options(), **(LOADS_ONCE if idx_name is None else {}))
        .bind(layout, config, enc_name, idx_name, digest, in_ingress, plan.searcher.threads, (reloader_name(config.app_name), NAMESPACE), fixed)
    )
    first = config.app_name not in serve.status().applications
    # the running replicas switch themselves: the same ingress, partitions in an index app
    in_place = not first and idx_name is not None and before is not None and before["fixed"] == fixed and _running(config.app_name)
    started = [t.name for t in targets] + ([config.app_name] if first else [])
    try:
        if first:
            # nothing served yet, so no query to keep answering: the ingress starts beside the
            # apps it calls (its replicas' start overlaps theirs) and the route opens when all run
            log(f"{config.app_name}: starting, routing / to index version {layout.version}")
            ray.get(board.set.remote(target))
            serve.run_many([*targets, serve.RunTarget(ingress, name=config.app_name, route_prefix="/")])
        else:
            if targets:  # started side by side; returns when both run
                serve.run_many(targets)
            ray.get(board.set.remote(target))
            if in_place:  # each replica builds the new version beside the old, swaps, drains, says so
                log(f"{config.app_name}: switching its replicas to index version {layout.version} in place")
                wait_switched(config.app_name, board, layout.version)
            else:  # the ingress rolls over to them: its old replicas still reach the old version
                log(f"{config.app_name}: routing / to index version {layout.version}")
                serve.run(ingress, name=config.app_name, route_prefix="/")
    except (RuntimeError, TimeoutError) as exc:  # an application failed to deploy: what it started goes, what served stays
        ray.get(board.set.remote(before))
        failure = start_failure([*started, config.app_name])  # an ingress holding partitions loads them too
        for a in started:
            log(f"{a}: failed to start, deleted")
            serve.delete(a)
        if failure is None:
            raise
        raise failure from exc
    wait_settled(config.app_name)
    removed = [a for a in serve.status().applications if _owned(config, a) and a not in (config.app_name, enc_name, idx_name)]
    for a in removed:
        log(f"{a}: no longer used, deleted")
        serve.delete(a)
    direct = direct_urls(config, plan.searcher.replicas) if config.direct_ingress else ()
    seconds = time.perf_counter() - t0
    return Deployment(
        http_url(config), index_url, layout.version, enc_name, idx_name, layout, plan, seconds, removed, direct, token_required=bool(token or token_sha256)
    )


def wait_switched(app_name: str, board: Any, version: int, timeout_s: float = 300.0) -> None:
    """Wait until every running ``Searcher`` replica of ``app_name`` has said (to ``board``)
    that it serves ``version``, its requests on the version before drained."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = serve.status().applications.get(app_name)
        states = status.deployments["Searcher"].replica_states if status is not None and "Searcher" in status.deployments else {}
        running = sum(int(n) for s, n in states.items() if str(getattr(s, "value", s)) == "RUNNING")
        if running and ray.get(board.acked.remote(version)) >= running:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replicas of {app_name} did not switch to index version {version} within {timeout_s:.0f} s")
        time.sleep(0.1)


def check_served_files(index_url: str, manifest: Manifest, layout: ServingLayout) -> None:
    """Refuse an index of which a file the layout's hosts (or its ingress) would load is
    missing or not the size its manifest lists: the ``IntegrityError`` search raises for the
    same damage, from a stat of each file (``mvr verify`` also compares checksums)."""
    served = tuple(e["path"].rstrip("/") + "/" for s in layout.shards for e in (*s.kinds.values(), *s.bm25.values()) if e is not None)
    files = [f for f in expected_files(manifest) if f.group != "rejects" and (not f.group.startswith(("ann ", "bm25")) or f.path.startswith(served))]
    require_intact(index_url, files, workers=8, sha256=False)


class ReplicaStartError(RuntimeError):
    """A replica of ``deployment`` (of the Serve application ``app``) raised while it started
    (a partition whose files a size check cannot fault, e.g. changed in place);
    ``remote_traceback``: its error as Serve reports it (the last line names the cause)."""

    def __init__(self, app: str, deployment: str, remote_traceback: str) -> None:
        self.app, self.deployment, self.remote_traceback = app, deployment, remote_traceback
        lines = remote_traceback.strip().splitlines()
        super().__init__(f"{deployment} of {app} failed to start: {lines[-1] if lines else 'no error reported'}")

    def __reduce__(self):  # pickled as its parts, so it crosses Ray calls (the reloader's)
        return (type(self), (self.app, self.deployment, self.remote_traceback))


def start_failure(apps: list[str]) -> Optional[ReplicaStartError]:
    """The failure of the first deployment of ``apps`` that Serve gave up starting (one that
    loads partitions starts a replica once: ``LOADS_ONCE``), or None."""
    status = serve.status().applications
    for app in dict.fromkeys(apps):
        for name, d in status[app].deployments.items() if app in status else ():
            if str(getattr(d.status, "value", d.status)) == "DEPLOY_FAILED" and d.message:
                return ReplicaStartError(app, name, d.message)
    return None


def direct_urls(config: ServeConfig, replicas: int, timeout_s: float = 30.0) -> tuple[str, ...]:
    """Each running ingress replica's own URL (Serve's direct ingress targets of
    ``config.app_name``, as a load balancer reads them), once ``replicas`` of them listen.
    RuntimeError naming the fix when none does within ``timeout_s`` (a cluster without
    direct ingress lists its proxies there, as does one whose replicas have no port yet)."""
    controller = _serve_client()._controller  # the target groups' one reader (Serve 2.60)
    deadline = time.monotonic() + timeout_s
    while True:
        groups = ray.get(controller.get_target_groups.remote(config.app_name))
        targets = [t for g in groups if str(getattr(g.protocol, "value", g.protocol)) == "HTTP" for t in g.targets]
        replica = sorted((t for t in targets if t.name.startswith("SERVE_REPLICA::")), key=lambda t: (t.ip, t.port))
        if replica and len(replica) >= replicas:
            return tuple(http_url(config, t.ip, t.port) for t in replica)
        if time.monotonic() > deadline:
            if replica:
                raise TimeoutError(f"{len(replica)} of {replicas} ingress replicas listen on their own port after {timeout_s:.0f} s")
            raise RuntimeError(
                f"direct_ingress is set but no ingress replica listens on its own port after {timeout_s:.0f} s: start the Ray "
                f"cluster's nodes with {DIRECT_INGRESS_ENV}=1 in their environment (ray_cluster.yaml), or set direct_ingress: false"
            )
        time.sleep(0.25)


def reloader_name(app_name: str) -> str:
    return f"{app_name}-reloader"


# max_concurrency is an actor option, which Ray's overloads of ray.remote (a task's options) leave out
@ray.remote(num_cpus=0, max_concurrency=4)  # type: ignore[call-overload]
class Reloader:
    """Follows the index's versions for one service (a detached actor beside Serve): ``reload``
    deploys the latest committed version when it is newer than the one served (``deploy``:
    the new version starts beside the old one, then the ingress rolls over, so no query is
    refused), on ``POST /admin/reload`` and, with ``reload_poll_s``, by polling."""

    def __init__(self, index_url: str, config: dict[str, Any], token_sha256: Optional[str], serving: int) -> None:
        import threading

        self.index_url, self.config, self.digest = index_url, ServeConfig.model_validate(config), token_sha256
        self.serving = serving
        self.lock = threading.Lock()
        self.last_error: Optional[str] = None
        if self.config.reload_poll_s:
            threading.Thread(target=self._poll, daemon=True).start()

    def reload(self) -> dict[str, Any]:
        """Deploy the latest version if it is newer; {"from", "to", "changed", "seconds"}."""
        from mvr.storage.manifest import read_manifest

        with self.lock:
            before = self.serving
            latest = read_manifest(self.index_url)
            if latest is None or latest.version <= self.serving:
                return {"from": before, "to": self.serving, "changed": False, "seconds": 0.0}
            d = deploy(self.index_url, self.config, None, log=lambda s: None, token_sha256=self.digest)
            self.serving = d.version
            return {"from": before, "to": d.version, "changed": True, "seconds": round(d.seconds, 2)}

    def serving_version(self) -> int:
        return self.serving

    def _poll(self) -> None:
        while True:
            assert self.config.reload_poll_s is not None  # polling starts only with reload_poll_s set
            time.sleep(float(self.config.reload_poll_s))
            try:
                self.reload()
                self.last_error = None
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"


def start_reloader(index_url: str, config: ServeConfig, token: Optional[str], serving: int) -> Any:
    """(Re)start the service's ``Reloader`` (a detached actor named after the app)."""
    name = reloader_name(config.app_name)
    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        pass
    # @ray.remote made the class an ActorClass (mypy keeps a decorated class's own type)
    return (
        cast(ActorClass[Reloader], Reloader)
        .options(name=name, namespace=NAMESPACE, lifetime="detached")
        .remote(index_url, config.model_dump(mode="json"), token_digest(token) if token else None, serving)
    )


def stop_reloader(config: ServeConfig) -> None:
    try:
        ray.kill(ray.get_actor(reloader_name(config.app_name), namespace=NAMESPACE))
    except ValueError:
        pass


def shutdown(config: Optional[ServeConfig] = None) -> None:
    """Delete this service's apps (``config.app_name`` and its encoder / index apps) and its
    reloader, or all of Serve when no config is given."""
    if config is None:
        serve.shutdown()
        return
    stop_reloader(config)
    try:
        ray.kill(ray.get_actor(switchboard_name(config.app_name), namespace=NAMESPACE))
    except ValueError:
        pass
    for a in list(serve.status().applications):
        if _owned(config, a):
            serve.delete(a)


def _owned(config: ServeConfig, app: str) -> bool:
    """``app`` is this service's ingress, or one of its encoder or index apps."""
    return app == config.app_name or app.startswith((f"{config.app_name}-encoder-", f"{config.app_name}-index-"))
