"""Typed job configuration: one object per job, loadable from YAML, stored in the manifest."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from mvr.operators import codecs
from mvr.operators.encode.checkpoint import read_conventions
from mvr.operators.retrieval.candidates import FirstStage
from mvr.operators.retrieval.fusion import Fusion, HybridParams
from mvr.operators.retrieval.scoring import MODES, VECTOR_KINDS, DenseMode, SearchMode, SingleMode, VectorKind

_Job = TypeVar("_Job", bound="_JobConfig")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _JobConfig(_Section):
    """A job's whole configuration: YAML in and out, dotted overrides from the command line."""

    # sections (dotted paths) validated from what the file and overrides give only, so that
    # their ``model_fields_set`` tells what the user set (the checkpoint's conventions fill
    # the rest of ``tokenizer``)
    _user_sections: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_yaml(cls: type[_Job], path: str | Path | None, **overrides: object) -> _Job:
        """Load a YAML file (or defaults when ``path`` is None) and apply dotted overrides,
        e.g. ``{"model.name": "/models/colbertv2.0"}``; None values are skipped. A file or
        override may give part of a section: the rest keeps its defaults."""
        return cls.from_mapping(yaml.safe_load(Path(path).read_text()) if path is not None else None, **overrides)

    @classmethod
    def from_mapping(cls: type[_Job], loaded: Optional[dict], **overrides: object) -> _Job:
        """``from_yaml`` of a YAML file's parsed content (None: the defaults)."""
        data = cls().model_dump(mode="json", by_alias=True)
        given: dict = {}
        if loaded:
            _deep_update(data, copy.deepcopy(loaded))
            if isinstance(loaded, dict):
                _deep_update(given, copy.deepcopy(loaded))
        for key, value in overrides.items():
            if value is None:
                continue
            for target in (data, given):
                node = target
                *parents, leaf = key.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                node[leaf] = copy.deepcopy(value)
        for section in cls._user_sections:
            *parents, leaf = section.split(".")
            node, user = data, given
            for p in parents:
                node = node.setdefault(p, {})
                user = user.get(p, {}) if isinstance(user, dict) else {}
            if isinstance(node, dict):
                node[leaf] = user.get(leaf, {}) if isinstance(user, dict) else {}
        return cls.model_validate(data)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)


class ModelConfig(_Section):
    """Which encoder to load. ``name`` is a local directory, or ``minilm`` for the packaged
    all-MiniLM-L6-v2 weights (offline default), or a Hugging Face hub id (fetched only then)."""

    name: str = "minilm"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU


class TokenizerConfig(_Section):
    """ColBERT / PyLate conventions. Defaults are the plain-encoder settings the reference
    figures use (no markers, no [MASK] augmentation, every token kept). A published PyLate or
    ColBERT checkpoint's own conventions are read from its directory and fill every field the
    user did not set (``IndexConfig``); ``configs/colbert.yaml`` spells out ColBERT's."""

    passage_tokens: int = Field(256, ge=8, description="max tokens of a passage, specials included")
    stride_tokens: int = Field(192, ge=1, description="window start step when a document is split")
    split_long_documents: bool = True  # false: truncate to passage_tokens instead
    query_tokens: int = Field(32, ge=4)
    query_marker: Optional[str] = None  # a token inserted after [CLS], e.g. "[unused0]" (ColBERT), "[Q] " (PyLate)
    document_marker: Optional[str] = None  # e.g. "[unused1]" (ColBERT), "[D] " (PyLate)
    query_text_prefix: str = ""  # text put before each query's tokens (after the marker), e.g. "query: "
    document_text_prefix: str = ""  # text put before each passage's tokens (after the marker)
    query_augmentation: bool = False  # pad queries with [MASK] to query_tokens
    attend_to_expansion_tokens: bool = False  # the [MASK] padding is attended to (ColBERT: attend_to_mask_tokens)
    skip_punctuation: bool = False  # drop document vectors of punctuation tokens
    skiplist: list[str] = Field(default_factory=list, description="tokens whose document vectors are dropped (PyLate's skiplist_words)")
    title_separator: str = " "  # passage text = title + sep + text (title omitted when empty)
    checkpoint_conventions: bool = Field(True, description="read the checkpoint's conventions file for the fields not set; false: mvr's defaults")
    # written by mvr (the manifest records them): where the conventions came from
    conventions_source: Optional[str] = Field(None, description="the file read, e.g. pylate:config_sentence_transformers.json; None: none")
    conventions_from_checkpoint: list[str] = Field(default_factory=list, description="the fields whose values that file gave")

    @model_validator(mode="after")
    def _stride_fits(self) -> "TokenizerConfig":
        if self.stride_tokens > self.passage_tokens:
            raise ValueError("stride_tokens must be <= passage_tokens (windows would skip text)")
        return self


