"""The three checkpoint formats, on small checkpoints written here in those exact layouts."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertModel

from mvr.operators.encode.checkpoint import detect_format, output_dim
from mvr.operators.encode.encoder import TokenEncoder


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
    assert enc.dim == output_dim(str(tmp_path)) == 16  # output_dim: from the file's header, no model loaded
    for got, exp in zip(enc.encode(sample_ids, batch_size=2), _expected(bert, sample_ids, linear)):
        np.testing.assert_allclose(got, exp, atol=1e-4)
    (tmp_path / "model.safetensors").unlink()
    torch.save(state, tmp_path / "pytorch_model.bin")  # the older weights file
    assert output_dim(str(tmp_path)) == TokenEncoder(str(tmp_path)).dim == 16


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
    assert enc.dim == output_dim(str(tmp_path / "st")) == 16
    weight = dense.linear.weight.detach()
    for got, exp in zip(enc.encode(sample_ids, batch_size=1), _expected(bert, sample_ids, weight)):
        np.testing.assert_allclose(got, exp, atol=1e-4)


def test_plain_checkpoint(tmp_path: Path, minilm_tokenizer, sample_ids):
    bert = _tiny_bert(minilm_tokenizer)
    bert.save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    assert detect_format(str(tmp_path)) == "plain"
    enc = TokenEncoder(str(tmp_path))
    assert enc.dim == output_dim(str(tmp_path)) == 32
    for got, exp in zip(enc.encode(sample_ids, batch_size=2), _expected(bert, sample_ids, None)):
        np.testing.assert_allclose(got, exp, atol=1e-4)


def test_stacked_dense_modules_with_residual(tmp_path: Path, minilm_tokenizer, sample_ids):
    """PyLate may stack Dense modules and give one a residual (``use_residual``: a bias-free
    ``residual`` projection when the widths differ); they apply in modules.json's order."""
    bert = _tiny_bert(minilm_tokenizer)
    bert.save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(1)
    w1, w2, b2, r2 = torch.randn(16, 32), torch.randn(8, 16), torch.randn(8), torch.randn(8, 16)
    layers = [
        ("1_Dense", {"in_features": 32, "out_features": 16, "bias": False}, {"linear.weight": w1}),
        (
            "2_Dense",
            {"in_features": 16, "out_features": 8, "bias": True, "use_residual": True},
            {"linear.weight": w2, "linear.bias": b2, "residual.weight": r2},
        ),
    ]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    for i, (name, cfg, state) in enumerate(layers, 1):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg | {"activation_function": "torch.nn.modules.linear.Identity"}))
        save_file(state, str(tmp_path / name / "model.safetensors"))
        modules.append({"idx": i, "name": str(i), "path": name, "type": "pylate.models.Dense.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(modules[::-1]))  # order comes from idx
    enc = TokenEncoder(str(tmp_path))
    assert enc.dim == output_dim(str(tmp_path)) == 8
    for got, h in zip(enc.encode(sample_ids), _expected(bert, sample_ids, None)):
        x = torch.from_numpy(h) @ w1.T
        np.testing.assert_allclose(got, (x @ w2.T + b2 + x @ r2.T).numpy(), atol=1e-4)


def test_attention_mask_leaves_positions_unattended(tmp_path: Path, minilm_tokenizer, sample_ids):
    """``attention`` 0 at a position: other tokens do not attend to it, it still gets a vector
    (ColBERT's [MASK] query padding without attend_to_mask_tokens)."""
    bert = _tiny_bert(minilm_tokenizer)
    bert.save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    enc = TokenEncoder(str(tmp_path))
    ids = [np.concatenate([i, np.full(4, minilm_tokenizer.mask_token_id, dtype=np.int32)]) for i in sample_ids]
    attention = [np.concatenate([np.ones(len(i), np.int32), np.zeros(4, np.int32)]) for i in sample_ids]
    with torch.no_grad():
        for got, i, a in zip(enc.encode(ids, 2, attention=attention), ids, attention):
            exp = bert(input_ids=torch.tensor([i.tolist()]), attention_mask=torch.tensor([a.tolist()])).last_hidden_state[0].numpy()
            assert got.shape == exp.shape
            np.testing.assert_allclose(got, exp, atol=1e-4)
    assert not np.allclose(enc.encode(ids[:1])[0], enc.encode(ids[:1], attention=attention[:1])[0], atol=1e-3)


def test_colbert_metadata_dim_must_match_the_weights(tmp_path: Path, minilm_tokenizer):
    bert = _tiny_bert(minilm_tokenizer)
    state = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()} | {"linear.weight": torch.randn(16, 32)}
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(bert.config.to_dict() | {"architectures": ["HF_ColBERT"]}))
    minilm_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "artifact.metadata").write_text(json.dumps({"dim": 128}))
    with pytest.raises(ValueError, match="dim 128, the weights give 16"):
        TokenEncoder(str(tmp_path))


def test_output_dim_of_the_packaged_default_without_loading_it():
    from mvr.operators.encode.checkpoint import DEFAULT_MODEL

    assert output_dim(DEFAULT_MODEL) == 384  # all-MiniLM-L6-v2: sentence-transformers, no Dense module
