"""The Serve deployments of an index version's app: ``Partition{i}``, each a partition host
holding one passage range (``pipeline/retrieval/host.py``). ``Partition0`` is also the app's
ingress (Serve apps need one): it is given the other partitions' handles, so that the app
starts no replica besides its partitions. Apart from the query encoder
(``pipeline/serving/query_encoder.py``) and the HTTP ingress (``pipeline/serving/api.py``):
their replicas import neither the model code nor the HTTP ingress; torch comes in only with
the scoring kernels a partition loads (``operators/kernels.py``). The apps are built and
deployed by ``pipeline/serving/app.py``."""

from __future__ import annotations

from typing import Any, Optional

from ray import serve

from mvr.pipeline.retrieval.host import PartitionHost
from mvr.pipeline.retrieval.layout import ShardSpec
from mvr.storage.manifest import Manifest


class FirstPartition(PartitionHost):
    """``Partition0``: a partition host that is its index app's ingress, holding the handles of
    the app's other partitions (Serve deploys what an app's ingress is bound to)."""

    def __init__(self, index_url: str, shard: ShardSpec, manifest: Manifest, threads: Optional[int] = None, *others: Any) -> None:
        super().__init__(index_url, shard, manifest, threads)
        self.others = others


# the deployment of one partition (``partition.placement: deployment``, the default). Its
# exact scoring stays on the CPU, a GPU given to the replica or not: the CUDA matmul was
# measured slower than the CPU's (``operators.kernels``, docs/gpu.md)
PartitionServer = serve.deployment(name="Partition", max_surge_percent=100, health_check_period_s=2)(PartitionHost)
FirstPartitionServer = serve.deployment(name="Partition", max_surge_percent=100, health_check_period_s=2)(FirstPartition)
