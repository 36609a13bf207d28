"""Capacity plan of an mvr index: storage bytes, RAM of a served partition, the number of
partitions for a RAM budget, and encode hours. Pure arithmetic on the formats of this
codebase and on figures measured on it (``MEASURED``, each with its source); no I/O.

Formats the arithmetic follows (schema v2, ``storage/schema.py``):

- a shard is two files: ``shards/X.parquet`` (passage metadata and text, zstd, no vectors)
  and ``shards/X.codes.arrow`` (Arrow IPC, uncompressed): per passage its token, first-m and
  centroid vectors as ``list<fixed_size_binary(bpv)>`` (bpv codes + a 4-byte int32 list offset
  a passage and list column) and its pooled vector as ``fixed_size_binary(bpv)``, where bpv is
  the bytes a vector of the kind's codec (tokens: the token codec; pooled and centroids: the pooled codec;
  first-m: its refinement's, beside the token codes of its positions, or the pooled codec without one)
  (``operators/codecs``; default ``auto``: ``pca-192+residual-1`` above 192 dims, 26 B at dim 384;
  ``residual-1`` above 128; ``residual-2`` at ≤ 128); one shard per ≤ 1,024 passages
  of an input block; codec files ``codecs/{tokens,pooled,first_m}.mvrc`` (``storage/codec_file.py``:
  the token vectors' codec, ``pq-{dim/2}`` by default for pooled and centroids, ``refine-{dim/4}``
  for first-m);
  ``manifest.json`` holds nothing per shard or passage: the shard list is a Parquet file beside it;
- an ANN partition (``storage/partitions.py``) holds ``passages.parquet`` (ids only: passage,
  doc_id, passage_idx) and its index over the *decoded* vectors, of the kind's codec's output
  dimension (``dim_out``: 192 for the default token codec at dim 384, dim for the other kinds): FAISS IVFPQ (``operators/ann/ivfpq.py``: per vector
  an m·nbits/8-byte code and an 8-byte id; coarse centroids nlist·dim·4; PQ centroids
  2^nbits·dim·4) or ScaNN (``operators/ann/scann_index.py``: per vector one byte per
  dims_per_block dimensions of AH codes on disk — half that in RAM, lut16 packs two a byte —
  and a 4-byte leaf token, plus the float32 vector only when built with a reorder stage,
  ``reorder_k`` > 0, not the default; leaf centres), both flat
  float32 below 4,096 vectors. One copy of the vectors: the shards' codes;
- a served partition (``operators/retrieval/partition.py``, ``operators/retrieval/stored_vectors.py``) holds per
  kind its ANN index, the passages' vector offsets (int64, n + 1), doc ids (Python strings)
  and passage_idx (int32) in RAM, and memory-maps its shards' codes files, decoding only the
  candidates it rescores; plus the BM25 partition over the same passages. The plan
  provisions RAM for the ANN indexes, id maps, offsets, BM25 and the process, and counts the
  codes as disk read through the page cache: ``ServeSettings.codes_hot_fraction`` (default 0)
  adds that fraction of the replica's codes as resident page cache.

Sizes are bytes (floats: averages × counts); GB/TB in the output are decimal (1e9, 1e12)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal, Optional

from mvr.operators import codecs
from mvr.operators.ann.base import ADD_BATCH
from mvr.operators.ann.defaults import (
    AH_CENTERS,
    BRUTE_FORCE_BELOW,
    SCATTER_BYTES_PER_ROW,
    SCATTER_ROWS,
    cell_bytes,
    default_m,
    default_nbits,
    default_nlist,
    default_num_leaves,
    training_sample_size,
)
from mvr.operators.retrieval.scoring import VECTOR_KINDS

LIST_KINDS = ("tokens", "centroids", "first-m")  # list<code> columns: an int32 offset a passage each
ANN_BACKENDS = ("faiss-ivfpq", "scann", "codec-ivf", "none")
# the configuration's defaults the plan assumes (pipeline/config.py, a layer above: a test holds them equal)
ROWS_PER_SHARD = 1024  # RuntimeConfig.write_rows_per_shard
CODEC_SAMPLE_VECTORS = 65_536  # CompressConfig.codec_sample_vectors
PY_STR_BYTES, PY_POINTER = 49, 8  # CPython: an ASCII str object is 49 + len bytes; a list slot 8


@dataclass(frozen=True)
class Measured:
    """A figure measured on this codebase: ``value`` in ``unit``, and how it was obtained."""

    value: float
    unit: str
    source: str


_IDX = "an msmarco-sample index built with the reference config (IndexConfig(), 5,000 passages, dim 384; 2026-11-23)"
_IDX2 = "the whole msmarco-sample indexed with IndexConfig() (schema 2, codecs: tokens auto = pca-64+residual-2, pooled int8; 2026-11-23)"
_IDX3 = "the whole msmarco-sample indexed with IndexConfig() of 2026-11-27 (tokens pca-192+residual-1, pooled int8, unit centroids, the encode record), then build-bm25 and build-ann (faiss-ivfpq, P = 1, four kinds)"
MEASURED: dict[str, Measured] = {
    "tokens_per_passage": Measured(80.63, "token vectors / passage", f"403,138 token vectors / 5,000 passages, manifest counts of {_IDX}"),
    "tokens_per_passage_colbert": Measured(
        71.86,
        "token vectors / passage",
        "PassageTokenizer with configs/colbert.yaml (180-token windows, [D] marker, punctuation vectors dropped) on msmarco-sample: 5,035 passages",
    ),
    "text_bytes_per_passage": Measured(358.1, "UTF-8 bytes / passage", "mean passage text of msmarco-sample (reference config)"),
    "text_stored_ratio": Measured(
        0.3909,
        "stored / raw text bytes",
        "zstd text column chunks over raw text, fitted with shard_chunk_bytes through two indexes: 708,416 B for 1,790,466 B in 5 shards "
        f"({_IDX2}) and 19,916 B for 37,822 B in 3 shards of ≤ 40 passages (its first 100 passages, tests/conftest.py msmarco_100)",
    ),
    "doc_id_chars": Measured(6.86, "characters / doc id", "mean msmarco-sample _id length"),
    "passage_meta_bytes": Measured(
        14.55,
        "bytes / passage",
        "doc_id, passage_idx, block_id, row_index, seq, title, char spans, n_tokens column chunks (zstd), fitted with shard_chunk_bytes: "
        "77,147 B / 5,000 passages in 5 shards and 4,089 B / 100 passages in 3 shards (the same two indexes)",
    ),
    "shard_chunk_bytes": Measured(
        2_588,
        "bytes / shard",
        "fixed cost of a Parquet shard's 10 column chunks (zstd frames, page headers, small-block compression loss): the two-point fit above "
        "(text 1,710 + other columns 878 B); it reproduces both indexes' column chunk bytes within 20 B",
    ),
    "shard_footer_bytes": Measured(3_209, "bytes / shard", f"Parquet file bytes not in any column chunk: 16,044 B over 5 shards, {_IDX2}"),
    "codes_file_overhead_bytes": Measured(
        1_894,
        "bytes / codes file",
        "codes file bytes not in the columns' 4 B/passage offsets and codes (the schema with the three codecs' names, batch header, "
        "footer, padding) + 3 × 4 B (a list column's n + 1st offset): 1,896, 1,894 and 1,892 B in the 3 files of tests/conftest.py "
        "msmarco_100 with the defaults of 2026-12-01 (first_m refine-96, pooled pq-192); 1,780 B with two codecs' names (2026-11-23)",
    ),
    "catalog_bytes_per_passage": Measured(
        321.0,
        "bytes / passage",
        "catalog.duckdb with global passage numbers and the documents table (2026-11-24), two points: 2,895,872 B at 5,000 passages "
        "(the whole msmarco-sample, IndexConfig(); no metadata) and 1,323,008 B at 100 (tests/conftest.py msmarco_100): (2,895,872 - 1,323,008) / 4,900",
    ),
    "catalog_fixed_bytes": Measured(1_290_908, "bytes", "the same two points: 1,323,008 B - 100 × 321 B (DuckDB's header and a first block a table and index)"),
    "manifest_fixed_bytes": Measured(
        3_887,
        "bytes",
        f"manifest.json less its ann and bm25 entries and all but its first history entry (config, model and its encode record, input, counts, two codecs, the shard list's entry): {_IDX3}",
    ),
    "shard_list_fixed_bytes": Measured(
        3_565,
        "bytes",
        "shard-lists/*.parquet: schema, footer and column chunks (zstd), a 1,000-shard list of this codebase's names and sha256 less 1,000 × the per-shard figure",
    ),
    "shard_list_bytes_per_shard": Measured(
        75.9,
        "bytes / shard",
        "shard-lists/*.parquet, zstd: (79,464 - 3,641) B / 999 shards (two hex sha256 a shard are most of it; 69.7 B at 976,563 synthetic shards)",
    ),
    "manifest_bytes_per_partition": Measured(
        1_695,
        "bytes / partition",
        f"an ANN or BM25 partition's manifest entry (path, files with bytes and sha256, build device; its build's params spread over its partitions): (12,635 - 4,161) B / 5 partitions, {_IDX3}",
    ),
    "codec_header_bytes": Measured(
        200,
        "bytes / codec file",
        "magic, version, JSON header and sha256 of a codec without arrays: codecs/pooled.mvrc (int8) of tests/conftest.py msmarco_100, 200 B",
    ),
    "codec_array_header_bytes": Measured(
        106.4,
        "bytes / array",
        f"each array's header entry (name, dtype, shape, offset, size) and its stage's parameters: codec.mvrc (pca-64+residual-2, "
        f"5 arrays) 2,197,752 B less its arrays 2,197,020 B = 732 B = 200 + 5 × 106.4, {_IDX2}",
    ),
    "partition_passage_bytes": Measured(
        8.41,
        "bytes / passage",
        "passage, doc_id, passage_idx columns (zstd), as bm25/*/passages.parquet: ann/*/passages.parquet of the whole msmarco-sample is 42,942 B, "
        "byte for byte the size of its BM25 passages.parquet (the BM25 figures below)",
    ),
    "partition_file_footer_bytes": Measured(1_013, "bytes / passages.parquet", "as the BM25 passages.parquet footer below"),
    "bm25_postings_per_passage": Measured(
        29.67, "postings / passage", "bm25s CSC: 148,350 nonzeros / 5,000 passages (English stopwords, Snowball), msmarco-sample"
    ),
    "bm25_terms_at_5000": Measured(12_338, "terms", "bm25s vocabulary of msmarco-sample's 5,000 passages"),
    "bm25_vocab_file_bytes_per_term": Measured(14.2, "bytes / term", "vocab.index.json 174,882 B / 12,338 terms"),
    "bm25_passages_file_bytes": Measured(
        8.41, "bytes / passage", "bm25/*/passages.parquet (passage, doc_id, passage_idx; zstd): (43,049 - 1,854) B / (5,000 - 100) msmarco-sample passages"
    ),
    "bm25_passages_file_footer_bytes": Measured(1_013, "bytes / passages.parquet", "the same two files: 1,854 B - 100 × 8.41 B"),
    "process_bytes": Measured(
        234e6,
        "bytes / partition replica",
        "RSS of a Ray actor after importing faiss, scann, bm25s and storage.partitions and loading one 5,000-passage pooled partition "
        "(242 MB) minus that partition's 8.6 MB of structures; Serve's replica wrapper not included (schema 1 measurement)",
    ),
    "load_peak_over_steady": Measured(
        0.0,
        "bytes",
        f"ru_maxrss minus VmRSS of a process after loading the four FAISS P=1 partitions and BM25 of {_IDX2}: -0.1 MB (no load peak above "
        "the steady size; steady +99 MB of which 53 MB anonymous); the plan keeps the loader's own transient as a bound (partition_ram)",
    ),
    "cpu_passages_per_s": Measured(
        46.9,
        "passages / s on 2 vCPUs",
        "'mvr index' row of `python benchmarks/encode_throughput.py -n 5000 --rounds 1` (docs/benchmarks.md, 2026-11-22): all 5,000 msmarco-sample "
        "passages, packaged all-MiniLM-L6-v2, 2-vCPU Xeon @ 2.50 GHz VM, no GPU, whole job (scan, tokenize, encode, compress, write, catalog, commit)",
    ),
}
GPU_NOT_MEASURED = "GPU encode throughput: not measured for mvr (the reference machine has no GPU); pass --gpu-passages-per-s for GPU-hours"
PAGE_CACHE_NOTE = (
    "provisioned RAM covers each replica's ANN indexes, id maps (offsets, doc ids, passage_idx), BM25 and process; the codes "
    "it memory-maps from the shards are disk read through the OS page cache, counted as resident only for --codes-hot-fraction "
    "(default 0: every rescored candidate may be a disk read)"
)


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Workload:
    """The collection and its vectors: ``passages`` (after splitting), mean stored token
    vectors a passage, encoder output ``dim`` (after any projection), the token vectors'
    ``codec`` (an ``operators.codecs`` name or ``auto``, resolved at ``dim``) and the
    ``pooled_codec`` of pooled and centroids (CompressConfig.pooled_codec), ``first_m_codec``
    (CompressConfig.first_m_codec: first-m's refinement of the token codes), first-m and centroid
    counts (CompressConfig), raw text bytes and doc-id characters a passage, and the codec's
    training sample cap (CompressConfig.codec_sample_vectors: bounds a residual codebook)
    and the passages a shard (RuntimeConfig.write_rows_per_shard)."""

    passages: int
    tokens_per_passage: float = MEASURED["tokens_per_passage"].value
    dim: int = 384
    codec: str = codecs.AUTO
    pooled_codec: str = codecs.AUTO
    first_m_codec: str = codecs.AUTO  # CompressConfig.first_m_codec
    first_m: int = 8
    centroids: int = 4
    text_bytes_per_passage: float = MEASURED["text_bytes_per_passage"].value
    doc_id_chars: float = MEASURED["doc_id_chars"].value
    codec_sample_vectors: int = CODEC_SAMPLE_VECTORS
    rows_per_shard: int = ROWS_PER_SHARD
    pool_factor: int = 1  # CompressConfig.pool_factor: token vectors stored a passage = tokens_per_passage / pool_factor

    def __post_init__(self) -> None:
        for name in ("passages", "dim", "first_m", "centroids", "codec_sample_vectors", "rows_per_shard", "pool_factor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("tokens_per_passage", "text_bytes_per_passage", "doc_id_chars"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.tokens_per_passage < 1:
            raise ValueError(f"tokens_per_passage must be at least 1, got {self.tokens_per_passage}")
        for name in (self.codec_name, self.pooled_codec_name):
            stages = codecs.parse_name(name)  # ValueError naming what is wrong
            if len(stages) == 2 and int(stages[0][1]) > self.dim:  # type: ignore[arg-type]
                raise ValueError(f"codec {name}: cannot reduce {self.dim} dims to {stages[0][1]}")
            inner = int(stages[0][1]) if len(stages) == 2 else self.dim  # type: ignore[arg-type]
            if stages[-1][0] == "pq" and inner % int(stages[-1][1]):  # type: ignore[arg-type]
                raise ValueError(f"codec {name}: pq-{stages[-1][1]} must divide its input dimension {inner}")

    @property
    def codec_name(self) -> str:
        """The token vectors' codec (``auto`` resolved at ``dim`` for the codecs' training
        sample, as ``mvr index`` does: ``codecs.choose``)."""
        return codecs.choose(self.codec, self.dim, self.codec_sample).name

    @property
    def pooled_codec_name(self) -> str:
        """The codec of pooled and centroids, and of first-m without a refinement
        (``storage/codec_file.py``: group pooled)."""
        return codecs.choose(self.pooled_codec, self.dim, self.codec_sample, "pooled").name

    @property
    def first_m_codec_name(self) -> str:
        """The first_m group's codec: ``refine-M`` (first-m read from the token codes plus
        M-byte refinement codes) or ``codecs.FIRST_M_IN_POOLED`` (a column in the pooled
        codec), as ``mvr index`` chooses it (``operators.codecs.choose_first_m``)."""
        return codecs.choose_first_m(self.first_m_codec, self.dim, self.codec_sample, self.codec_name, self.pooled_codec_name, self.pool_factor).name

    @property
    def refines_first_m(self) -> bool:
        """Whether first-m is the token codes plus a refinement (no column of its own vectors)."""
        return self.first_m_codec_name != codecs.FIRST_M_IN_POOLED

    @property
    def codec_sample(self) -> int:
        """Token vectors the codecs are trained on: ``codec_sample_vectors``, at most the
        index's (at least 1)."""
        return max(1, int(min(self.codec_sample_vectors, self.token_vectors)))

    def codec_of(self, kind: str) -> str:
        """The codec that stores ``kind`` (``storage.codec_file.KIND_GROUP``; first-m: its
        refinement's, ``refine-M``, when it has one)."""
        if kind == "first-m" and self.refines_first_m:
            return self.first_m_codec_name
        return self.codec_name if kind == "tokens" else self.pooled_codec_name

    def _decoded_dim(self, name: str) -> int:
        if _is_refinement(name):
            return self.dim  # the refined first-m vectors: at the model's dimension
        stages = codecs.parse_name(name)
        return int(stages[0][1]) if len(stages) == 2 else self.dim  # type: ignore[arg-type]

    @property
    def codec_dim(self) -> int:
        """Dimension of the decoded token vectors (``dim_out``: a PCA's D, else ``dim``): what
        the tokens ANN index is built over."""
        return self._decoded_dim(self.codec_name)

    def dim_of(self, kind: str) -> int:
        """Decoded dimension of ``kind``'s vectors (its ANN index's dimension)."""
        return self._decoded_dim(self.codec_of(kind))

    @property
    def stored_tokens_per_passage(self) -> float:
        """Token vectors a passage stores: ``tokens_per_passage`` (the encoder's kept vectors)
        ÷ ``pool_factor``. Token pooling keeps max(1, n // factor) of a passage's n, so the
        mean is a little less (the floor: at most (factor − 1) / factor a passage, ~0.5 of
        ~40 at factor 2 on msmarco-sample: docs/codecs.md); the plan keeps the quotient."""
        return self.tokens_per_passage / self.pool_factor

    @property
    def token_vectors(self) -> float:
        """Token vectors stored in the whole index (after pooling)."""
        return self.passages * self.stored_tokens_per_passage

    def residual_centroids(self, name: Optional[str] = None) -> Optional[int]:
        """Codebook size of a residual codec ``name`` (default the tokens codec; None for
        another family): ColBERTv2's default for the collection's token vectors, at most the
        k-means rows of the training sample (the sample less its 5 % held out), as
        ``operators/codecs/residual.py`` trains it."""
        name = name or self.codec_name
        if _is_refinement(name) or codecs.parse_name(name)[-1][0] != "residual":
            return None
        sample = self.codec_sample
        train_rows = sample - max(1, int(round(sample * codecs.HELDOUT_FRACTION))) if sample > 1 else 1
        return codecs.residual_centroids(train_rows, int(self.token_vectors))

    def bytes_per_vector_of(self, kind: str) -> int:
        """Stored bytes of one vector of ``kind`` (``operators.codecs.bytes_per_vector``; a
        refined first-m vector: its refinement's M + 2, the token code being the token column's)."""
        name = self.codec_of(kind)
        if _is_refinement(name):
            return codecs.Refinement.spec_bytes(codecs.parse_first_m(name), self.dim)
        return codecs.bytes_per_vector(name, self.dim, n_centroids=self.residual_centroids(name))

    @property
    def bytes_per_vector(self) -> int:
        """Stored bytes of one token vector's codes."""
        return self.bytes_per_vector_of("tokens")

    def vectors_per_passage(self, kind: str) -> float:
        """Mean vectors a passage of ``kind`` (tokens: after pooling; first-m and centroids:
        min(m, tokens) of the unpooled tokens, computed before pooling; the mean of the min is
        taken as the min of the mean, exact when no passage is shorter than m)."""
        t = self.tokens_per_passage
        per = {"tokens": self.stored_tokens_per_passage, "first-m": min(self.first_m, t), "centroids": min(self.centroids, t), "pooled": 1.0}
        if kind not in per:
            raise ValueError(f"unknown vector kind {kind!r}; choose from {', '.join(VECTOR_KINDS)}")
        return per[kind]

    def codes_bytes_per_passage(self, kind: str) -> float:
        """Codes-file bytes a passage of ``kind``: its vectors' codes, + a 4-byte list offset
        for a list column (tokens, first-m, centroids)."""
        return self.vectors_per_passage(kind) * self.bytes_per_vector_of(kind) + (4 if kind in LIST_KINDS else 0)


