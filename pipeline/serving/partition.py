"""The Serve deployments of an index version's app: ``Partition{i}``, each a partition host
holding one passage range (``pipeline/retrieval/host.py``), and ``IndexVersion``, the app's
ingress that holds their handles. Apart from the query encoder
(``pipeline/serving/query_encoder.py``) and the HTTP ingress (``pipeline/serving/api.py``):
their replicas import neither the model code nor the HTTP ingress, so the ``IndexVersion``
replica that each version switch starts imports in 2.2 s instead of 4.7 s (docs/serve.md);
torch comes in only with the scoring kernels a partition loads (``operators/kernels.py``).
The apps are built and deployed by ``pipeline/serving/app.py``."""

from __future__ import annotations

from typing import Any

from ray import serve

from mvr.pipeline.retrieval.host import PartitionHost

# the deployment of one partition (``partition.placement: deployment``, the default). Its
# exact scoring stays on the CPU, a GPU given to the replica or not: the CUDA matmul was
# measured slower than the CPU's (``operators.kernels``, docs/gpu.md)
PartitionServer = serve.deployment(name="Partition", max_surge_percent=100, health_check_period_s=2)(PartitionHost)


@serve.deployment(name="IndexVersion", ray_actor_options={"num_cpus": 0})
class IndexVersion:
    """Ingress of an index version's app (Serve apps need one): holds the ``Partition{i}``
    deployments and reports on them."""

    def __init__(self, version: int, *partitions: Any) -> None:
        self.version = version
        self.partitions = partitions

    async def info(self) -> dict[str, Any]:
        return {"version": self.version, "partitions": [await p.info.remote() for p in self.partitions]}
