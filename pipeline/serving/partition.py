"""The Serve deployments of an index version's app: ``Partition{i}``, each a partition host
holding one passage range (``pipeline/retrieval/host.py``), and ``IndexVersion``, the app's
ingress that holds their handles. Apart from the query encoder
(``pipeline/serving/query_encoder.py``) and the HTTP ingress (``pipeline/serving/api.py``):
their replicas import neither the model code nor the HTTP ingress, so the ``IndexVersion``
replica that each version switch starts imports in 2.2 s instead of 4.7 s (docs/serve.md);
torch comes in only with the scoring kernels a partition loads (``operators/retrieval/kernels.py``).
The apps are built and deployed by ``pipeline/serving/app.py``."""

from __future__ import annotations

from typing import Any, Optional

import ray
from ray import serve

from mvr.operators.retrieval.kernels import use_cuda
from mvr.pipeline.retrieval.host import PartitionHost
from mvr.pipeline.retrieval.layout import ShardSpec
from mvr.storage.manifest import Manifest


class ServedPartition(PartitionHost):
    """A partition host in its own replica: exact scoring on CUDA only when Ray gave the
    replica a GPU (Ray leaves every GPU visible to a worker that reserved none, and the
    encoder replica holds the GPU it reserved)."""

    def __init__(self, index_url: str, shard: ShardSpec, manifest: Manifest, threads: Optional[int]) -> None:
        use_cuda(bool(ray.is_initialized() and ray.get_gpu_ids()))
        super().__init__(index_url, shard, manifest, threads)


# the deployment of one partition (``partition.placement: deployment``, the default)
PartitionServer = serve.deployment(name="Partition", max_surge_percent=100, health_check_period_s=2)(ServedPartition)


@serve.deployment(name="IndexVersion", ray_actor_options={"num_cpus": 0})
class IndexVersion:
    """Ingress of an index version's app (Serve apps need one): holds the ``Partition{i}``
    deployments and reports on them."""

    def __init__(self, version: int, *partitions: Any) -> None:
        self.version = version
        self.partitions = partitions

    async def info(self) -> dict[str, Any]:
        return {"version": self.version, "partitions": [await p.info.remote() for p in self.partitions]}