def _is_refinement(name: str) -> bool:
    """Whether codec ``name`` is the first_m group's ``refine-M``."""
    return name.startswith(f"{codecs.Refinement.family}-")


@dataclass(frozen=True)
class AnnSettings:
    """Which kinds get ANN partitions and how they are coded (None: the backend's default)."""

    backend: str = "codec-ivf"  # AnnBuildConfig's default (tests/test_capacity_plan.py holds them equal)
    kinds: tuple[str, ...] = VECTOR_KINDS
    pq_m: Optional[int] = None  # FAISS sub-quantizers (code bytes at 8 bits)
    nbits: Optional[int] = None  # FAISS bits a sub-quantizer code
    dims_per_block: int = 2  # ScaNN AH
    scann_reorder: bool = False  # ScaNN built with reorder_k > 0: a float32 copy of every vector

    def __post_init__(self) -> None:
        if self.backend not in ANN_BACKENDS:
            raise ValueError(f"unknown ANN backend {self.backend!r}; choose from {', '.join(ANN_BACKENDS)}")
        bad = [k for k in self.kinds if k not in VECTOR_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"vector kinds must be among {', '.join(VECTOR_KINDS)}, got {list(self.kinds)}")


@dataclass(frozen=True)
class ServeSettings:
    """How partitions are served: BM25 beside the dense kinds, either a fixed number of
    ``partitions`` or a RAM budget a partition replica (decimal GB) the number is derived
    from, ``size_by`` "peak" (the replica's high-water mark while it loads) or "steady"
    (after loading), and ``codes_hot_fraction``: the share of the replica's memory-mapped
    codes counted as resident page cache (0: none, the codes are read from disk as
    candidates are rescored; 1: all of them cached)."""

    bm25: bool = True
    partitions: Optional[int] = None
    ram_per_partition_gb: Optional[float] = None
    size_by: str = "peak"
    codes_hot_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.size_by not in ("peak", "steady"):
            raise ValueError(f"size_by must be 'peak' or 'steady', got {self.size_by!r}")
        if self.partitions is not None and (isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1):
            raise ValueError(f"partitions must be a positive integer, got {self.partitions!r}")
        if self.ram_per_partition_gb is not None and not self.ram_per_partition_gb > 0:
            raise ValueError(f"RAM per partition must be > 0 GB, got {self.ram_per_partition_gb!r}")
        if not 0 <= self.codes_hot_fraction <= 1:
            raise ValueError(f"codes hot fraction must be in [0, 1], got {self.codes_hot_fraction!r}")