class CompressConfig(_Section):
    """Per-passage representations written to the shards, and the codec that stores them."""

    projection_dim: Optional[int] = Field(None, ge=8, description="fixed seeded orthogonal reduction")
    projection_seed: int = 0
    pooling: Literal["mean", "cls"] = "mean"
    first_m: int = Field(8, ge=1)
    centroids: int = Field(4, ge=1)
    kmeans_iterations: int = Field(10, ge=1)
    centroid_space: Literal["unit", "raw"] = Field(
        "unit",
        description="softmax-centroid's centroids: k-means over unit-length token vectors, unit centroids (unit), or over the raw "
        "vectors as the paper writes it (raw); operators/encode/compress.py",
    )
    codec: str = Field(codecs.AUTO, description="token vectors' codec: operators/codecs name (float16, int8, residual-N, pq-M, pca-D+C) or auto")
    pooled_codec: str = Field(
        codecs.AUTO,
        description="codec of the pooled and centroid vectors (and of first-m without a refinement), scored against the pooled "
        "query; auto: pq-{dim/2}, half of int8's bytes (operators/codecs/registry.py pooled_default; int8 when the sample "
        "cannot train it)",
    )
    first_m_codec: str = Field(
        codecs.AUTO,
        description="first-m vectors: refine-M, the first m token codes plus an M-byte product code of what they miss (no vector "
        "stored twice); auto: refine-{dim/4} (96 B + a 2 B norm at 384 dims), or pooled where first-m cannot be read from the "
        "token codes (token pooling, an untrained token codec, a pooled codec with a PCA, a sample under 256 vectors); pooled: a "
        "column in the pooled codec (operators/codecs/refinement.py)",
    )
    codec_sample_vectors: int = Field(65_536, ge=256, description="token vectors the codecs are trained on, at most")
    codec_seed: int = 0
    pool_factor: int = Field(
        1, ge=1, strict=True, description="token pooling (operators/encode/token_pooling.py): a passage keeps max(1, n // pool_factor) token vectors; 1: off"
    )

    @field_validator("codec", "pooled_codec")
    @classmethod
    def _codec_name(cls, name: str) -> str:
        if name != codecs.AUTO:
            codecs.parse_name(name)  # ValueError naming what is wrong
        return name

    @field_validator("first_m_codec")
    @classmethod
    def _first_m_codec_name(cls, name: str) -> str:
        if name != codecs.AUTO:
            codecs.parse_first_m(name)  # ValueError naming the choices
        return name

    @model_serializer(mode="wrap")
    def _omit_added_defaults(self, handler: Any) -> dict:
        """``pool_factor`` is left out of the dump at its default (1): an index written before
        the field existed keeps its resume key and manifest config (``vector_settings``); any
        other factor is dumped, so the manifest records it and a rerun reuses it."""
        data = handler(self)
        if data.get("pool_factor") == 1:
            data.pop("pool_factor")
        return data


