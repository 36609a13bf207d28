"""What a deployment of an index reserves (``ReplicaPlan`` a deployment, ``ResourcePlan`` an
index version: ``app.plan_resources`` fills them in from the cluster) and what ``deploy`` put
up (``Deployment``, ``mvr.serve``'s result). No Ray here: the API's signatures name these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mvr.pipeline.retrieval.layout import ServingLayout

# Serve's low-latency settings (what RAY_SERVE_THROUGHPUT_OPTIMIZED sets for replicas): user
# code and handle routing on the replica's own event loop instead of extra threads, gRPC
# between handles and replicas, buffered request logs. Measured in benchmarks/serve_load.py.
# gRPC's messages between replicas may be as large as gRPC allows (2 GiB - 1, the bound Serve
# sets on its own gRPC proxy), not its default 4 MiB: a batch's encoded queries (256 queries of
# 32 token vectors of 384 float32 dims: 12.6 MB) and a partition's candidates for it (a
# query's token hits, k' a token) exceed 4 MiB, and the call fails.
REPLICA_ENV = {
    "OMP_WAIT_POLICY": "PASSIVE",  # see operators/__init__.py
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1",
    "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(2**31 - 1),
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000",
}


# No access log line per call (a query makes 4+ calls), warnings and errors still logged.
LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


@dataclass(frozen=True)
class ReplicaPlan:
    """What one replica of a deployment reserves and how many threads it runs."""

    replicas: int
    num_cpus: float
    num_gpus: float
    threads: Optional[int]
    max_ongoing_requests: int

    def options(self, name: Optional[str] = None) -> dict[str, Any]:
        env = dict(REPLICA_ENV)
        if self.threads:
            env.update({name: str(self.threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        actor: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "runtime_env": {"env_vars": env}}
        out: dict[str, Any] = {
            "num_replicas": self.replicas,
            "ray_actor_options": actor,
            "max_ongoing_requests": self.max_ongoing_requests,
            "logging_config": LOGGING,
        }
        if name:
            out["name"] = name
        return out


@dataclass(frozen=True)
class ResourcePlan:
    encoder: ReplicaPlan
    partition: ReplicaPlan
    searcher: ReplicaPlan


@dataclass
class Deployment:
    """What ``deploy`` put up: the URL, the index version and the apps serving it (no encoder
    app when the encoder runs in the ingress, no index app when the partitions do)."""

    url: str
    index_url: str
    version: int
    encoder_app: Optional[str]
    index_app: Optional[str]
    layout: ServingLayout
    resources: ResourcePlan
    seconds: float
    removed: list[str]
    direct_urls: tuple[str, ...] = ()  # with ``direct_ingress``: each ingress replica's own URL
    token_required: bool = False  # requests need the bearer token