@dataclass(frozen=True)
class Throughput:
    """Encode rates in passages/s: CPU for one reference node (2 vCPUs), GPU for one GPU
    (None: not measured, no GPU-hours computed)."""

    cpu_passages_per_s: float = MEASURED["cpu_passages_per_s"].value
    gpu_passages_per_s: Optional[float] = None
    cpu_vcpus: int = 2  # vCPUs of the node the CPU rate was measured on

    def __post_init__(self) -> None:
        if not self.cpu_passages_per_s > 0:
            raise ValueError(f"CPU throughput must be > 0 passages/s, got {self.cpu_passages_per_s!r}")
        if self.gpu_passages_per_s is not None and not self.gpu_passages_per_s > 0:
            raise ValueError(f"GPU throughput must be > 0 passages/s, got {self.gpu_passages_per_s!r}")


# ----------------------------------------------------------------------------- ANN sizes


# the backends' own rules (operators/ann/defaults.py), under the names the plan uses
faiss_default_m = default_m
faiss_default_nlist = default_nlist
faiss_default_nbits = default_nbits


def scann_default_num_leaves(n_vectors: float) -> int:
    """operators.ann.defaults.default_num_leaves of ``n_vectors`` (a count, given as float)."""
    return default_num_leaves(int(n_vectors))