class RuntimeConfig(_Section):
    """How the Ray Data graph is sized. ``None`` means: derive from the cluster's resources."""

    block_bytes: int = Field(4 << 20, ge=1024, description="input bytes per block (jsonl/tsv)")
    parquet_rows_per_block: int = Field(20_000, ge=1)
    encode_batch_size: int = Field(32, ge=1, description="passages per forward pass")
    encode_actor_batch: int = Field(256, ge=1, description="passages handed to an encode actor at once")
    encode_actors: Optional[int] = Field(None, ge=1, description="default: GPUs, or 1 on CPU")
    encode_cpus: Optional[float] = Field(None, gt=0, description="CPUs reserved per encode actor")
    torch_threads: Optional[int] = Field(None, ge=1, description="default: all CPUs of the node")
    write_rows_per_shard: int = Field(1024, ge=1, description="passages per shard file at most")
    small_job_rows: int = Field(
        1000,
        ge=0,
        description="on a cluster without GPUs, a job of at most this many valid input rows runs every stage in the driver "
        "process: no Ray worker to start (each imports torch, and the encoder's loads the model), and the driver keeps the "
        "model for its next small job (live updates from one Python process); not where the driver's node has no CPU for "
        "work (a head started with --num-cpus 0); 0: always Ray Data and an actor pool. An index of at most this many "
        "passages also builds, extends and rebuilds its ANN and BM25 partitions in the driver (build-ann, add, compact)",
    )
    encode_once: bool = Field(
        True,
        description="when the codec's sample pass encodes every passage (a corpus under ~30k passages), keep its float32 "
        "vectors in staging and compress them, instead of encoding the corpus twice",
    )


class StorageConfig(_Section):
    """How an index's store is written (docs/cluster.md: object storage)."""

    single_writer: bool = Field(
        False,
        description="commit to a store that ignores conditional writes (If-None-Match), which mvr refuses otherwise: only safe "
        "when one writer at a time ever writes to the index (concurrent writers would lose commits)",
    )


