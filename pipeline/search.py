"""The search core, in-process and free of HTTP: encode a query, ask every partition of the
mode for candidates, rescore them exactly where the vectors are, merge the partitions' ranked
documents, and report per-stage timings. The Serve ingress (``pipeline/serve_api.py``)
runs the same steps with the partitions in their own deployments.

A mode is answered by its ANN partitions when the manifest lists them (``mvr build-ann``), and
otherwise, or with ``SearchConfig.exact``, by brute force over every passage (the exact
reference); ``SearchResult.path`` says which."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
from pydantic import ValidationError

from operators.compress import projection_matrix
from operators.encoder import TokenEncoder
from operators import candidates as first_stage_ops
from operators.candidates import FirstStage
from operators.partition import Partition, PartitionResult
from operators.query import EncodedQuery, QueryEncoder
from operators.ranking import Ranked, merge
from operators.scoring import MODE_VECTORS, MODES, check_mode, first_stage_vectors
from operators.tokenizer import PassageTokenizer
from pipeline.config import FirstStageConfig, IndexConfig, SearchConfig
from storage.manifest import Manifest, load_manifest
from storage.partitions import exact_partition, load_partition

MAX_K = 1000
MAX_QUERY_CHARS = 4096
KNOBS = ("k_prime", "candidate_cap", "probe_fraction", "nprobe", "leaves_to_search", "reorder_k")


@dataclass
class SearchResult:
    """One query's answer: ``ranked`` documents best first; ``path`` "ann" or "exact";
    ``candidates``: passages rescored over all partitions; ``timings_ms``: encode,
    candidates and rescore (summed over partitions), merge, total."""

    query: str
    mode: str
    ranked: Ranked
    path: str
    candidates: int
    partitions_answered: int
    partitions: int
    timings_ms: dict[str, float] = field(default_factory=dict)

    def hits(self) -> list[tuple[str, float]]:
        return [(d, float(s)) for d, s in zip(self.ranked.doc_ids, self.ranked.scores)]


def validate_request(query: Any, k: Any, mode: Any = "maxsim") -> None:
    """ValueError naming the problem: empty or over-long query, k outside 1..MAX_K, unknown mode."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query has {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    check_mode(mode)