@dataclass(frozen=True)
class AnnIndexSize:
    """One ANN index over ``vectors`` (dim)-dimensional vectors: its build parameters, its
    bytes on disk and in RAM, and the bytes a vector costs (codes + ids, or float32 copies)."""

    backend: str
    vectors: float
    params: dict[str, Any]
    file_bytes: float
    ram_bytes: float
    bytes_per_vector_file: float
    bytes_per_vector_ram: float


def ann_index_size(
    backend: str,
    dim: int,
    n_vectors: float,
    pq_m: Optional[int] = None,
    nbits: Optional[int] = None,
    dims_per_block: int = 2,
    scann_reorder: bool = False,
    codec_cells: Optional[int] = None,
) -> AnnIndexSize:
    """Bytes of one partition's index over ``n_vectors`` vectors with this codebase's defaults
    (``operators/ann/ivfpq.py``, ``operators/ann/scann_index.py``, ``operators/ann/codec_ivf.py``)
    unless ``pq_m`` / ``nbits`` / ``dims_per_block`` / ``scann_reorder`` are given;
    ``codec_cells``: the centroids of the vectors' codec (a residual codebook), which codec-ivf
    takes as its cells (None: it trains ``default_nlist`` cells). Fixed parts (quantizers)
    included."""
    n = float(n_vectors)
    if backend == "codec-ivf":
        cells = codec_cells or min(default_nlist(n), max(1, int(n)))
        # lists.npy: a uint32 id a vector; centroids.npy float16 (in RAM float32, and the probe's
        # bfloat16 copy where the CPU has bfloat16: 6 B a value); list_offsets.npy int64; 3 npy headers
        fixed_file = cells * dim * 2 + (cells + 1) * 8 + 3 * 128
        params = {"nlist": cells, "cells_from_codec": codec_cells is not None}
        if codec_cells is None:
            params["training_sample_size"] = training_sample_size(int(n), cells)
        return AnnIndexSize(backend, n, params, n * 4 + fixed_file, n * 4 + cells * dim * 6 + (cells + 1) * 8, 4.0, 4.0)
    if n < BRUTE_FORCE_BELOW:  # faiss-ivfpq and scann: flat float32, exact
        per = 4.0 * dim
        return AnnIndexSize(backend, n, {"brute_force": True}, n * per, n * per, per, per)
    if backend == "faiss-ivfpq":
        nlist = faiss_default_nlist(n)
        sample = training_sample_size(int(n), nlist)
        m = pq_m or faiss_default_m(dim)
        if dim % m:
            raise ValueError(f"FAISS m={m} must divide dim={dim}")
        bits = nbits or faiss_default_nbits(sample)
        code = math.ceil(m * bits / 8)  # faiss ProductQuantizer code_size
        per = code + 8.0  # code + int64 id in the inverted lists
        fixed = nlist * dim * 4 + (1 << bits) * dim * 4  # coarse centroids + PQ centroids (M × ksub × dsub)
        # on disk: + a list size (8 B) a list and a ~180 B header (msmarco-sample builds: ±0.01 %)
        params = {"nlist": nlist, "m": m, "nbits": bits, "code_bytes": code, "training_sample_size": sample}
        return AnnIndexSize(backend, n, params, n * per + fixed + nlist * 8 + 180, n * per + fixed, per, per)
    if backend == "scann":
        leaves = scann_default_num_leaves(n)
        blocks = math.ceil(dim / dims_per_block)
        codebook = AH_CENTERS * dim * 4 + 100 * blocks
        copy = 4.0 * dim if scann_reorder else 0.0  # dataset.npy: float32 vectors for the reorder stage
        per_file = copy + blocks + 4  # + hashed_dataset.npy + datapoint_to_token.npy
        per_ram = copy + math.ceil(blocks / 2) + 8  # lut16 packs two 4-bit codes a byte; leaf token + datapoint index
        leaves_bytes = leaves * (8 * dim + 20)  # serialized_partitioner.pb (measured ≈ 2 × leaves × dim × 4)
        params = {"num_leaves": leaves, "dims_per_block": dims_per_block, "ah_blocks": blocks, "reorder": scann_reorder}
        return AnnIndexSize(backend, n, params, n * per_file + leaves_bytes + codebook + 1200, n * per_ram + leaves * dim * 8 + codebook, per_file, per_ram)
    raise ValueError(f"no ANN index for backend {backend!r}")