def _deep_update(base: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


# TokenizerConfig fields that only record where conventions came from (not in resume keys)
_PROVENANCE = ("checkpoint_conventions", "conventions_source", "conventions_from_checkpoint")
# fields added with checkpoint conventions: left out of resume keys at their defaults, so an
# index built before they existed still matches its configuration
_ADDED_DEFAULTS = {"query_text_prefix": "", "document_text_prefix": "", "attend_to_expansion_tokens": False, "skiplist": []}


def apply_checkpoint_conventions(model_name: str, tokenizer: TokenizerConfig) -> TokenizerConfig:
    """``tokenizer`` with the checkpoint's published conventions (``operators.encode.checkpoint.
    read_conventions``) in every field the user did not set (``model_fields_set``), and the
    provenance fields filled in. Precedence: the user's values, then the checkpoint's, then
    mvr's defaults. A config that already records its provenance (``conventions_source`` set,
    as in a manifest) is returned as it is, so resolving is idempotent."""
    if "conventions_source" in tokenizer.model_fields_set:
        return tokenizer
    conventions = read_conventions(model_name) if tokenizer.checkpoint_conventions else None
    if conventions is None:
        return tokenizer.model_copy(update={"conventions_source": None, "conventions_from_checkpoint": []})
    user = tokenizer.model_fields_set
    values = {k: v for k, v in conventions.values.items() if k not in user}
    if "passage_tokens" in values and "stride_tokens" not in user:  # windows overlap by a quarter
        values["stride_tokens"] = max(1, values["passage_tokens"] * 3 // 4)
    data = tokenizer.model_dump() | values
    data |= {"conventions_source": conventions.source, "conventions_from_checkpoint": sorted(k for k in values if k in conventions.values)}
    try:
        return TokenizerConfig.model_validate(data)
    except ValidationError as e:
        raise ValueError(f"{model_name}: the conventions in {conventions.source} do not make a valid tokenizer config: {e}") from None


class IndexConfig(_JobConfig):
    """Configuration of ``mvr index``: everything that determines the vectors in the shards.
    When ``model.name`` is a published PyLate or ColBERT checkpoint, its conventions file
    fills the ``tokenizer`` fields the user did not set (``apply_checkpoint_conventions``);
    the resolved values and their source are what jobs use and the manifest stores."""

    _user_sections = ("tokenizer",)

    model: ModelConfig = ModelConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    compress: CompressConfig = CompressConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    storage: StorageConfig = StorageConfig()
    limit: Optional[int] = Field(None, ge=1, description="index only the first N input rows")

    @model_validator(mode="after")
    def _checkpoint_conventions(self) -> "IndexConfig":
        resolved = apply_checkpoint_conventions(self.model.name, self.tokenizer)
        if resolved is not self.tokenizer:
            self.tokenizer = resolved
        return self

    @classmethod
    def of_index(cls, config: dict) -> "IndexConfig":
        """The configuration an index's manifest records (``Manifest.config``), with the
        fields added since its version was written set to what that version did: a manifest
        without ``compress.centroid_space`` was written when every index's centroids were
        raw (its ``mvr add`` computes new passages' centroids the same way)."""
        data = copy.deepcopy(config)
        compress = data.setdefault("compress", {})
        if isinstance(compress, dict):
            compress.setdefault("centroid_space", "raw")
        return cls.model_validate(data)

    def vector_settings(self) -> dict:
        """The part of the config that determines the stored vectors (for resume checks)."""
        settings = self.model_dump(mode="json", include={"model", "tokenizer", "compress"})
        tokenizer = settings["tokenizer"]
        for key in _PROVENANCE:
            tokenizer.pop(key, None)
        for key, default in _ADDED_DEFAULTS.items():
            if tokenizer.get(key) == default:
                tokenizer.pop(key)
        return settings


class BM25Config(_Section):
    """BM25 over passages (``operators/retrieval/bm25.py``, bm25s): text analysis and scoring. The
    defaults are the reference settings of ../shared/datasets/README.md."""

    stopwords: Optional[str] = Field("en", description="bm25s stopword list (e.g. en), None: keep every word")
    stemmer: Optional[str] = Field("english", description="PyStemmer Snowball language, None: no stemming")
    k1: float = Field(1.5, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    method: Literal["lucene", "robertson", "atire"] = "lucene"

    def params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "method": self.method}


class BM25BuildConfig(_JobConfig):
    """Configuration of ``mvr build-bm25`` (also run by ``mvr build-ann``): BM25 partitions
    over the same passage ranges as the ANN partitions."""

    partitions: int = Field(1, ge=1)
    bm25: BM25Config = BM25Config()
    cpus_per_task: float = Field(1.0, gt=0)


class AnnBuildConfig(_JobConfig):
    """Configuration of ``mvr build-ann``: which vectors get ANN partitions, and how built.
    ``params`` override the backend's size-based defaults (FAISS: nlist, m, nbits,
    training_sample_size, nprobe, seed; ScaNN: num_leaves, training_sample_size,
    leaves_to_search, reorder_k, dims_per_block, anisotropic_quantization_threshold;
    codec-ivf: nprobe, and nlist, training_sample_size, seed where the codec has no centroids;
    see docs/ann.md); they apply to every partition of every kind built."""

    backend: Literal["faiss-ivfpq", "scann", "codec-ivf"] = Field(
        "codec-ivf",
        description="codec-ivf (the default: lists of vector ids over the token codec's own centroids, 4 B a vector, no second copy; "
        "k-means cells for the kinds whose codec has none), faiss-ivfpq or scann (a quantizer and a second, lossy copy of every vector): docs/search.md",
    )
    partitions: int = Field(1, ge=1)
    vectors: list[VectorKind] = Field(default_factory=lambda: list(VECTOR_KINDS))
    params: dict[str, Any] = Field(default_factory=dict)
    cpus_per_task: Optional[float] = Field(None, gt=0, description="default: a node's CPUs shared by the tasks that run at once")
    threads_per_task: Optional[int] = Field(None, ge=1, description="FAISS / ScaNN threads; default: the CPUs reserved")
    bm25: Optional[BM25Config] = Field(BM25Config(), description="also build BM25 partitions lined up with the ANN partitions; None: do not")


class FirstStageConfig(_Section):
    """Candidate-stage knobs of one mode (``operators.retrieval.partition.FirstStage``). Backend knobs
    left unset use the index's defaults; each backend reads only its own."""

    k_prime: int = Field(ge=1, description="nearest indexed vectors asked for each query vector")
    candidate_cap: int = Field(ge=1, description="passages rescored at most, over all partitions")
    probe_fraction: Optional[float] = Field(
        None,
        gt=0,
        le=1,
        description="share of coarse cells visited (at least 8; not codec-ivf over a codec's centroids, which visits nprobe lists); None: the index's default",
    )
    nprobe: Optional[int] = Field(None, ge=1, description="FAISS and codec-ivf: coarse cells visited (overrides probe_fraction)")
    leaves_to_search: Optional[int] = Field(None, ge=1, description="ScaNN: tree leaves visited (overrides probe_fraction)")
    reorder_k: Optional[int] = Field(None, ge=1, description="ScaNN built with a reorder stage (reorder_k > 0; not the default): candidates re-ranked in float")
    k_ref: int = Field(
        10,
        ge=1,
        description="the k that k_prime and candidate_cap are sized for: a search for more documents scales k_prime by k / k_ref and raises candidate_cap to 4·k",
    )

    def first_stage(self) -> FirstStage:
        knobs = {"probe_fraction": self.probe_fraction, "nprobe": self.nprobe, "leaves_to_search": self.leaves_to_search, "reorder_k": self.reorder_k}
        return FirstStage(self.k_prime, self.candidate_cap, {k: v for k, v in knobs.items() if v is not None}, self.k_ref)


class HybridConfig(_Section):
    """Mode ``hybrid`` (``operators/retrieval/fusion.py``): which dense mode is fused with BM25, how,
    and how many passages each side contributes. ``lam`` (λ) is the dense side's weight;
    ``mvr tune-hybrid`` picks it on held-out queries."""

    dense: DenseMode = "maxsim"
    fusion: Fusion = "weighted"
    lam: float = Field(0.8, ge=0, le=1, description="λ: fused = λ·dense' + (1−λ)·bm25' (each side min-max normalised over its norm_depth best)")
    rrf_k: int = Field(60, ge=1, description="reciprocal rank fusion: 1/(rrf_k + rank) per side")
    n_best: int = Field(100, ge=1, description="passages each side contributes to the union")
    norm_depth: int = Field(20, ge=1, description="weighted fusion: each side's min and max are taken over its best norm_depth passages")

    def params(self) -> HybridParams:
        return HybridParams(self.dense, self.fusion, self.lam, self.rrf_k, self.n_best, self.norm_depth)


class SearchConfig(_JobConfig):
    """How queries are answered (``pipeline/retrieval/searcher.py``): first-stage knobs per mode, or
    ``exact`` brute force. Defaults meet the targets in docs/search.md."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    exact: bool = False
    maxsim: FirstStageConfig = FirstStageConfig(k_prime=32, candidate_cap=1024, probe_fraction=1 / 64)
    softmax_centroid: FirstStageConfig = Field(FirstStageConfig(k_prime=200, candidate_cap=1024, probe_fraction=1 / 4), alias="softmax-centroid")
    first_m: FirstStageConfig = Field(FirstStageConfig(k_prime=100, candidate_cap=1024, probe_fraction=1 / 4), alias="first-m")
    pooled: FirstStageConfig = FirstStageConfig(k_prime=100, candidate_cap=1024, probe_fraction=1 / 4)
    hybrid: HybridConfig = HybridConfig()

    def for_mode(self, mode: str) -> FirstStageConfig:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        return getattr(self, mode.replace("-", "_"))


class EvalConfig(_JobConfig):
    """Configuration of ``mvr eval``: which collection, which modes, how searched. ``sweep``
    lists values of the first-stage knob ``sweep_knob`` to measure quality against latency
    (each mode's other knobs stay at ``search``'s values)."""

    dataset: str = ""
    split: str = "test"
    modes: list[SearchMode] = Field(default_factory=lambda: list[SearchMode](MODES))
    k: int = Field(100, ge=10, le=1000, description="documents retrieved a query (R@100 needs 100)")
    overlap: bool = Field(True, description="also run exact search for overlap@10 with the exact ranking")
    sweep: list[float] = Field(default_factory=list)
    sweep_knob: Literal["k_prime", "candidate_cap", "probe_fraction", "nprobe", "leaves_to_search", "reorder_k"] = "k_prime"
    search: SearchConfig = SearchConfig()


class ReplicaConfig(_Section):
    """Replicas of one Serve deployment and what each reserves. ``None`` = sized from the
    cluster by ``pipeline.serving.app.plan_resources`` (docs/serve.md says how)."""

    replicas: int = Field(1, ge=1)
    num_cpus: Optional[float] = Field(None, gt=0, description="logical CPUs reserved per replica")
    threads: Optional[int] = Field(None, ge=1, description="torch / OpenMP / BLAS threads per replica")
    max_ongoing_requests: int = Field(32, ge=1, description="requests a replica works on at once; more wait in the handle's queue")


class EncoderReplicaConfig(ReplicaConfig):
    """The query encoder: batches concurrent queries (Serve's ``@serve.batch``). Placed in the
    ingress by default (one hop less a query; its replicas are the ingress's, each reserving
    these CPUs / GPUs on top of the ingress's own), or as its own deployment (shared by index
    versions of the same model, ``replicas`` of it, scaled apart from the ingress)."""

    placement: Literal["ingress", "deployment"] = Field(
        "ingress", description="ingress: encode in the Searcher replicas (one hop less); deployment: a QueryEncoder deployment of its own"
    )
    num_gpus: Optional[float] = Field(None, ge=0, description="None: 1 when the cluster has a GPU")
    max_batch_size: int = Field(16, ge=1, description="queries encoded in one forward pass at most")
    batch_wait_ms: float = Field(0.0, ge=0, description="how long a batch waits to fill; 0: queries that queued while the last batch ran form the next")


class PartitionReplicaConfig(ReplicaConfig):
    """The index's partitions: each a ``Partition{i}`` deployment of its own by default (what
    lets an index outgrow one machine, a hung partition be left out of an answer, and
    partitions scale apart), or loaded by every ingress replica (``placement: ingress``: no
    trip to a partition, for an index that one replica can map; each ingress replica then
    reserves ``num_cpus`` per partition on top of its own)."""

    placement: Literal["deployment", "ingress"] = Field(
        "deployment", description="deployment: a Partition deployment each; ingress: every Searcher replica maps every partition (no partition trip)"
    )


class ServeConfig(_JobConfig):
    """Configuration of ``mvr serve``: what is served, the HTTP endpoint, replica sizing,
    limits and the fault timeout. The bearer token is not part of it (``--token`` /
    ``MVR_TOKEN``): configs are printed and stored."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    app_name: str = Field("mvr", description="Serve application of the ingress (the HTTP route /)")
    proxy_location: Literal["EveryNode", "HeadOnly"] = Field(
        "EveryNode", description="Serve's HTTP proxies: on every node with a replica (behind a load balancer) or on the head only"
    )
    modes: Optional[list[SearchMode]] = Field(None, description="None: the dense modes, plus bm25 and hybrid when the index has BM25 partitions")
    search: SearchConfig = SearchConfig()
    encoder: EncoderReplicaConfig = EncoderReplicaConfig()
    partition: PartitionReplicaConfig = PartitionReplicaConfig()
    searcher: ReplicaConfig = ReplicaConfig(num_cpus=0.1, max_ongoing_requests=64)
    one_trip_max_partitions: int = Field(
        8,
        ge=0,
        description="ANN modes over at most this many partitions take one trip: hits and each partition's likely share of the candidates rescored together (the same top-k; 0: always two trips)",
    )
    direct_ingress: bool = Field(
        False,
        description="each ingress replica also answers HTTP on its own port (Serve's direct ingress, 30000-31000 on its node, "
        "no proxy hop; put a load balancer over them: docs/serve.md). Needs RAY_SERVE_ENABLE_DIRECT_INGRESS=1 in the Ray "
        "cluster's environment (mvr sets it when it starts Ray itself)",
    )
    partition_timeout_s: float = Field(
        2.0,
        gt=0,
        description="a partition answering none of the calls waiting on it for this times their work (from its last answer; a query at its mode's default k_prime and candidate_cap is 1, a batch of n such queries or one asking n times the candidates n) is left out (degraded answer): a hung partition is cut off, a busy one is waited for",
    )
    encode_timeout_s: float = Field(10.0, gt=0, description="a query not encoded within this is answered 503")
    max_batch_queries: int = Field(256, ge=1, description="queries in one POST /search/batch at most")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="request bodies above this are refused with 413")
    max_header_bytes: int = Field(
        16384, ge=1024, description="requests whose headers total more bytes than this (as sent: names, values, separators) are refused with 431"
    )
    body_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a request body not received whole within this many seconds of its headers is refused with 408 "
        "(a slow or stalled client; the ingress slot it held is freed)",
    )
    cluster_share: float = Field(
        0.5, gt=0, le=1, description="share of the cluster's CPUs one index version reserves by default, so a new version can start beside it"
    )
    reload_poll_s: Optional[float] = Field(
        None, gt=0, description="check the index for a newer committed version this often and switch to it (None: only on POST /admin/reload)"
    )


