"""The encode stage on its own (no Ray): token ids in, shard rows out."""

import numpy as np
import pyarrow as pa

from operators.checkpoint import load_tokenizer
from operators.tokenizer import PassageTokenizer
from pipeline.config import IndexConfig
from pipeline.encode_stage import EncodeCompress
from pipeline.stages import PASSAGE_SCHEMA
from storage.schema import arrow_to_matrix, arrow_to_packed


def _stage(**compress) -> EncodeCompress:
    c = IndexConfig.from_yaml(None, **{f"compress.{k}": v for k, v in compress.items()})
    return EncodeCompress(c.model.model_dump(), c.tokenizer.model_dump(), c.compress.model_dump(), batch_size=2, torch_threads=None)


def test_rows_carry_every_representation_and_empty_batches_pass():
    stage = _stage(projection_dim=64, centroids=3, first_m=2)
    assert stage(PASSAGE_SCHEMA.empty_table()).num_rows == 0
    tok = PassageTokenizer(load_tokenizer("minilm"))
    texts = ["a short one", "a somewhat longer passage about the Fahrenheit temperature scale"]
    passages = tok.split(["a", "b"], ["", ""], texts)
    batch = pa.table(
        {
            "doc_id": ["a", "b"], "passage_idx": [0, 0], "block_id": ["b0", "b0"], "row_index": [0, 1], "seq": [0, 1],
            "title": ["", ""], "text": texts, "char_start": [0, 0], "char_end": [len(t) for t in texts],
            "input_ids": [p.input_ids for p in passages],
        },
        schema=PASSAGE_SCHEMA,
    )
    out = stage(batch)
    assert out.column("doc_id").to_pylist() == ["a", "b"]
    tokens = arrow_to_packed(out["tokens"])
    assert tokens.lengths.tolist() == [len(p.input_ids) for p in passages] == out["n_tokens"].to_pylist()
    assert tokens.vectors.shape[1] == 64
    np.testing.assert_allclose(np.linalg.norm(tokens.vectors.astype(np.float32), axis=1), 1.0, atol=2e-3)
    assert arrow_to_packed(out["first_m"]).lengths.tolist() == [2, 2]
    assert arrow_to_packed(out["centroids"]).lengths.tolist() == [3, 3]
    assert arrow_to_matrix(out["pooled"]).shape == (2, 64)
