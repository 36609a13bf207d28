"""Typed job configuration: one object per job, loadable from YAML, stored in the manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Section):
    """Which encoder to load. ``name`` is a local directory, or ``minilm`` for the packaged
    all-MiniLM-L6-v2 weights (offline default), or a Hugging Face hub id (fetched only then)."""

    name: str = "minilm"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU


class TokenizerConfig(_Section):
    """ColBERT conventions. Defaults are the plain-encoder settings the reference figures use
    (no markers, no [MASK] augmentation, every token kept); ``configs/colbert.yaml`` sets ColBERT's."""

    passage_tokens: int = Field(256, ge=8, description="max tokens of a passage, specials included")
    stride_tokens: int = Field(192, ge=1, description="window start step when a document is split")
    split_long_documents: bool = True  # false: truncate to passage_tokens instead
    query_tokens: int = Field(32, ge=4)
    query_marker: Optional[str] = None  # e.g. "[unused0]" for ColBERT
    document_marker: Optional[str] = None  # e.g. "[unused1]" for ColBERT
    query_augmentation: bool = False  # pad queries with [MASK] to query_tokens
    skip_punctuation: bool = False  # drop document vectors of punctuation tokens
    title_separator: str = " "  # passage text = title + sep + text (title omitted when empty)

    @model_validator(mode="after")
    def _stride_fits(self) -> "TokenizerConfig":
        if self.stride_tokens > self.passage_tokens:
            raise ValueError("stride_tokens must be <= passage_tokens (windows would skip text)")
        return self


class CompressConfig(_Section):
    """Per-passage representations written to the shards."""

    projection_dim: Optional[int] = Field(None, ge=8, description="fixed seeded orthogonal reduction")
    projection_seed: int = 0
    pooling: Literal["mean", "cls"] = "mean"
    first_m: int = Field(8, ge=1)
    centroids: int = Field(4, ge=1)
    kmeans_iterations: int = Field(10, ge=1)


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


class IndexConfig(_Section):
    """Configuration of ``mvr index``: everything that determines the vectors in the shards."""

    model: ModelConfig = ModelConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    compress: CompressConfig = CompressConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    limit: Optional[int] = Field(None, ge=1, description="index only the first N input rows")

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides: object) -> "IndexConfig":
        """Load a YAML file (or defaults when ``path`` is None) and apply dotted overrides,
        e.g. ``{"model.name": "/models/colbertv2.0"}``."""
        data: dict = {}
        if path is not None:
            data = yaml.safe_load(Path(path).read_text()) or {}
        for key, value in overrides.items():
            if value is None:
                continue
            node = data
            *parents, leaf = key.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return cls.model_validate(data)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def vector_settings(self) -> dict:
        """The part of the config that determines the stored vectors (for resume checks)."""
        return self.model_dump(mode="json", include={"model", "tokenizer", "compress"})