class ScaleStudyConfig(_JobConfig):
    """Configuration of ``mvr scale-study`` (Reimers & Gurevych's index-size study on mvr's
    own indexes): start from the judged passages of ``dataset``, grow the index in ``steps``
    with the passages of ``distractors`` (other corpora, and the dataset's own unjudged
    passages), and, as a second experiment, with ``random_strings`` random-string passages;
    measure every method at every size."""

    dataset: str = Field("", description="BEIR directory whose judged queries are measured")
    split: str = "test"
    distractors: list[str] = Field(default_factory=list, description="corpora (BEIR dirs or files) whose passages are added")
    random_strings: int = Field(0, ge=0, description="random-string passages for the second experiment (0: skip it)")
    steps: int = Field(5, ge=2, description="index sizes measured, judged passages only up to everything")
    dims: list[int] = Field(default_factory=lambda: [384, 128, 64], description="pooled single-vector dimensions (PCA fitted on the dataset's corpus)")
    modes: list[SingleMode] = Field(default_factory=lambda: list[SingleMode](["bm25", "pooled", "maxsim", "first-m", "softmax-centroid"]))
    workdir: str = Field("", description="where the corpora are indexed (an up-to-date index is reused)")
    indexes: dict[str, str] = Field(
        default_factory=dict, description="indexes already built of the dataset or a distractor: {corpus: index URL}, used as they are instead of indexing it"
    )
    seed: int = 0
    index: IndexConfig = IndexConfig()

    _user_sections = ("index.tokenizer",)
    bm25: BM25Config = BM25Config()


