"""The three checkpoint formats, on small checkpoints written here in those exact layouts."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertModel

from operators.checkpoint import detect_format
from operators.encoder import TokenEncoder


def _tiny_bert(tokenizer) -> BertModel:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return BertModel(cfg).eval()


def _expected(model: BertModel, ids: list[np.ndarray], weight: torch.Tensor | None) -> list[np.ndarray]:
    out = []
    with torch.no_grad():
        for i in ids:
            h = model(input_ids=torch.tensor([i.tolist()])).last_hidden_state[0]
            out.append((h @ weight.T if weight is not None else h).numpy())
    return out


@pytest.fixture
def sample_ids(minilm_tokenizer):
    texts = ["late interaction retrieval", "a somewhat longer passage about thermometers and Fahrenheit scales"]
    return [np.asarray(minilm_tokenizer(t)["input_ids"], dtype=np.int32) for t in texts]


def test_colbert_checkpoint(tmp_path: Path, minilm_tokenizer, sample_ids):
    """colbertv2.0 layout: one weights file with ``bert.*`` and a bias-free ``linear``."""
    bert = _tiny_bert(minilm_tokenizer)
    linear = torch.randn(16, 32)
    state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    state["linear.weight"] = linear
    save_file(state, str(tmp_path / "model.safetensors"))
    config = bert.config.to_dict() | {"architectures": ["HF_ColBERT"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    minilm_tokenizer.save_pretrained(tmp_path)
    assert detect_format(str(tmp_path)) == "colbert"
    enc = TokenEncoder(str(tmp_path))
    assert enc.dim == 16
    for got, exp in zip(enc.encode(sample_ids, batch_size=2), _expected(bert, sample_ids, linear)):
        np.testing.assert_allclose(got, exp, atol=1e-4)


def test_sentence_transformers_dense_checkpoint(tmp_path: Path, minilm_tokenizer, sample_ids):
    """PyLate / sentence-transformers layout, saved by sentence-transformers itself."""
    from sentence_transformers import SentenceTransformer, models

    bert = _tiny_bert(minilm_tokenizer)
    bert.save_pretrained(tmp_path / "bert")
    minilm_tokenizer.save_pretrained(tmp_path / "bert")
    transformer = models.Transformer(str(tmp_path / "bert"))
    dense = models.Dense(32, 16, bias=False, activation_function=torch.nn.Identity())
    SentenceTransformer(modules=[transformer, dense]).save(str(tmp_path / "st"))
    assert detect_format(str(tmp_path / "st")) == "sentence-transformers"
    enc = TokenEncoder(str(tmp_path / "st"))
    assert enc.dim == 16
    weight = dense.linear.weight.detach()
    for got, exp in zip(enc.encode(sample_ids, batch_size=1), _expected(bert, sample_ids, weight)):
        np.testing.assert_allclose(got, exp, atol=1e-4)


def test_plain_checkpoint(tmp_path: Path, minilm_tokenizer, sample_ids):
    bert = _tiny_bert(minilm_tokenizer)
    bert.save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    assert detect_format(str(tmp_path)) == "plain"
    enc = TokenEncoder(str(tmp_path))
    assert enc.dim == 32
    for got, exp in zip(enc.encode(sample_ids, batch_size=2), _expected(bert, sample_ids, None)):
        np.testing.assert_allclose(got, exp, atol=1e-4)