def first_stage(defaults: FirstStageConfig, knobs: dict[str, Any]) -> FirstStage:
    """A mode's first-stage settings with a request's knob overrides (validated)."""
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown search knob(s) {unknown}; accepted: {', '.join(KNOBS)}")
    try:
        cfg = FirstStageConfig.model_validate({**defaults.model_dump(), **{k: v for k, v in knobs.items() if v is not None}})
    except ValidationError as e:
        raise ValueError("; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())) from None
    return cfg.first_stage()


def load_query_encoder(index_config: dict[str, Any], encoder: Optional[TokenEncoder] = None) -> QueryEncoder:
    """The query encoder an index was built for (same model, conventions and projection), from
    the index configuration its manifest stores (``Manifest.config``)."""
    config = IndexConfig.model_validate(index_config)
    encoder = encoder or TokenEncoder(config.model.name, config.model.device, config.model.dtype)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    c = config.compress
    projection = projection_matrix(encoder.dim, c.projection_dim, c.projection_seed) if c.projection_dim else None
    return QueryEncoder(encoder, tokenizer, projection, c.pooling)


def load_partitions(index_url: str, manifest: Manifest, mode: str, config: SearchConfig) -> tuple[list[Partition], str]:
    """The partitions that answer ``mode`` and the path they take ("ann" or "exact"): the
    manifest's ANN partitions, or one brute-force partition over every passage."""
    kind = MODE_VECTORS[check_mode(mode)]
    entry = manifest.ann.get(kind)
    if config.exact or not entry:
        return [exact_partition(index_url, manifest, kind)], "exact"
    return [load_partition(index_url, kind, e, np.dtype(config.vectors_dtype)) for e in entry["partitions"]], "ann"


def merge_partition_results(
    query: str, mode: str, path: str, k: int, results: Sequence[PartitionResult], partitions: int, timings: dict[str, float]
) -> SearchResult:
    """Merge the partitions' ranked documents into one answer. ``timings`` (ms, wall clock)
    brings encode, candidates and rescore; merge and total (their sum) are added."""
    t0 = time.perf_counter()
    ranked = merge([r.ranked for r in results], k)
    t = {name: timings.get(name, 0.0) for name in ("encode", "candidates", "rescore")}
    t["merge"] = (time.perf_counter() - t0) * 1e3
    t["total"] = sum(t.values())
    return SearchResult(query, mode, ranked, path, sum(r.candidates for r in results), len(results), partitions, {n: round(v, 3) for n, v in t.items()})


def search_partitions(partitions: Sequence[Partition], mode: str, query: EncodedQuery, k: int, fs: FirstStage) -> tuple[list[PartitionResult], dict[str, float]]:
    """Both stages over in-process partitions: each partition's result, and the wall-clock
    milliseconds of the candidate and rescoring stages."""
    t0 = time.perf_counter()
    if all(p.exact for p in partitions):
        rows: list = [None] * len(partitions)
    else:
        qv = first_stage_vectors(mode, query)
        n = sum(len(p) for p in partitions)
        rows, _ = first_stage_ops.candidates(
            lambda kp: [p.hits(qv, kp, fs.ann) for p in partitions], fs, k, n, sum(p.n_vectors for p in partitions)
        )
    t1 = time.perf_counter()
    results = [p.rank(mode, query, r, k) for p, r in zip(partitions, rows)]
    return results, {"candidates": (t1 - t0) * 1e3, "rescore": (time.perf_counter() - t1) * 1e3}


class Searcher:
    """In-process search over an index: the modes' partitions held in this process.

    ``modes``: the modes to load (default: all four); ``config``: first-stage knobs, or exact.
    ``paths`` tells, per mode, whether ANN partitions or brute force answer it."""

    def __init__(self, index_url: str, modes: Sequence[str] = MODES, config: Optional[SearchConfig] = None, encoder: Optional[TokenEncoder] = None) -> None:
        for m in modes:
            check_mode(m)
        self.index_url = index_url
        self.config = config or SearchConfig()
        self.manifest = load_manifest(index_url)
        self.partitions: dict[str, list[Partition]] = {}
        self.paths: dict[str, str] = {}
        for m in dict.fromkeys(modes):
            self.partitions[m], self.paths[m] = load_partitions(index_url, self.manifest, m, self.config)
        self.query_encoder = load_query_encoder(self.manifest.config, encoder)

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.partitions)

    def check(self, query: str, k: int, mode: str) -> None:
        validate_request(query, k, mode)
        if mode not in self.partitions:
            raise ValueError(f"mode {mode!r} is not loaded by this searcher (it has {', '.join(self.modes)})")

    def encode(self, texts: Sequence[str]) -> list[EncodedQuery]:
        return self.query_encoder(list(texts))

    def search_encoded(self, query: EncodedQuery, k: int = 10, mode: str = "maxsim", encode_ms: float = 0.0, **knobs: Any) -> SearchResult:
        """Answer an already encoded query (knobs: ``KNOBS``, overriding the config's)."""
        self.check(query.text, k, mode)
        fs = first_stage(self.config.for_mode(mode), knobs)
        parts = self.partitions[mode]
        results, timings = search_partitions(parts, mode, query, k, fs)
        return merge_partition_results(query.text, mode, self.paths[mode], k, results, len(parts), {"encode": encode_ms, **timings})

    def search(self, queries: Sequence[str], k: int = 10, mode: str = "maxsim", **knobs: Any) -> list[SearchResult]:
        """Answer each query on its own (encoded one at a time, as a service would), so the
        timings are per-query latencies."""
        for q in queries:
            self.check(q, k, mode)
        first_stage(self.config.for_mode(mode), knobs)  # validate knobs before any work
        out = []
        for q in queries:
            t0 = time.perf_counter()
            (encoded,) = self.encode([q])
            out.append(self.search_encoded(encoded, k, mode, (time.perf_counter() - t0) * 1e3, **knobs))
        return out
