"""The encode actor of the indexing graph: holds the model (on the GPU when its actor got
one), encodes token ids and compresses the vectors into every stored representation."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from operators.compress import Compressor, projection_matrix
from operators.encoder import TokenEncoder, set_threads
from operators.tokenizer import PassageTokenizer
from storage.schema import matrix_to_arrow, packed_to_arrow, shard_schema


def list_column(column: pa.ChunkedArray) -> list[np.ndarray]:
    """list<int32> column → one numpy array per row."""
    arr = column.combine_chunks()
    offsets = np.asarray(arr.offsets)
    values = arr.flatten().to_numpy(zero_copy_only=False)
    return [values[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]] for i in range(len(arr))]


class EncodeCompress:
    """Encode actor: holds the model (GPU when the actor got one). Passages with token ids →
    rows of the shard schema with every representation, vectors float16."""

    def __init__(self, model: dict, tokenizer_settings: dict, compress: dict, batch_size: int, torch_threads: Optional[int]) -> None:
        set_threads(torch_threads)
        self.encoder = TokenEncoder(model["name"], model["device"], model["dtype"])
        self.tokenizer = PassageTokenizer(self.encoder.tokenizer, **tokenizer_settings)
        projection = None
        if compress["projection_dim"]:
            projection = projection_matrix(self.encoder.dim, compress["projection_dim"], compress["projection_seed"])
        self.dim = compress["projection_dim"] or self.encoder.dim
        self.compressor = Compressor(
            projection, compress["pooling"], compress["first_m"], compress["centroids"], compress["kmeans_iterations"]
        )
        self.batch_size = batch_size
        self.schema = shard_schema(self.dim)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return self.schema.empty_table()
        ids = list_column(batch["input_ids"])
        raw = self.encoder.encode(ids, self.batch_size, self.tokenizer.pad_id)
        reps = self.compressor(raw, [self.tokenizer.keep_mask(i) for i in ids])
        meta = batch.drop_columns(["input_ids"])
        return pa.table(
            {
                **{name: meta[name] for name in meta.column_names},
                "n_tokens": pa.array([len(t) for t in reps["tokens"]], pa.int32()),
                "tokens": packed_to_arrow(reps["tokens"], self.dim),
                "pooled": matrix_to_arrow(np.stack(reps["pooled"])),
                "first_m": packed_to_arrow(reps["first_m"], self.dim),
                "centroids": packed_to_arrow(reps["centroids"], self.dim),
            },
            schema=self.schema,
        )
