"""The encode actors of the indexing graph: hold the model (on the GPU when the actor got
one) and encode token ids. ``EncodeSample`` returns a sample's token vectors (to train the
index's codec), and when it encodes the whole corpus keeps every passage's vectors in staging;
``EncodeCompress`` computes every stored representation and compresses it with the codec (the
compress stage); ``compress_encoded`` is that compress stage alone, for the passages the sample
pass kept (no model: a small corpus is encoded once), as a Ray task rather than an actor (a
task runs in a pooled worker that has already imported torch: no actor process to start).
A small job (``runtime.small_job_rows``) runs ``EncodeSample`` and ``EncodeCompress`` in the
driver process (``in_driver.py``), the model kept there for the driver's next small job."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Optional

import numpy as np
import pyarrow as pa

from mvr.operators import codecs
from mvr.operators.encode.compress import Compressor, l2_normalize, projection_matrix
from mvr.operators.encode.token_pooling import pool_passages
from mvr.operators.encode.tokenizer import PassageTokenizer
from mvr.operators.packed import Packed
from mvr.storage import staging
from mvr.storage.codec_file import refined_first_m
from mvr.storage.schema import codes_to_arrow, packed_to_arrow, shard_schema

if TYPE_CHECKING:
    from mvr.operators.encode.encoder import TokenEncoder


def list_column(column: pa.ChunkedArray) -> list[np.ndarray]:
    """list<int32> column → one numpy array per row."""
    arr = column.combine_chunks()
    offsets = np.asarray(arr.offsets)
    values = arr.flatten().to_numpy(zero_copy_only=False)
    return [values[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]] for i in range(len(arr))]


@functools.lru_cache(maxsize=1)
def token_encoder(name: str, device: str, dtype: str) -> "TokenEncoder":
    """The model, loaded once per process (the last one asked for: a driver that ran one
    small job runs its next one without loading it again). torch is imported here, not with
    this module: a process that only plans a job, or a worker that unpickles a function of a
    module importing this one (``mvr add``'s ANN tasks), does not pay for it."""
    from mvr.operators.encode.encoder import TokenEncoder

    return TokenEncoder(name, device, dtype)


class _Encoder:
    """The model, tokenizer conventions and projection of an index, in one actor (or, for a
    small job, in the driver)."""

    def __init__(self, model: dict, tokenizer_settings: dict, compress: dict, batch_size: int, torch_threads: Optional[int]) -> None:
        from mvr.operators.encode.encoder import set_threads

        set_threads(torch_threads)
        self.encoder = token_encoder(model["name"], model["device"], model["dtype"])
        self.tokenizer = PassageTokenizer(self.encoder.tokenizer, **tokenizer_settings)
        self.projection = None
        if compress["projection_dim"]:
            self.projection = projection_matrix(self.encoder.dim, compress["projection_dim"], compress["projection_seed"])
        self.dim = compress["projection_dim"] or self.encoder.dim
        self.pool_factor = compress.get("pool_factor", 1)  # left out of the config's dump at 1
        self.batch_size = batch_size

    def encode(self, batch: pa.Table) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(raw (n_i, model dim) float32 vectors, token ids) of every passage of ``batch``."""
        ids = list_column(batch["input_ids"])
        return self.encoder.encode(ids, self.batch_size, self.tokenizer.pad_id), ids


def vector_keys(block_ids: np.ndarray, seqs: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """A fixed pseudo-random number in [0, 1) for each vector j of each passage (block, seq)
    with ``lengths`` vectors, the same on every worker: ``stages.sample_keys`` of the passage
    (with another seed than the passage draw) spread over its vectors by a multiplicative hash."""
    from mvr.pipeline.indexing.stages import sample_keys

    base = (sample_keys(block_ids, seqs, seed + 1) * float(1 << 53)).astype(np.uint64)
    j = np.arange(int(lengths.sum()), dtype=np.uint64) - np.repeat(np.cumsum(lengths) - lengths, lengths).astype(np.uint64)
    h = (np.repeat(base, lengths) + j * np.uint64(0x632BE59BD9B4E019)) * np.uint64(0x9E3779B97F4A7C15)
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class EncodeSample(_Encoder):
    """Sample actor: passages with token ids → ``block_id``, ``seq`` and their stored token
    vectors (projected, L2-normalised, kept tokens only, pooled by ``compress.pool_factor``;
    float16), the codec's training data; with ``vector_fraction`` < 1 only that seeded share
    of each passage's vectors (``vector_keys``), so a sample from many passages stays small."""

    def __init__(self, *args, vector_fraction: float = 1.0, seed: int = 0, keep_url: Optional[str] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.vector_fraction = vector_fraction
        self.seed = seed
        self.keep_url = keep_url  # an index URL: keep every encoded batch in its staging

    def __call__(self, batch: pa.Table) -> pa.Table:
        schema = pa.schema([("block_id", pa.string()), ("seq", pa.int32()), ("tokens", packed_to_arrow([], self.dim).type)])
        if batch.num_rows == 0:
            return schema.empty_table()
        raw, ids = self.encode(batch)
        if self.projection is not None:
            raw = [r @ self.projection for r in raw]
        masks = [self.tokenizer.keep_mask(i) for i in ids]
        if self.keep_url is not None:
            staging.write_encoded(self.keep_url, batch.drop_columns(["input_ids"]), raw, masks)
        tokens = pool_passages([l2_normalize(r)[m] for r, m in zip(raw, masks)], self.pool_factor)
        if self.vector_fraction < 1:
            lengths = np.array([len(t) for t in tokens], dtype=np.int64)
            keep = vector_keys(batch["block_id"].to_numpy(zero_copy_only=False), batch["seq"].to_numpy(), lengths, self.seed) < self.vector_fraction
            tokens = [t[k] for t, k in zip(tokens, np.split(keep, np.cumsum(lengths)[:-1]))]
        return pa.table({"block_id": batch["block_id"], "seq": batch["seq"], "tokens": packed_to_arrow(tokens, self.dim)}, schema=schema)


def first_rows(offsets: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, offsets) of the first ``m`` rows of each passage of a packed run with
    ``offsets`` ((n + 1,) int64): the (k,) int64 row numbers, passage by passage, and their
    own (n + 1,) offsets (a passage with fewer rows keeps all of them)."""
    lengths = np.minimum(np.diff(offsets), m)
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return np.arange(out[-1], dtype=np.int64) + np.repeat(offsets[:-1] - out[:-1], lengths), out


class BatchCompressor:
    """The compress stage without the model: encoded passages → rows of the shard schema
    with every representation as codes of the index's codecs (token vectors pooled first when
    ``compress.pool_factor`` > 1: ``n_tokens`` counts the stored vectors) (``codec_files``:
    {group: file bytes}, ``storage/codec_file.py``: tokens in the ``tokens`` codec, pooled and
    centroids in ``pooled``, first-m in ``pooled`` or, with a ``first_m`` file, as the
    refinement codes of each passage's first m stored token vectors; ``dim``: the encoder's
    output dimension after the projection)."""

    def __init__(self, compress: dict, codec_files: dict[str, bytes], dim: int) -> None:
        self.dim = dim
        self.pool_factor = compress.get("pool_factor", 1)
        self.first_m = compress["first_m"]
        self.codecs = {g: codecs.from_bytes(data, f"the index's {g} codec") for g, data in codec_files.items()}
        for g, c in self.codecs.items():
            if c.dim_in != dim:
                raise ValueError(f"the {g} codec takes {c.dim_in}-dimensional vectors, the encoder makes {dim}")
        self.refined = refined_first_m(self.codecs)
        if self.refined is not None and self.pool_factor > 1:
            raise ValueError(
                "a first-m refinement reads the first m stored token vectors: with token pooling (pool_factor > 1) first-m needs a column of its own"
            )
        self.compressor = Compressor(
            None, compress["pooling"], compress["first_m"], compress["centroids"], compress["kmeans_iterations"], compress["centroid_space"]
        )
        self.schema = shard_schema(self.codecs)

    def _codes(self, arrays: list[np.ndarray], group: str) -> pa.Array:
        packed = Packed.from_list(arrays, self.dim)
        return codes_to_arrow(self.codecs[group].encode(packed.vectors), packed.offsets)

    def _tokens_and_first_m(self, reps: dict[str, list[np.ndarray]]) -> tuple[pa.Array, pa.Array]:
        """The tokens and first_m columns: with a refinement, first-m is the refinement of
        each passage's first m stored token vectors, made from the token codes just computed
        (no vector coded twice)."""
        if self.refined is None:
            return self._codes(reps["tokens"], "tokens"), self._codes(reps["first_m"], "pooled")
        tokens = Packed.from_list(reps["tokens"], self.dim)
        codes = self.codecs["tokens"].encode(tokens.vectors)
        rows, offsets = first_rows(tokens.offsets, self.first_m)
        return codes_to_arrow(codes, tokens.offsets), codes_to_arrow(self.refined.refine(tokens.vectors[rows], codes[rows]), offsets)

    def __call__(self, meta: pa.Table, raw: list[np.ndarray], keep: list[np.ndarray]) -> pa.Table:
        """``meta``: the passages' columns (no ``input_ids``); ``raw``: (n_i, dim) float32
        vectors a passage as the encoder made them (projected, not normalised); ``keep``: (n_i,)
        bool, the tokens whose vectors are stored."""
        if meta.num_rows == 0:
            return self.schema.empty_table()
        reps = self.compressor(raw, keep)
        reps["tokens"] = pool_passages(reps["tokens"], self.pool_factor)  # token vectors only: the others are computed before
        tokens, first_m = self._tokens_and_first_m(reps)
        return pa.table(
            {
                **{name: meta[name] for name in meta.column_names},
                "n_tokens": pa.array([len(t) for t in reps["tokens"]], pa.int32()),
                "tokens": tokens,
                "pooled": codes_to_arrow(self.codecs["pooled"].encode(np.stack(reps["pooled"]))),
                "first_m": first_m,
                "centroids": self._codes(reps["centroids"], "pooled"),
            },
            schema=self.schema,
        )


class EncodeCompress(_Encoder):
    """Encode actor: passages with token ids → rows of the shard schema (``BatchCompressor``)."""

    def __init__(
        self, model: dict, tokenizer_settings: dict, compress: dict, batch_size: int, torch_threads: Optional[int], codec_files: dict[str, bytes]
    ) -> None:
        super().__init__(model, tokenizer_settings, compress, batch_size, torch_threads)
        self.compress = BatchCompressor(compress, codec_files, self.dim)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return self.compress.schema.empty_table()
        raw, ids = self.encode(batch)
        if self.projection is not None:
            raw = [r @ self.projection for r in raw]
        return self.compress(batch.drop_columns(["input_ids"]), raw, [self.tokenizer.keep_mask(i) for i in ids])


@functools.lru_cache(maxsize=2)
def _batch_compressor(compress_json: str, codec_files: tuple[tuple[str, bytes], ...], dim: int) -> BatchCompressor:
    """One ``BatchCompressor`` per worker process and index (a task worker runs many batches)."""
    return BatchCompressor(json.loads(compress_json), dict(codec_files), dim)


def compress_encoded(batch: pa.Table, compress: dict, codec_files: dict[str, bytes], dim: int, threads: Optional[int] = None) -> pa.Table:
    """Compress task for the batches the sample pass kept (``staging.write_encoded``): a batch
    of ``url`` rows → rows of the shard schema, as ``EncodeCompress`` makes them from the same
    vectors (``threads``: torch's intra-op threads, for the centroids' k-means)."""
    from mvr.operators.encode.encoder import set_threads

    set_threads(threads)
    compressor = _batch_compressor(json.dumps(compress, sort_keys=True), tuple(sorted(codec_files.items())), dim)
    parts = [compressor(*staging.read_encoded(url)) for url in batch["url"].to_pylist()]
    return pa.concat_tables(parts) if parts else compressor.schema.empty_table()