class TuneHybridConfig(_JobConfig):
    """Configuration of ``mvr tune-hybrid``: the judged queries split into ``folds`` seeded
    folds; for each, λ is picked by ``metric`` on the other folds and the fold is scored with
    it, so every query is reported with a λ tuned without it (2 folds: tune on one half,
    report on the other, both ways round). Both sides alone are reported beside it."""

    dataset: str = ""
    split: str = "test"
    dense: DenseMode = "maxsim"
    grid: list[float] = Field(default_factory=lambda: [round(0.05 * i, 2) for i in range(21)], description="λ values tried")
    folds: int = Field(2, ge=2, description="query folds: λ is tuned on all but one, reported on that one")
    seed: int = 0
    metric: Literal["nDCG@10", "RR@10", "R@100"] = "nDCG@10"
    rule: Literal["one-se", "best"] = Field(
        "one-se", description="one-se: of the λ within one standard error of the best on the tuning queries, the nearest the configured λ; best: the best"
    )
    k: int = Field(100, ge=10, le=1000)
    search: SearchConfig = SearchConfig()

    @model_validator(mode="after")
    def _grid_in_range(self) -> "TuneHybridConfig":
        bad = [v for v in self.grid if not 0 <= v <= 1]
        if bad or not self.grid:
            raise ValueError(f"every λ of the grid must be within [0, 1], got {bad or 'an empty grid'}")
        return self


