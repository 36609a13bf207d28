"""The Serve deployment that holds the model: the query encoder (batched). It follows Ray's
batch-inference shape: load in ``__init__``, answer calls; it can also run inside the ingress
(``encoder.placement``). The partitions are ``pipeline/serving/partition.py``; the ingress that
composes them is ``pipeline/serving/api.py``; the apps are built and deployed by
``pipeline/serving/app.py``."""

from __future__ import annotations

import os
from typing import Any, Optional, Protocol, cast

import numpy as np
from ray import serve

from mvr.operators.encode.query import EncodedQuery
from mvr.pipeline.retrieval.searcher import index_query_encoder
from mvr.storage.manifest import Manifest


class QueryNotEncodable(ValueError):
    """What ``QueryEncoderServer.encode`` returns (not raises) for a text the encoder fails on
    while the texts batched with it encode: that request alone is refused (the ingress answers
    422), its batch-mates get their vectors."""


class _BatchSetters(Protocol):
    """The setters ``@serve.batch`` puts on the method it wraps (documented by Ray, missing
    from its annotation of the wrapper, a plain callable)."""

    def set_max_batch_size(self, size: int, /) -> None: ...

    def set_batch_wait_timeout_s(self, seconds: float, /) -> None: ...


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
        batching = cast(_BatchSetters, self.encode)  # Ray's annotation of a @serve.batch method lacks its setters
        batching.set_max_batch_size(max_batch_size)
        batching.set_batch_wait_timeout_s(batch_wait_s)
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
            return list(self.encoder(texts))  # a list that may hold refusals (the type of ``_one_by_one``'s)
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
