"""The Serve deployments of an index version's app: ``Partition{i}``, each holding one passage
range (``PartitionHost``), and ``IndexVersion``, the app's ingress that holds their handles.
Apart from the query encoder (``pipeline/serving/query_encoder.py``) and the HTTP ingress
(``pipeline/serving/api.py``): their replicas import neither the model code nor the HTTP
ingress, so the ``IndexVersion`` replica that each version switch starts imports in 2.2 s
instead of 4.7 s (docs/serve.md); torch comes in only with the scoring kernels a partition
loads (``operators/kernels.py``). The apps are built and deployed by ``pipeline/serving/app.py``."""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np
import ray
from ray import serve

from operators.ann import set_build_threads
from operators.candidates import first_trip
from operators.compress import l2_normalize
from operators.fusion import ScoredPassages, side_by_side
from operators.kernels import use_cuda
from operators.partition import Hits, Partition, PartitionResult, Scored
from operators.query import EncodedQuery
from operators.scoring import MODE_VECTORS, QueryVectors, first_stage_vectors
from pipeline.serving.fanout import run_many
from pipeline.serving.layout import ShardSpec
from storage.bm25_partitions import load_bm25_partition
from storage.codec_file import load_codecs
from storage.manifest import Manifest
from storage.partitions import exact_partition, load_partition


class PartitionHost:
    """One passage range of the index: for each served vector kind, its exact vectors, document
    ids and ANN index (or every passage, for a mode served exactly), and the BM25 partitions
    over its passages. Answers the two trips of a query (``operators/partition.py``): ``hits``
    and ``rank``, or ``hybrid`` in place of ``rank``; and ``bm25_rank``, BM25's one trip.
    Served as the ``Partition{i}`` deployment (``PartitionServer``), or held by the ingress
    itself (``partition.placement: ingress``, ``pipeline.serving.fanout.LocalPartition``)."""

    def __init__(self, index_url: str, shard: ShardSpec, manifest: Manifest, threads: Optional[int]) -> None:
        t0 = time.perf_counter()
        if threads:
            set_build_threads(threads)  # FAISS OpenMP threads (BLAS follows OMP_NUM_THREADS)
        # exact scoring on CUDA only in a replica Ray gave a GPU: Ray leaves every GPU visible
        # to a worker that reserved none, and the encoder replica holds the GPU it reserved
        use_cuda(bool(ray.is_initialized() and ray.get_gpu_ids()))
        codecs = load_codecs(index_url, manifest.codecs)
        self.shard = shard.index
        self.parts: dict[str, Partition] = {}
        for kind, entry in shard.kinds.items():
            if entry is None:
                self.parts[kind] = exact_partition(index_url, manifest, kind, codecs)
            else:
                self.parts[kind] = load_partition(index_url, kind, entry, manifest, codecs)
        self.bm25 = {i: load_bm25_partition(index_url, e, tombstones=manifest.tombstones) for i, e in shard.bm25.items()}
        self.bm25_own, self.sparse, self.first = shard.bm25_own, shard.sparse, shard.first
        self.load_s = time.perf_counter() - t0
        self._warm_up()

    def _warm_up(self) -> None:
        """One small search per kind, so lazy set-up (first BLAS / index calls) is not paid by
        the first query (it cost ~2 s there)."""
        rng = np.random.default_rng(0)
        for mode, kind in MODE_VECTORS.items():
            part = self.parts.get(kind)
            if part is None or not len(part):
                continue
            dim = part.dim
            tokens = l2_normalize(rng.standard_normal((4, dim)).astype(np.float32))
            query = EncodedQuery("warm up", tokens, tokens[0])
            rows = None if part.exact else np.unique(part.hits(first_stage_vectors(mode, query), 8).rows)
            part.rank(mode, query, rows, 10)
        for bm25 in self.bm25.values():
            bm25.rank(list(bm25.index.vocab_dict)[:2], 10)

    def _part(self, kind: str) -> Partition:
        part = self.parts.get(kind)
        if part is None:
            raise ValueError(f"partition {self.shard} holds no {kind} vectors (it has {', '.join(self.parts)})")
        return part

    def hits(self, kind: str, query_vectors: np.ndarray, k_prime: int, knobs: dict[str, Any], allowed: Optional[np.ndarray] = None) -> Hits:
        """First trip: each of the (n_q, dim) query vectors' ``k_prime`` nearest indexed vectors
        (among the ``allowed`` rows of a filter; None: all)."""
        return self._part(kind).hits(query_vectors, k_prime, knobs, allowed=allowed)

    def first_trip(
        self, mode: str, kind: str, query: QueryVectors, k_prime: int, knobs: dict[str, Any], share: tuple[int, int], allowed: Optional[np.ndarray] = None
    ) -> tuple[Hits, Scored]:
        """``hits`` and, in the same trip, the exact scores of this partition's likely share of
        the candidates (``operators.candidates.first_trip``), so most queries need no ``rank``."""
        return first_trip(self._part(kind), mode, query, k_prime, knobs, share, allowed)

    def rank(self, mode: str, kind: str, query: QueryVectors, rows: Optional[np.ndarray], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """Second trip: exact ``mode`` scores of the candidate ``rows`` (None: every passage)
        that are ``allowed`` (None: all), this partition's top-``k`` documents."""
        return self._part(kind).rank(mode, query, rows, k, allowed=allowed)

    def bm25_rank(self, terms: list[str], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult:
        """Mode bm25, one trip: this deployment's BM25 partition's top-``k`` documents (among
        its ``allowed`` rows; None: all)."""
        if self.bm25_own is None:
            raise ValueError(f"partition {self.shard} answers no bm25 queries")
        return self.bm25[self.bm25_own].rank(terms, k, allowed=allowed)

    def hybrid(
        self, mode: str, kind: str, query: QueryVectors, terms: list[str], rows: Optional[np.ndarray], n_best: int, allowed: Optional[np.ndarray] = None
    ) -> ScoredPassages:
        """Mode hybrid, second trip: this slice's part of the union (``operators.fusion.
        side_by_side``): its dense n-best among the candidate ``rows`` (None: every passage)
        and its BM25 n-best, each with both exact scores, both among the ``allowed`` rows."""
        part = self._part(kind)
        if kind not in self.sparse:
            raise ValueError(f"partition {self.shard} holds no BM25 side for its {kind} vectors")
        sparse = np.concatenate([self.bm25[i].scores(terms) for i in self.sparse[kind]])
        return side_by_side(part, sparse, self.first[kind], mode, query, rows, n_best, allowed=allowed)

    def many(self, calls: list[tuple[str, tuple]]) -> list[tuple[bool, Any]]:
        """Several trips in one call (``pipeline.serving.fanout``: the ingress coalesces the calls
        of one loop turn): each (method, args) answered as (True, result) or (False, error)."""
        return run_many(self, calls)

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "shard": self.shard,
            "load_s": round(self.load_s, 3),
            "kinds": {k: {"passages": len(p), "vectors": p.n_vectors, "exact": p.exact} for k, p in self.parts.items()},
            "bm25": {str(i): len(p) for i, p in self.bm25.items()},
        }


# the deployment of one partition (``partition.placement: deployment``, the default)
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