class TrainDataConfig(_Section):
    """Where ``mvr train``'s pairs come from (``operators/training/pairs.py``). DATA is a
    corpus (any input ``mvr index`` reads: unsupervised pairs of ``kinds``), a BEIR directory
    with ``qrels/train.tsv`` (its judged pairs), or a JSONL file of {"query", "positive"[,
    "negatives"]} objects."""

    kinds: list[Literal["ict", "title"]] = Field(
        default_factory=lambda: list[Literal["ict", "title"]](["ict", "title"]), description="unsupervised pair kinds drawn from a corpus"
    )
    max_pairs: Optional[int] = Field(None, ge=1, description="a seeded sample of at most this many pairs (None: all)")
    negatives_from: list[str] = Field(
        default_factory=list,
        description="mvr indexes to mine hard negatives with (BM25 or a dense mode): a pair's in the one holding its positive (else the first)",
    )
    negatives_mode: SingleMode = "bm25"
    negatives: int = Field(1, ge=0, le=16, description="hard negatives a pair, drawn from the ranking's places skip+1 to depth")
    negatives_skip: int = Field(2, ge=0, description="top places of the ranking never drawn (likely unjudged positives)")
    negatives_depth: int = Field(30, ge=2, le=1000)
    eval_datasets: list[str] = Field(default_factory=list, description="BEIR directories whose queries no training query may equal")
    eval_split: str = "test"
    on_overlap: Literal["refuse", "drop"] = Field(
        "refuse", description="a training query equal to an evaluation query: refuse the data, or drop those pairs (and say so)"
    )


