"""The Serve deployments that hold the model and the vectors: the query encoder (batched) and
the partitions. Both follow Ray's batch-inference shape: load in ``__init__``, answer calls;
both can also run inside the ingress (``encoder.placement`` / ``partition.placement``).
The ingress that composes them is ``pipeline/serve_api.py``; the apps are built and deployed
by ``pipeline/serve_app.py``."""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np
from ray import serve

from operators.ann import set_build_threads
from operators.compress import l2_normalize
from operators.fusion import ScoredPassages, side_by_side
from operators.candidates import first_trip
from operators.partition import Hits, Partition, PartitionResult, Scored
from operators.query import EncodedQuery
from operators.scoring import MODE_VECTORS, QueryVectors, first_stage_vectors
from pipeline.search import index_query_encoder
from pipeline.serve_fanout import run_many
from pipeline.serve_layout import ShardSpec
from storage.bm25_partitions import load_bm25_partition
from storage.manifest import Manifest
from storage.codec_file import load_codecs
from storage.partitions import exact_partition, load_partition


class QueryNotEncodable(ValueError):
    """What ``QueryEncoderServer.encode`` returns (not raises) for a text the encoder fails on
    while the texts batched with it encode: that request alone is refused (the ingress answers
    422), its batch-mates get their vectors."""


class BatchedQueryEncoder:
    """The index's query encoder (model, ColBERT query conventions, projection) behind
    ``@serve.batch``: concurrent ``encode`` calls in one replica are grouped into one forward
    pass; a text that makes the pass fail fails alone. The pass runs on the replica's event
    loop: handing it to a thread measured slower under load in the ingress (the GIL shared
    with the loop's other requests; benchmarks/serve_load.py). Held by the ``Searcher``
    ingress (the default placement) or by the ``QueryEncoder`` deployment."""

    def __init__(self, index_url: str, manifest: Manifest, threads: Optional[int], max_batch_size: int, batch_wait_s: float) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.encoder = index_query_encoder(index_url, manifest)
        self.encode.set_max_batch_size(max_batch_size)
        self.encode.set_batch_wait_timeout_s(batch_wait_s)
        self.batches: list[int] = []  # sizes of the last batches, for /stats
        self.n_batches = 0
        self.split: list[tuple[int, int]] = []  # (batch size, texts refused) of the last batches encoded one by one
        self.encoder(["warm up"])  # first forward pass allocates; keep it out of the first query

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def encode(self, texts: list[str]) -> list[EncodedQuery | QueryNotEncodable]:
        """(one text per request) → that text's EncodedQuery (tokens (n_q, dim) float32), or a
        ``QueryNotEncodable`` for a text the encoder fails on. When the batch's pass raises,
        its texts are encoded one by one, so one bad text never fails the requests it was
        batched with; when every text fails and so does a known-good one, the encoder itself
        is broken and every request gets the error (the ingress answers 503)."""
        self.batches = (self.batches + [len(texts)])[-256:]
        self.n_batches += 1
        try:
            return self.encoder(texts)
        except Exception as batch_error:
            return self._one_by_one(texts, batch_error)

    def _one_by_one(self, texts: list[str], batch_error: Exception) -> list[EncodedQuery | QueryNotEncodable]:
        out: list[EncodedQuery | QueryNotEncodable] = []
        for text in texts:
            try:
                out.extend(self.encoder([text]))
            except Exception as e:
                out.append(QueryNotEncodable(f"the query encoder cannot take this text ({type(e).__name__}: {str(e)[:200]})"))
        refused = sum(isinstance(o, QueryNotEncodable) for o in out)
        if refused == len(texts):
            try:
                self.encoder(["warm up"])
            except Exception:
                raise batch_error from None
        self.split = (self.split + [(len(texts), refused)])[-256:]
        return out

    def info(self) -> dict[str, Any]:
        b = self.batches
        return {
            "pid": os.getpid(),
            "mean_batch": float(np.mean(b)) if b else 0.0,
            "max_batch": max(b, default=0),
            "batches": self.n_batches,
            "last_batches": b[-32:],
            "split_batches": [list(s) for s in self.split[-32:]],
        }


@serve.deployment(name="QueryEncoder", max_surge_percent=100, health_check_period_s=2)
class QueryEncoderServer:
    """The query encoder as its own deployment (``encoder.placement: deployment``): shared by
    the index versions built with the same model, scaled apart from the ingress, one more hop
    a query. ``encode(text)`` and ``info()`` are ``BatchedQueryEncoder``'s."""

    def __init__(self, index_url: str, manifest: Manifest, threads: Optional[int], max_batch_size: int, batch_wait_s: float) -> None:
        self.core = BatchedQueryEncoder(index_url, manifest, threads, max_batch_size, batch_wait_s)

    async def encode(self, text: str) -> EncodedQuery | QueryNotEncodable:
        return await self.core.encode(text)

    def info(self) -> dict[str, Any]:
        return self.core.info()


class PartitionHost:
    """One passage range of the index: for each served vector kind, its exact vectors, document
    ids and ANN index (or every passage, for a mode served exactly), and the BM25 partitions
    over its passages. Answers the two trips of a query (``operators/partition.py``): ``hits``
    and ``rank``, or ``hybrid`` in place of ``rank``; and ``bm25_rank``, BM25's one trip.
    Served as the ``Partition{i}`` deployment (``PartitionServer``), or held by the ingress
    itself (``partition.placement: ingress``, ``pipeline.serve_fanout.LocalPartition``)."""

    def __init__(self, index_url: str, shard: ShardSpec, manifest: Manifest, threads: Optional[int]) -> None:
        t0 = time.perf_counter()
        if threads:
            set_build_threads(threads)  # FAISS OpenMP threads (BLAS follows OMP_NUM_THREADS)
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
        """Several trips in one call (``pipeline.serve_fanout``: the ingress coalesces the calls
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