def ann_build_ram(idx: AnnIndexSize, dim: int) -> tuple[float, str]:
    """Peak bytes of the task that builds one partition's index ``idx`` over (dim)-dimensional
    decoded vectors (``pipeline/indexing/ann_build.build_partition``: the codes are mapped, decoded a
    block of ``operators.ann.ADD_BATCH`` at a time), beyond the process itself, and how they were
    counted. Measured (tests/test_capacity_plan.py, docs/capacity.md): FAISS adds each block to
    its growing index, and peaks while training, holding the decoded training sample and its
    own copy of it; ScaNN's builder takes every vector at once and peaks at three float32
    copies of the partition (the buffer they are added to, the builder's dataset and one
    more while it trains and hashes), plus the index it makes."""
    n = idx.vectors
    block = ADD_BATCH * dim * 4.0
    if idx.backend == "codec-ivf":  # finalize's counting sort: each vector's cell, the lists (the index), one block's temporaries
        cell = cell_bytes(int(idx.params["nlist"]))
        fill = idx.ram_bytes + cell * n + SCATTER_BYTES_PER_ROW * min(n, SCATTER_ROWS) + block
        how = f"the index + {cell} B a vector (its cell) while its lists are built + one block of the sort + one added block"
        if idx.params["cells_from_codec"]:
            return fill, how
        sample = 2 * idx.params["training_sample_size"] * dim * 4.0  # k-means cells: trained first, as FAISS's quantizer
        return max(fill, sample), how + " (or, if larger, 2 float32 copies of the k-means sample)"
    if idx.params.get("brute_force") or idx.backend == "faiss-ivfpq":
        sample = 2 * idx.params.get("training_sample_size", 0) * dim * 4.0
        return idx.ram_bytes + max(sample, block), "the index + 2 float32 copies of its training sample (or one added block, if larger)"
    copies = 3 * 4.0 * dim * n
    return (
        copies + idx.ram_bytes,
        f"3 float32 copies of the partition's vectors ({human_bytes(copies)}: the added buffer and ScaNN's builder's two) + the index",
    )


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Line:
    """One row of a plan table: ``item``, its ``bytes`` and how they were computed."""

    item: str
    bytes: float
    how: str


