"""The search core, in-process and free of HTTP: encode a query, ask every partition of the
mode for candidates, rescore them exactly where the vectors are, merge the partitions' ranked
documents, and report per-stage timings. The Serve ingress (``pipeline/serving/api.py``)
runs the same steps with the partitions in their own deployments.

A dense mode is answered by its ANN partitions when the manifest lists them (``mvr
build-ann``), and otherwise, or with ``SearchConfig.exact``, by brute force over every passage
(the exact reference); ``SearchResult.path`` says which. ``bm25`` is answered by the BM25
partitions (exact: their scores are the collection's); ``hybrid`` by a dense mode's
partitions and the BM25 partitions over the same passages (``operators/fusion.py``).

A metadata filter (``filter`` expression and / or ``doc_ids``, docs/filters.md) becomes the
sorted global numbers of the passages it allows (the catalog, ``Restriction``), each
partition's share of them its allowed rows, applied in candidate generation
(``filtered_search``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections import OrderedDict
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from pydantic import ValidationError

from operators.codecs import Codec
from operators.bm25 import Analyzer, BM25Partition
from operators.compress import projection_matrix
from operators.encoder import TokenEncoder
from operators import candidates as first_stage_ops
from operators.candidates import FirstStage
from operators.fusion import HybridParams, ScoredPassages, fuse, side_by_side
from operators.partition import Partition, PartitionResult, allowed_rows
from operators.query import EncodedQuery, QueryEncoder
from operators.ranking import Ranked, merge
from operators.scoring import MODE_VECTORS, MODES, check_mode, check_search_mode, first_stage_vectors
from operators.tokenizer import PassageTokenizer
from pipeline.config import BM25Config, FirstStageConfig, HybridConfig, IndexConfig, SearchConfig
from storage.bm25_partitions import load_bm25_partition, tiling
from storage.catalog import Catalog
from storage.codec_file import load_codecs
from storage.manifest import Manifest, load_manifest
from storage.partitions import exact_partition, load_partition

MAX_K = 1000
MAX_QUERY_CHARS = 4096
KNOBS = ("k_prime", "candidate_cap", "probe_fraction", "nprobe", "leaves_to_search", "reorder_k")
HYBRID_KNOBS = ("dense", "fusion", "lam", "rrf_k", "n_best")


@dataclass(frozen=True)
class Restriction:
    """What a filter allows: ``passages``, the sorted global numbers of the passages of the
    documents that pass it (the catalog's answer, ``Catalog.allowed_passages``)."""

    passages: np.ndarray
    filter: Optional[str] = None
    doc_ids: Optional[tuple[str, ...]] = None

    def __len__(self) -> int:
        return len(self.passages)

    def rows(self, first_passage: int, count: int) -> np.ndarray:
        """The allowed rows of a partition of passages [first_passage, first_passage + count)."""
        return allowed_rows(self.passages, first_passage, count)


def resolve_restriction(catalog: Catalog, filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> Optional[Restriction]:
    """The passages a request's ``filter`` and ``doc_ids`` allow (None when it has neither);
    ``FilterError`` (a ValueError) for an invalid filter."""
    if filter is None and doc_ids is None:
        return None
    return Restriction(catalog.allowed_passages(filter, doc_ids), filter, tuple(doc_ids) if doc_ids is not None else None)


def filtered_exact(n_allowed: int, fs: FirstStage, k: int) -> bool:
    """Whether a filter allowing ``n_allowed`` passages goes straight to exact scoring of
    them: when they are no more than the passages the ANN path would rescore anyway
    (``candidate_cap`` for a top-``k`` search, ``FirstStage.budget``)."""
    return n_allowed <= fs.budget(k)[1]


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
    allowed_passages: Optional[int] = None  # with a filter: the passages it allows

    def hits(self) -> list[tuple[str, float]]:
        return [(d, float(s)) for d, s in zip(self.ranked.doc_ids, self.ranked.scores)]


def validate_request(query: Any, k: Any, mode: Any = "maxsim") -> None:
    """ValueError naming the problem: empty or over-long query, query that is not text
    (``check_query_text``), k outside 1..MAX_K, unknown mode."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query has {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    check_query_text(query)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    check_search_mode(mode)


def check_query_text(query: str) -> None:
    """ValueError unless ``query`` is text the tokenizer takes: no lone surrogate (JSON's
    ``"\\ud800"`` escape decodes to one; it is not encodable as UTF-8 and the tokenizer raises)
    and at least one printable character (control and format characters alone, which the
    tokenizer drops, leave an empty query)."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"the query is not valid Unicode text: a lone surrogate (U+{ord(query[e.start]):04X}) at character {e.start}"
        ) from None
    if not any(ch.isprintable() and not ch.isspace() for ch in query):
        raise ValueError("the query is empty: it has no printable character")


def first_stage(defaults: FirstStageConfig, knobs: dict[str, Any]) -> FirstStage:
    """A mode's first-stage settings with a request's knob overrides (validated)."""
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown search knob(s) {unknown}; accepted: {', '.join(KNOBS)}")
    try:
        cfg = FirstStageConfig.model_validate({**defaults.model_dump(), **{k: v for k, v in knobs.items() if v is not None}})
    except ValidationError as e:
        raise ValueError(_errors(e)) from None
    return cfg.first_stage()


def _errors(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())


def request_settings(config: SearchConfig, mode: str, knobs: dict[str, Any]) -> tuple[Optional[FirstStage], Optional[HybridParams]]:
    """A request's validated settings: the first stage of its dense mode (None for ``bm25``)
    and, for ``hybrid``, the fusion settings (the config's, with the request's overrides)."""
    if check_search_mode(mode) == "bm25":
        if any(v is not None for v in knobs.values()):
            raise ValueError(f"mode bm25 takes no search knobs, got {sorted(knobs)}")
        return None, None
    if mode != "hybrid":
        return first_stage(config.for_mode(mode), knobs), None
    overrides = {k: v for k, v in knobs.items() if k in HYBRID_KNOBS and v is not None}
    try:
        params = HybridConfig.model_validate({**config.hybrid.model_dump(), **overrides}).params()
    except ValidationError as e:
        raise ValueError(_errors(e)) from None
    rest = {k: v for k, v in knobs.items() if k not in HYBRID_KNOBS}
    return first_stage(config.for_mode(params.dense), rest), params


def load_bm25(index_url: str, manifest: Manifest) -> tuple[list[BM25Partition], Analyzer]:
    """The index's BM25 partitions and the analyzer they were built with; ValueError saying
    how to build them when the index has none."""
    entry = manifest.bm25
    if not entry:
        raise ValueError(
            f"{index_url} has no BM25 partitions, so modes bm25 and hybrid cannot be answered: build them with "
            "`mvr build-bm25 INDEX` (mvr build-ann builds them too)"
        )
    cfg = BM25Config.model_validate(entry["config"])
    return [load_bm25_partition(index_url, e, tombstones=manifest.tombstones) for e in entry["partitions"]], Analyzer(cfg.stopwords, cfg.stemmer)


def index_query_encoder(index_url: str, manifest: Manifest, encoder: Optional[TokenEncoder] = None) -> QueryEncoder:
    """The query encoder of the index at ``index_url``: its model, conventions, projection and
    codec (the codec file checked against the manifest)."""
    return load_query_encoder(manifest.config, encoder, load_codecs(index_url, manifest.codecs))


def load_query_encoder(index_config: dict[str, Any], encoder: Optional[TokenEncoder] = None, codecs: Optional[Mapping[str, Codec]] = None) -> QueryEncoder:
    """The query encoder an index was built for (same model, conventions and projection), from
    the index configuration its manifest stores (``Manifest.config``), projecting into the
    spaces of the ``codecs``' decoded vectors when given (``index_query_encoder``)."""
    config = IndexConfig.model_validate(index_config)
    encoder = encoder or TokenEncoder(config.model.name, config.model.device, config.model.dtype)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    c = config.compress
    projection = projection_matrix(encoder.dim, c.projection_dim, c.projection_seed) if c.projection_dim else None
    return QueryEncoder(encoder, tokenizer, projection, c.pooling, codecs)


def dense_ranges(manifest: Manifest, mode: str, exact: bool) -> list[tuple[int, int]]:
    """(first passage, passages) of each partition answering dense ``mode``."""
    entry = None if exact else manifest.ann.get(MODE_VECTORS[check_mode(mode)])
    if not entry:
        return [(0, int(manifest.counts.get("passages", 0)))]
    return [(int(e["first_passage"]), int(e["passages"])) for e in entry["partitions"]]


def load_partitions(index_url: str, manifest: Manifest, mode: str, config: SearchConfig, codecs: Mapping[str, Codec]) -> tuple[list[Partition], str]:
    """The partitions that answer dense ``mode`` and the path they take ("ann" or "exact"):
    the manifest's ANN partitions, or one brute-force partition over every passage (their
    codes mapped from the shards, decoded with the kind's codec when scored)."""
    kind = MODE_VECTORS[check_mode(mode)]
    entry = manifest.ann.get(kind)
    if config.exact or not entry:
        return [exact_partition(index_url, manifest, kind, codecs)], "exact"
    return [load_partition(index_url, kind, e, manifest, codecs) for e in entry["partitions"]], "ann"


def dense_rows(partitions: Sequence[Partition], mode: str, query: EncodedQuery, need: int, fs: FirstStage) -> list[Optional[np.ndarray]]:
    """The first stage over in-process partitions: candidate rows per partition (None: every
    passage, for exact partitions)."""
    if all(p.exact for p in partitions):
        return [None] * len(partitions)
    qv = first_stage_vectors(mode, query)
    n = sum(len(p) for p in partitions)
    rows, _ = first_stage_ops.candidates(lambda kp: [p.hits(qv, kp, fs.ann) for p in partitions], fs, need, n, sum(p.n_vectors for p in partitions))
    return rows


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


def filtered_search(
    partitions: Sequence[Partition], mode: str, query: EncodedQuery, k: int, fs: FirstStage, allowed: Sequence[np.ndarray]
) -> tuple[list[PartitionResult], dict[str, float], str]:
    """Both stages under a filter: ``allowed``, each partition's allowed rows (sorted).
    Returns each partition's result, the candidate / rescore milliseconds, and the path:

    - "exact" when the partitions are exact, or the filter allows few passages
      (``filtered_exact``): only the allowed passages are scored;
    - "ann" otherwise: each partition drops hits outside its allowed rows before the
      candidates are chosen (``Partition.hits``), k' starting scaled by the filter's
      selectivity (``CandidateRounds``), and rescores allowed candidates only;
    - "exact" again when that found fewer than k documents while some allowed passage was
      not rescored: then the allowed passages are scored exactly, so k results come back
      whenever k matching documents exist."""
    n_allowed = int(sum(len(a) for a in allowed))
    t0 = time.perf_counter()

    def exact() -> list[PartitionResult]:
        return [p.rank(mode, query, None, k, allowed=a) if len(a) else PartitionResult(Ranked(), 0, 0.0) for p, a in zip(partitions, allowed)]

    if all(p.exact for p in partitions) or filtered_exact(n_allowed, fs, k):
        results = exact()
        return results, {"candidates": 0.0, "rescore": (time.perf_counter() - t0) * 1e3}, "exact"
    qv = first_stage_vectors(mode, query)
    n = sum(len(p) for p in partitions)
    gather = lambda kp: [p.hits(qv, kp, fs.ann, allowed=a) for p, a in zip(partitions, allowed)]  # noqa: E731
    rows, _ = first_stage_ops.candidates(gather, fs, k, n, sum(p.n_vectors for p in partitions), n_allowed)
    t1 = time.perf_counter()
    results = [p.rank(mode, query, r, k, allowed=a) for p, r, a in zip(partitions, rows, allowed)]
    path = "ann"
    if len(merge([r.ranked for r in results], k)) < k and sum(r.candidates for r in results) < n_allowed:
        results, path = exact(), "exact"
    return results, {"candidates": (t1 - t0) * 1e3, "rescore": (time.perf_counter() - t1) * 1e3}, path


def search_partitions(partitions: Sequence[Partition], mode: str, query: EncodedQuery, k: int, fs: FirstStage) -> tuple[list[PartitionResult], dict[str, float]]:
    """Both stages over in-process partitions: each partition's result, and the wall-clock
    milliseconds of the candidate and rescoring stages."""
    t0 = time.perf_counter()
    rows = dense_rows(partitions, mode, query, k, fs)
    t1 = time.perf_counter()
    results = [p.rank(mode, query, r, k) for p, r in zip(partitions, rows)]
    return results, {"candidates": (t1 - t0) * 1e3, "rescore": (time.perf_counter() - t1) * 1e3}


class Searcher:
    """In-process search over an index: the modes' partitions held in this process.

    ``modes``: the modes to load (default: the four dense ones; ``bm25`` and ``hybrid`` need
    the index's BM25 partitions, ``hybrid`` also loads its dense mode); ``config``: first-stage
    and fusion knobs, or exact. ``paths`` tells, per mode, how it is answered ("ann",
    "exact", "bm25", or the dense path of a hybrid)."""

    def __init__(self, index_url: str, modes: Sequence[str] = MODES, config: Optional[SearchConfig] = None, encoder: Optional[TokenEncoder] = None) -> None:
        for m in modes:
            check_search_mode(m)
        self.index_url = index_url
        self.config = config or SearchConfig()
        self.manifest = load_manifest(index_url)
        self.partitions: dict[str, list[Partition]] = {}
        self.paths: dict[str, str] = {}
        self.bm25: list[BM25Partition] = []
        self.analyzer: Optional[Analyzer] = None
        self._tiles: dict[str, list[list[int]]] = {}
        self.sparse_modes = [m for m in ("bm25", "hybrid") if m in modes]
        if self.sparse_modes:  # first: an index without BM25 fails before any vector is read
            self.bm25, self.analyzer = load_bm25(index_url, self.manifest)
        dense = [m for m in dict.fromkeys(modes) if m in MODES]
        if "hybrid" in modes and self.config.hybrid.dense not in dense:
            dense.append(self.config.hybrid.dense)
        codecs = load_codecs(index_url, self.manifest.codecs)
        for m in dense:
            self.partitions[m], self.paths[m] = load_partitions(index_url, self.manifest, m, self.config, codecs)
        if self.sparse_modes:
            if "bm25" in modes:
                self.paths["bm25"] = "bm25"
            if "hybrid" in modes:
                self._hybrid_tiles(self.config.hybrid.dense)  # fail now when the partitions do not line up
                self.paths["hybrid"] = self.paths[self.config.hybrid.dense]
        self.query_encoder = load_query_encoder(self.manifest.config, encoder, codecs)
        self._catalog: Optional[Catalog] = None
        self._restrictions: "OrderedDict[tuple, Restriction]" = OrderedDict()

    RESTRICTIONS_KEPT = 16  # filters remembered (a run of queries usually repeats one)

    @property
    def catalog(self) -> Catalog:
        """The catalog of the version searched (opened on first use: filters)."""
        if self._catalog is None:
            self._catalog = Catalog(self.index_url, self.manifest.catalog)
        return self._catalog

    def restriction(self, filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None) -> Optional[Restriction]:
        """``resolve_restriction`` over this version's catalog, the last few remembered."""
        if filter is None and doc_ids is None:
            return None
        key = (filter, tuple(doc_ids) if doc_ids is not None else None)
        hit = self._restrictions.get(key)
        if hit is None:
            hit = resolve_restriction(self.catalog, filter, doc_ids)
            self._restrictions[key] = hit
            while len(self._restrictions) > self.RESTRICTIONS_KEPT:
                self._restrictions.popitem(last=False)
        else:
            self._restrictions.move_to_end(key)
        return hit

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.partitions) + tuple(self.sparse_modes)

    def partition_count(self, mode: str) -> int:
        """Partitions answering ``mode`` (a hybrid's: its dense mode's)."""
        if mode == "bm25":
            return len(self.bm25)
        return len(self.partitions[self.config.hybrid.dense if mode == "hybrid" else mode])

    def check(self, query: str, k: int, mode: str) -> None:
        validate_request(query, k, mode)
        if mode not in self.modes:
            raise ValueError(f"mode {mode!r} is not loaded by this searcher (it has {', '.join(self.modes)})")

    def encode(self, texts: Sequence[str]) -> list[EncodedQuery]:
        return self.query_encoder(list(texts))

    def _hybrid_tiles(self, dense: str) -> list[list[int]]:
        """Per partition of dense mode ``dense``, the BM25 partitions over its passages."""
        if dense not in self.partitions:
            raise ValueError(f"hybrid's dense mode {dense!r} is not loaded by this searcher (it has {', '.join(self.partitions)})")
        if dense not in self._tiles:
            ranges = dense_ranges(self.manifest, dense, self.paths[dense] == "exact")
            self._tiles[dense] = tiling(ranges, self.manifest.bm25["partitions"])
        return self._tiles[dense]

    def hybrid_passages(
        self, query: EncodedQuery, params: HybridParams, fs: FirstStage, restriction: Optional[Restriction] = None
    ) -> tuple[list[ScoredPassages], dict[str, float]]:
        """Each partition's part of the hybrid union (``operators.fusion.side_by_side``) and
        the candidate / rescore milliseconds; ``fuse`` them for any fusion setting. With a
        ``restriction`` both sides keep allowed passages only (the dense side's candidates as
        in ``filtered_search``: exact over the allowed passages when they are few)."""
        terms = self.analyzer([query.text])[0]
        parts = self.partitions[params.dense]
        tiles = self._hybrid_tiles(params.dense)
        ranges = dense_ranges(self.manifest, params.dense, self.paths[params.dense] == "exact")
        allowed = [restriction.rows(first, n) for first, n in ranges] if restriction is not None else [None] * len(parts)
        t0 = time.perf_counter()
        if restriction is None:
            rows = dense_rows(parts, params.dense, query, params.n_best, fs)
        elif all(p.exact for p in parts) or filtered_exact(len(restriction), fs, params.n_best):
            rows = list(allowed)
        else:
            qv = first_stage_vectors(params.dense, query)
            gather = lambda kp: [p.hits(qv, kp, fs.ann, allowed=a) for p, a in zip(parts, allowed)]  # noqa: E731
            rows, _ = first_stage_ops.candidates(gather, fs, params.n_best, sum(len(p) for p in parts), sum(p.n_vectors for p in parts), len(restriction))
        t1 = time.perf_counter()
        out = []
        for part, r, tile, (first, _), a in zip(parts, rows, tiles, ranges, allowed):
            sparse = np.concatenate([self.bm25[i].scores(terms) for i in tile])
            out.append(side_by_side(part, sparse, first, params.dense, query, r, params.n_best, allowed=a))
        return out, {"candidates": (t1 - t0) * 1e3, "rescore": (time.perf_counter() - t1) * 1e3}

    def search_encoded(
        self, query: EncodedQuery, k: int = 10, mode: str = "maxsim", encode_ms: float = 0.0, restriction: Optional[Restriction] = None, **knobs: Any
    ) -> SearchResult:
        """Answer an already encoded query (knobs: ``KNOBS``, overriding the config's; for
        ``hybrid`` also ``HYBRID_KNOBS``), among the passages ``restriction`` allows (None:
        all; ``Searcher.restriction`` makes one from a filter)."""
        self.check(query.text, k, mode)
        fs, hybrid = request_settings(self.config, mode, knobs)
        n_allowed = len(restriction) if restriction is not None else None
        if mode == "bm25":
            t0 = time.perf_counter()
            terms = self.analyzer([query.text])[0]
            entries = self.manifest.bm25["partitions"]
            if restriction is None:
                results = [p.rank(terms, k) for p in self.bm25]
            else:
                results = [p.rank(terms, k, allowed=restriction.rows(e["first_passage"], e["passages"])) for p, e in zip(self.bm25, entries)]
            timings = {"encode": encode_ms, "candidates": 0.0, "rescore": (time.perf_counter() - t0) * 1e3}
            result = merge_partition_results(query.text, mode, "bm25", k, results, len(results), timings)
            result.allowed_passages = n_allowed
            return result
        if mode == "hybrid":
            parts, timings = self.hybrid_passages(query, hybrid, fs, restriction)
            t0 = time.perf_counter()
            ranked, n = fuse(parts, hybrid, k)
            timings["rescore"] += (time.perf_counter() - t0) * 1e3
            fused = [PartitionResult(ranked, n, 0.0)]
            result = merge_partition_results(query.text, mode, self.paths[hybrid.dense], k, fused, len(parts), {"encode": encode_ms, **timings})
            result.partitions_answered = len(parts)  # every partition's part is in the one fused list
            result.allowed_passages = n_allowed
            return result
        parts = self.partitions[mode]
        path = self.paths[mode]
        if restriction is None:
            results, timings = search_partitions(parts, mode, query, k, fs)
        else:
            ranges = dense_ranges(self.manifest, mode, path == "exact")
            results, timings, path = filtered_search(parts, mode, query, k, fs, [restriction.rows(first, n) for first, n in ranges])
        result = merge_partition_results(query.text, mode, path, k, results, len(parts), {"encode": encode_ms, **timings})
        result.allowed_passages = n_allowed
        return result

    def search_encoded_batch(
        self,
        queries: Sequence[EncodedQuery],
        k: int = 10,
        mode: str = "maxsim",
        encode_ms: float | Sequence[float] = 0.0,
        restriction: Optional[Restriction] = None,
        **knobs: Any,
    ) -> list[SearchResult]:
        """``search_encoded`` of each query (``encode_ms``: one figure for all, or one a
        query), the same results. When the mode is answered exactly (exact partitions, or a
        filter allowing few passages, ``filtered_exact``), every partition scores all the
        queries in one pass over its vectors (``Partition.rank_batch``: each block decoded
        once for every query, one matmul a block), and each result's rescore time is the
        batch's shared equally; otherwise (ANN, bm25, hybrid) the queries are answered one
        at a time."""
        ms = [float(encode_ms)] * len(queries) if np.ndim(encode_ms) == 0 else [float(m) for m in encode_ms]  # type: ignore[arg-type, union-attr]
        if len(ms) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(ms)} encode times")
        for q in queries:
            self.check(q.text, k, mode)
        fs, _ = request_settings(self.config, mode, knobs)
        parts = self.partitions.get(mode, [])
        exact = mode in MODES and (
            all(p.exact for p in parts) or (restriction is not None and filtered_exact(len(restriction), fs, k))
        )
        if not exact or not queries:
            return [self.search_encoded(q, k, mode, m, restriction, **knobs) for q, m in zip(queries, ms)]
        t0 = time.perf_counter()
        if restriction is None:
            allowed: list[Optional[np.ndarray]] = [None] * len(parts)
        else:
            ranges = dense_ranges(self.manifest, mode, self.paths[mode] == "exact")
            allowed = [restriction.rows(first, n) for first, n in ranges]
        nothing = [PartitionResult(Ranked(), 0, 0.0)] * len(queries)
        per_part = [p.rank_batch(mode, queries, k, allowed=a) if a is None or len(a) else nothing for p, a in zip(parts, allowed)]
        rescore = (time.perf_counter() - t0) * 1e3 / len(queries)
        path = "exact" if restriction is not None else self.paths[mode]
        out = []
        for i, (q, m) in enumerate(zip(queries, ms)):
            result = merge_partition_results(q.text, mode, path, k, [r[i] for r in per_part], len(parts), {"encode": m, "candidates": 0.0, "rescore": rescore})
            result.allowed_passages = len(restriction) if restriction is not None else None
            out.append(result)
        return out

    def search(
        self, queries: Sequence[str], k: int = 10, mode: str = "maxsim", filter: Optional[str] = None, doc_ids: Optional[Sequence[str]] = None, **knobs: Any
    ) -> list[SearchResult]:
        """Answer each query on its own (encoded one at a time, as a service would), so the
        timings are per-query latencies. ``bm25`` needs no encoding. ``filter`` (an
        expression, docs/filters.md) and ``doc_ids``: only documents passing both are
        returned (``FilterError``, a ValueError, for an invalid one, before any query is
        encoded)."""
        for q in queries:
            self.check(q, k, mode)
        request_settings(self.config, mode, knobs)  # validate knobs before any work
        restriction = self.restriction(filter, doc_ids)
        out = []
        for q in queries:
            t0 = time.perf_counter()
            (encoded,) = [text_only(q)] if mode == "bm25" else self.encode([q])
            out.append(self.search_encoded(encoded, k, mode, (time.perf_counter() - t0) * 1e3, restriction, **knobs))
        return out


def text_only(text: str) -> EncodedQuery:
    """A query for ``bm25`` alone: its text, no vectors."""
    return EncodedQuery(text, np.zeros((0, 1), np.float32), np.zeros(1, np.float32))