class TrainLoopConfig(_Section):
    """The optimisation: AdamW, linear warm-up then linear decay, in-batch negatives plus the
    mined ones, optionally distilled from the frozen base model's pooled scores and held to
    its scores in the other modes."""

    steps: Optional[int] = Field(None, ge=1, description="optimiser steps (None: one pass over the pairs)")
    batch_size: int = Field(16, ge=2, description="pairs a step a worker (the others' positives are its in-batch negatives)")
    learning_rate: float = Field(3e-5, gt=0)
    warmup: float = Field(0.1, ge=0, lt=1, description="share of the steps spent warming up")
    weight_decay: float = Field(0.01, ge=0)
    temperature: Optional[float] = Field(None, gt=0, description="scores / temperature before the softmax (None: 1 for maxsim, 0.05 for cosine modes)")
    distill: float = Field(0.5, ge=0, description="weight of the KL term to the frozen base model's pooled scores (0: none)")
    preserve: float = Field(3.0, ge=0, description="weight of the KL terms holding every other mode's scores at the frozen base model's (0: none)")
    checkpoint_every: int = Field(50, ge=1, description="steps between checkpoints (and the last step)")
    seed: int = 0
    max_grad_norm: float = Field(1.0, gt=0)
    group_by_length: bool = Field(
        False, description="batches of pairs of similar length (sorted within windows of 50 batches): less padding, more pairs/s (docs/training.md)"
    )


class TrainRuntimeConfig(_Section):
    """The Ray Train worker group: ``workers`` data-parallel workers (DDP), each on a GPU when
    the cluster has them (mixed precision, bf16), else on ``cpus_per_worker`` CPUs."""

    workers: int = Field(1, ge=1)
    use_gpu: Optional[bool] = Field(None, description="None: when the cluster has GPUs")
    cpus_per_worker: Optional[float] = Field(
        None, gt=0, description="CPUs reserved a worker, and its torch threads (None: 1 reserved, torch's default threads: all the node's cores)"
    )
    max_failures: int = Field(3, ge=0, description="worker-group restarts from the last checkpoint before the job fails")


class TrainConfig(_JobConfig):
    """Configuration of ``mvr train DATA OUT``: train ``base``'s encoder with ``objective``'s
    aggregator in the loss (``operators/retrieval/differentiable.py``); OUT becomes a
    PyLate / sentence-transformers checkpoint that ``mvr index --model OUT`` loads with the
    ``tokenizer`` conventions it was trained with: the base checkpoint's own (a PyLate or
    ColBERT base keeps its markers and lengths, ``apply_checkpoint_conventions``), mvr's
    defaults where it publishes none (the packaged MiniLM: no marker tokens, which it never
    saw in its training), the user's where set."""

    _user_sections = ("tokenizer",)

    base: str = Field("minilm", description="the checkpoint to start from (as model.name)")
    objective: DenseMode = "maxsim"
    tokenizer: TokenizerConfig = TokenizerConfig()
    compress: CompressConfig = CompressConfig()
    data: TrainDataConfig = TrainDataConfig()
    train: TrainLoopConfig = TrainLoopConfig()
    runtime: TrainRuntimeConfig = TrainRuntimeConfig()

    @model_validator(mode="after")
    def _checkpoint_conventions(self) -> "TrainConfig":
        resolved = apply_checkpoint_conventions(self.base, self.tokenizer)
        if resolved is not self.tokenizer:
            self.tokenizer = resolved
        return self

    def temperature(self, mode: Optional[str] = None) -> float:
        """The softmax temperature of a mode's scores (the objective's by default)."""
        if self.train.temperature is not None:
            return self.train.temperature
        return 1.0 if (mode or self.objective) == "maxsim" else 0.05