@dataclass
class CapacityPlan:
    """Storage of the whole index, per-kind ANN sizes, RAM of one partition replica, the
    partition count, and encode hours."""

    workload: Workload
    ann: AnnSettings
    serve: ServeSettings
    throughput: Throughput
    partitions: int
    passages_per_partition: int
    storage: list[Line]
    ann_indexes: dict[str, AnnIndexSize]  # kind → one partition's index
    ram: list[Line]  # one partition replica
    ram_steady_bytes: float
    ram_peak_bytes: float
    cpu_node_hours: float
    cpu_vcpu_hours: float
    gpu_hours: Optional[float]
    notes: list[str] = field(default_factory=list)
    build: list[Line] = field(default_factory=list)  # one partition's ANN build task, a line a kind

    @property
    def build_peak_bytes(self) -> float:
        """The largest build task's peak (kinds are built by separate tasks)."""
        return max((line.bytes for line in self.build), default=0.0)

    @property
    def storage_bytes(self) -> float:
        return sum(line.bytes for line in self.storage)

    @property
    def ram_total_bytes(self) -> float:
        """RAM of all partition replicas together (the sizing figure × partitions)."""
        return self.partitions * (self.ram_peak_bytes if self.serve.size_by == "peak" else self.ram_steady_bytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": {"workload": asdict(self.workload), "ann": asdict(self.ann), "serve": asdict(self.serve), "throughput": asdict(self.throughput)},
            "storage": {"total_bytes": self.storage_bytes, "lines": [asdict(x) for x in self.storage]},
            "ann_indexes_per_partition": {k: asdict(v) for k, v in self.ann_indexes.items()},
            "partitions": self.partitions,
            "passages_per_partition": self.passages_per_partition,
            "ram_per_partition": {"steady_bytes": self.ram_steady_bytes, "peak_bytes": self.ram_peak_bytes, "lines": [asdict(x) for x in self.ram]},
            "ram_all_partitions_bytes": self.ram_total_bytes,
            "ann_build_per_partition": {"peak_bytes": self.build_peak_bytes, "lines": [asdict(x) for x in self.build]},
            "encode": {"cpu_node_hours": self.cpu_node_hours, "cpu_vcpu_hours": self.cpu_vcpu_hours, "gpu_hours": self.gpu_hours},
            "measured": {k: asdict(v) for k, v in MEASURED.items()},
            "notes": self.notes,
        }


def codec_file_bytes(w: Workload, name: str) -> float:
    """Bytes of a codec file ``codecs/{group}.mvrc`` (``operators/codecs/serial.py``) of codec
    ``name``: its float32 arrays — a PCA's D × dim matrix and dim-vector mean, a residual
    codebook (centroids × its input dims), 2^N - 1 bucket cutoffs and 2^N weights, PQ's 256 ×
    its input dims; none for float16 / int8 — plus the magic, JSON header and sha256
    (measured, ``codec_header_bytes``)."""
    if _is_refinement(name):  # the residual's PQ centroids (256 × dim) and α (a parameter)
        return 4.0 * 256 * w.dim + MEASURED["codec_header_bytes"].value + MEASURED["codec_array_header_bytes"].value
    stages = codecs.parse_name(name)
    arrays, n_arrays = 0.0, 0
    d = w.dim
    if len(stages) == 2:  # pca-D: matrix and mean
        big_d = int(stages[0][1])  # type: ignore[arg-type]
        arrays += 4.0 * (big_d * d + d)
        n_arrays += 2
        d = big_d
    family, arg = stages[-1]
    if family == "residual":  # centroids, cutoffs, weights
        arrays += 4.0 * (w.residual_centroids(name) or 1) * d + 4.0 * (2 * 2 ** int(arg) - 1)  # type: ignore[arg-type]
        n_arrays += 3
    elif family == "pq":
        arrays += 4.0 * 256 * d
        n_arrays += 1
    return arrays + MEASURED["codec_header_bytes"].value + n_arrays * MEASURED["codec_array_header_bytes"].value


def shard_count(w: Workload) -> int:
    """Shards of ``w``: one a ``rows_per_shard`` passages (more when input blocks end mid-shard)."""
    return math.ceil(w.passages / w.rows_per_shard)


def shard_storage(w: Workload) -> list[Line]:
    """Bytes of the shards (``shards/*.parquet`` and ``shards/*.codes.arrow``), the codec
    file, the catalog and the manifest of an index of ``w`` (every vector kind is always
    written to the codes files)."""
    n = w.passages
    shards = shard_count(w)
    lines = []
    for kind, column in (("tokens", "token"), ("first-m", f"first-{w.first_m}"), ("centroids", f"{w.centroids}-centroid"), ("pooled", "pooled")):
        vpp = w.vectors_per_passage(kind)
        off = " + 4 B list offset" if kind in LIST_KINDS else ""
        lines.append(
            Line(
                f"shards: {column} codes", n * w.codes_bytes_per_passage(kind), f"{vpp:g} a passage × {w.bytes_per_vector_of(kind)} B ({w.codec_of(kind)}){off}"
            )
        )
    ov = MEASURED["codes_file_overhead_bytes"].value
    lines.append(Line("shards: codes files' framing", shards * ov, f"{ov:,.0f} B × {shards:,} codes files (Arrow IPC schema, batch headers, footer, padding)"))
    ratio = MEASURED["text_stored_ratio"].value
    lines.append(Line("shards: text (zstd)", n * w.text_bytes_per_passage * ratio, f"{w.text_bytes_per_passage:g} B/passage × {ratio}"))
    meta = MEASURED["passage_meta_bytes"].value
    footer = MEASURED["shard_footer_bytes"].value
    chunks = MEASURED["shard_chunk_bytes"].value
    lines.append(
        Line(
            "shards: ids, spans, footers",
            n * meta + shards * (footer + chunks),
            f"{meta:g} B/passage + ({footer:,.0f} B footer + {chunks:,.0f} B of column chunks) × {shards:,} Parquet files (≥ 1 a {w.rows_per_shard:,} passages)",
        )
    )
    groups = [("tokens", w.codec_name), ("pooled", w.pooled_codec_name)] + ([("first_m", w.first_m_codec_name)] if w.refines_first_m else [])
    for group, name in groups:
        if _is_refinement(name):
            lines.append(Line(f"codecs/{group}.mvrc", codec_file_bytes(w, name), f"{name}: 256 sub-centroids a sub-space of the residual, header"))
            continue
        parts = (
            (["PCA matrix"] if "+" in name else [])
            + ([f"codebook of {w.residual_centroids(name):,} centroids"] if w.residual_centroids(name) else [])
            + (["256 sub-centroids a sub-space"] if codecs.parse_name(name)[-1][0] == "pq" else [])
            + ["header"]
        )
        lines.append(Line(f"codecs/{group}.mvrc", codec_file_bytes(w, name), f"{name}: {', '.join(parts)}"))
    cat, cat0 = MEASURED["catalog_bytes_per_passage"].value, MEASURED["catalog_fixed_bytes"].value
    lines.append(Line("catalog.duckdb", cat0 + n * cat, f"{cat0:,.0f} B + {cat:g} B/passage (measured at 100 and 5,000 passages)"))
    fixed = MEASURED["manifest_fixed_bytes"].value
    lines.append(Line("manifest.json", fixed, f"{fixed:,.0f} B (no per-shard or per-passage data: the shard list is a Parquet file beside it)"))
    fixed, per = MEASURED["shard_list_fixed_bytes"].value, MEASURED["shard_list_bytes_per_shard"].value
    lines.append(Line("shard list", fixed + shards * per, f"{fixed:,.0f} B + {per:g} B × {shards:,} shards (shard-lists/*.parquet)"))
    return lines


def bm25_partition_files(passages: float, postings: Optional[float] = None, terms: Optional[float] = None) -> dict[str, float]:
    """File bytes of one BM25 partition over ``passages`` passages, by what each grows with:
    ``postings`` (bm25s CSC: a float32 score and an int32 row a posting), ``terms`` (indptr and
    the vocabulary file) and ``passages`` (passages.parquet and its footer). ``postings`` and
    ``terms`` default to the plan's estimates (measured postings a passage; Heaps' law)."""
    postings = passages * MEASURED["bm25_postings_per_passage"].value if postings is None else postings
    terms = bm25_terms(passages) if terms is None else terms
    return {
        "postings": postings * 8,
        "terms": (terms + 1) * 4 + terms * MEASURED["bm25_vocab_file_bytes_per_term"].value,
        "passages": passages * MEASURED["bm25_passages_file_bytes"].value + MEASURED["bm25_passages_file_footer_bytes"].value,
    }


def bm25_terms(passages: float) -> float:
    """Vocabulary size of a BM25 partition: Heaps' law with exponent 0.5 through the one
    measured point (an assumption)."""
    return MEASURED["bm25_terms_at_5000"].value * math.sqrt(max(passages, 1) / 5000)


def bm25_partition(passages: float) -> tuple[float, float, float]:
    """(file bytes, RAM bytes, terms) of one BM25 partition over ``passages`` passages
    (``bm25_partition_files``; RAM: the CSC arrays and a Python dict term → id)."""
    postings = passages * MEASURED["bm25_postings_per_passage"].value
    terms = bm25_terms(passages)
    files = sum(bm25_partition_files(passages).values())
    ram = postings * 8 + (terms + 1) * 4 + terms * 116  # Python dict term → id: ~116 B a term (CPython, measured)
    return files, ram, terms


def _doc_id_bytes(w: Workload) -> float:
    """RAM a passage's doc id costs in a partition (a str object and its list slot)."""
    return PY_STR_BYTES + w.doc_id_chars + PY_POINTER


def partition_ram(w: Workload, ann: AnnSettings, serve: ServeSettings, passages: int) -> tuple[list[Line], float, float, dict[str, AnnIndexSize]]:
    """RAM of one partition replica holding ``passages`` passages of every served kind (the
    ANN kinds; every kind, exactly, when there is no ANN) and their BM25 partition.
    Returns (lines, steady bytes, peak bytes while loading, the kinds' index sizes). The
    codes are memory-mapped: only ``serve.codes_hot_fraction`` of them is counted."""
    kinds = ann.kinds if ann.backend != "none" else VECTOR_KINDS
    lines: list[Line] = []
    indexes: dict[str, AnnIndexSize] = {}
    largest = 0.0  # the load transient: file bytes + Arrow table of the largest passages.parquet
    codes = 0.0
    per_passage = _doc_id_bytes(w) + 4 + 8  # doc id, passage_idx, vector offset
    for kind in kinds:
        n = passages * w.vectors_per_passage(kind)
        codes += passages * w.codes_bytes_per_passage(kind)
        if ann.backend != "none":
            idx = ann_index_size(
                ann.backend, w.dim_of(kind), n, ann.pq_m, ann.nbits, ann.dims_per_block, ann.scann_reorder, w.residual_centroids(w.codec_of(kind))
            )
            indexes[kind] = idx
            lines.append(Line(f"{kind}: {ann.backend} index (dim {w.dim_of(kind)})", idx.ram_bytes, _index_how(idx)))
        ids = passages * per_passage + 8
        lines.append(Line(f"{kind}: offsets, doc ids, passage_idx", ids, f"{per_passage:.0f} B/passage (int64 offset, str doc id, int32)"))
        pp = MEASURED["partition_passage_bytes"].value
        largest = max(largest, passages * (pp + 8 + 4 + w.doc_id_chars + 4 + 4) + MEASURED["partition_file_footer_bytes"].value if ann.backend != "none" else 0)
    f = serve.codes_hot_fraction
    lines.append(Line(f"codes page cache (hot fraction {f:g})", f * codes, f"{f:g} × {human_bytes(codes)} of memory-mapped codes of {', '.join(kinds)}"))
    if serve.bm25:
        _, ram, terms = bm25_partition(passages)
        lines.append(
            Line(
                "bm25 partition",
                ram + passages * (_doc_id_bytes(w) + 4),
                f"{MEASURED['bm25_postings_per_passage'].value:g} postings/passage × 8 B, ~{terms:,.0f} terms",
            )
        )
    process = MEASURED["process_bytes"].value
    lines.append(Line("replica process (Ray actor, libraries)", process, "measured"))
    steady = sum(x.bytes for x in lines)
    transient = largest
    lines.append(
        Line(
            "load peak: transient copies",
            transient,
            "the largest kind's passages.parquet bytes and decoded table while its doc ids are built (a bound from load_partition; "
            "measured peak = steady); no vector copies: codes are mapped",
        )
    )
    return lines, steady, steady + transient, indexes


def _index_how(idx: AnnIndexSize) -> str:
    p = idx.params
    if p.get("brute_force"):
        return "flat float32 (< 4,096 vectors)"
    if idx.backend == "faiss-ivfpq":
        return f"nlist {p['nlist']}, m {p['m']} × {p['nbits']} bits: {idx.bytes_per_vector_ram:g} B/vector + quantizers"
    if idx.backend == "codec-ivf":
        cells = "the codec's centroids" if p["cells_from_codec"] else "k-means cells"
        return f"{p['nlist']:,} lists over {cells}: a 4 B id a vector + the centroids"
    copy = ", float32 reorder copy" if p.get("reorder") else ""
    return f"{p['num_leaves']} leaves, AH {p['ah_blocks']} blocks{copy}: {idx.bytes_per_vector_ram:g} B/vector + leaves"


def partitions_for_budget(ram_at: Callable[[int], float], budget_bytes: float, passages: int) -> int:
    """Smallest P ≥ 1 whose partition (``ram_at(P)`` bytes, non-increasing in P) fits
    ``budget_bytes``; ValueError when not even one passage a partition fits."""
    if ram_at(passages) > budget_bytes:
        raise ValueError(
            f"a partition needs at least {ram_at(passages) / 1e9:.2f} GB even with one passage (process and fixed costs): "
            f"the budget of {budget_bytes / 1e9:.2f} GB is too small"
        )
    lo, hi = 1, 1
    while ram_at(hi) > budget_bytes:  # exponential search, then bisect
        lo, hi = hi + 1, min(hi * 2, passages)
    while lo < hi:
        mid = (lo + hi) // 2
        if ram_at(mid) <= budget_bytes:
            hi = mid
        else:
            lo = mid + 1
    return lo


def make_plan(w: Workload, ann: AnnSettings = AnnSettings(), serve: ServeSettings = ServeSettings(), tp: Throughput = Throughput()) -> CapacityPlan:
    """The capacity plan of ``w`` (module docstring for what is counted)."""
    notes: list[str] = [PAGE_CACHE_NOTE]
    exact_only = ann.backend == "none"

    def per_partition(p: int) -> tuple[list[Line], float, float, dict[str, AnnIndexSize]]:
        return partition_ram(w, ann, serve, math.ceil(w.passages / p))

    if exact_only:
        partitions = 1
        notes.append(
            "no ANN: every mode is served exactly by one slice over all passages (deployment 0), so partitions do not divide the RAM; "
            "every query decodes all codes, so they are read whole per query unless cached (--codes-hot-fraction 1)"
        )
        if serve.partitions not in (None, 1):
            notes.append(f"--partitions {serve.partitions} ignored without an ANN backend")
    elif serve.partitions is not None:
        partitions = serve.partitions
    elif serve.ram_per_partition_gb is not None:
        pick: Literal[1, 2] = 2 if serve.size_by == "peak" else 1
        partitions = partitions_for_budget(lambda p: per_partition(p)[pick], serve.ram_per_partition_gb * 1e9, w.passages)
    else:
        partitions = 1
    if partitions > w.passages:
        raise ValueError(f"{partitions} partitions for {w.passages} passages: each partition needs at least one passage")
    ram, steady, peak, indexes = per_partition(partitions)
    if serve.ram_per_partition_gb is not None:
        used = peak if serve.size_by == "peak" else steady
        if used > serve.ram_per_partition_gb * 1e9:
            notes.append(f"a partition needs {used / 1e9:.2f} GB, over the {serve.ram_per_partition_gb:g} GB budget")

    storage = shard_storage(w)
    build: list[Line] = []
    if not exact_only:
        build_by_kind = {kind: ann_build_ram(idx, w.dim_of(kind)) for kind, idx in indexes.items()}
        build = [Line(f"{kind}: {ann.backend} build task", b, how) for kind, (b, how) in build_by_kind.items()]
        worst_kind, (worst_bytes, _) = max(build_by_kind.items(), key=lambda kv: kv[1][0])
        if ann.backend == "scann" and worst_bytes > 16e9:
            notes.append(
                f"a ScaNN build task holds three float32 copies of its partition's vectors ({human_bytes(worst_bytes)} for {worst_kind}): "
                "give the build workers that much RAM, or more partitions (FAISS IVFPQ builds from one block at a time)"
            )
        pp = MEASURED["partition_passage_bytes"].value
        footer = MEASURED["partition_file_footer_bytes"].value
        for kind in ann.kinds:
            n = w.passages * w.vectors_per_passage(kind)
            storage.append(
                Line(
                    f"ann/{kind}: passages.parquet",
                    w.passages * pp + partitions * footer,
                    f"ids only (passage, doc_id, passage_idx): {pp:g} B/passage + {footer:,.0f} B a file",
                )
            )
            # partitions of near-equal size: P × one partition's index (fixed parts counted P times)
            idx = ann_index_size(
                ann.backend, w.dim_of(kind), n / partitions, ann.pq_m, ann.nbits, ann.dims_per_block, ann.scann_reorder, w.residual_centroids(w.codec_of(kind))
            )
            storage.append(Line(f"ann/{kind}: {ann.backend} index", idx.file_bytes * partitions, f"{partitions:,} × ({_index_how(idx)}), dim {w.dim_of(kind)}"))
    built = (0 if exact_only else len(ann.kinds) * partitions) + (partitions if serve.bm25 else 0)
    if built:
        per = MEASURED["manifest_bytes_per_partition"].value
        storage = [
            Line(x.item, x.bytes + built * per, f"{x.how} + {per:,.0f} B × {built:,} ANN/BM25 partition entries") if x.item == "manifest.json" else x
            for x in storage
        ]
    if serve.bm25:
        files, _, terms = bm25_partition(w.passages / partitions)
        storage.append(Line("bm25 partitions", files * partitions, f"{partitions:,} × bm25s CSC, ~{terms:,.0f} terms each (Heaps' law, assumed)"))

    cpu_node_hours = w.passages / tp.cpu_passages_per_s / 3600
    gpu_hours = None if tp.gpu_passages_per_s is None else w.passages / tp.gpu_passages_per_s / 3600
    if tp.gpu_passages_per_s is None:
        notes.append(GPU_NOT_MEASURED)
    if tp.cpu_passages_per_s == MEASURED["cpu_passages_per_s"].value and (
        w.dim != 384 or abs(w.tokens_per_passage / MEASURED["tokens_per_passage"].value - 1) > 0.25
    ):
        notes.append(
            "the CPU rate was measured with the packaged MiniLM (dim 384, 6 layers) on 80.6-token passages; "
            "another model or passage length encodes at another rate (pass --cpu-passages-per-s)"
        )
    return CapacityPlan(
        w,
        ann,
        serve,
        tp,
        partitions,
        math.ceil(w.passages / partitions),
        storage,
        indexes,
        ram,
        steady,
        peak,
        cpu_node_hours,
        cpu_node_hours * tp.cpu_vcpus,
        gpu_hours,
        notes,
        build,
    )


def human_bytes(n: float) -> str:
    """Decimal units: 1.23 GB, 4.5 TB."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"
