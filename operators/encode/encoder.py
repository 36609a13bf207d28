"""The token encoder: a Hugging Face backbone plus an optional linear projection.

Loads three checkpoint formats from a local directory:
- ``colbert``: BERT weights under ``bert.*`` and a bias-free ``linear`` projection in the same
  weights file (how Stanford's colbertv2.0 is published);
- ``sentence-transformers`` (also PyLate): ``modules.json`` naming a Transformer module and,
  optionally, ``Dense`` modules in sub-directories, applied in order (PyLate's Dense may add
  a residual: ``use_residual``);
- ``plain``: any encoder ``AutoModel`` loads; no projection. (The offline default, the
  packaged all-MiniLM-L6-v2, is a sentence-transformers checkpoint without a Dense module,
  so it has no projection either.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from mvr.operators.encode.checkpoint import DEFAULT_MODEL, load_state, locate_model, module_dirs, read_conventions, weights_file
from mvr.operators.encode.compress import pad

_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": torch.nn.Identity,
    "torch.nn.modules.activation.Tanh": torch.nn.Tanh,
    "torch.nn.modules.activation.ReLU": torch.nn.ReLU,
}


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


class DenseLayer(torch.nn.Module):  # type: ignore[misc]  # torch is read as Any (pyproject: follow_imports = "skip")
    """A sentence-transformers / PyLate ``Dense`` module: activation(linear(x)), plus x (or a
    bias-free ``residual`` projection of x when the widths differ) with ``use_residual``.
    ``config``: the module's ``config.json`` (in_features, out_features, bias,
    activation_function, use_residual)."""

    def __init__(self, config: dict[str, Any], source: str = "Dense") -> None:
        super().__init__()
        act = _ACTIVATIONS.get(config.get("activation_function", "torch.nn.modules.linear.Identity"))
        if act is None:
            raise ValueError(f"{source}: unsupported Dense activation {config.get('activation_function')}")
        self.config = {"activation_function": "torch.nn.modules.linear.Identity", "bias": True, "use_residual": False} | dict(config)
        self.linear = torch.nn.Linear(config["in_features"], config["out_features"], bias=config.get("bias", True))
        self.activation = act()
        self.use_residual = bool(config.get("use_residual", False))
        if self.use_residual and config["in_features"] != config["out_features"]:
            self.residual = torch.nn.Linear(config["in_features"], config["out_features"], bias=False)
        self.out_features = int(config["out_features"])

    @classmethod
    def load(cls, directory: Path) -> "DenseLayer":
        """The Dense module saved in ``directory`` (config.json and its weights)."""
        layer = cls(json.loads((directory / "config.json").read_text()), str(directory))
        state = load_state(weights_file(directory))  # type: ignore[arg-type]
        layer.load_state_dict({k: v for k, v in state.items() if k.split(".", 1)[0] in ("linear", "residual")})
        return layer

    @classmethod
    def identity(cls, dim: int) -> "DenseLayer":
        """A bias-free (dim, dim) projection that starts as the identity: the module ``mvr
        train`` adds to a checkpoint without one, so training starts from the base model's
        vectors and the checkpoint has PyLate's shape."""
        layer = cls({"in_features": dim, "out_features": dim, "bias": False})
        with torch.no_grad():
            layer.linear.weight.copy_(torch.eye(dim))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.linear(x))
        if self.use_residual:
            y = y + (self.residual(x) if hasattr(self, "residual") else x)
        return y


class TokenModel(torch.nn.Module):  # type: ignore[misc]  # torch is read as Any (pyproject: follow_imports = "skip")
    """The trainable part of an encoder: a Hugging Face backbone and an optional projection
    (a ColBERT ``linear`` or the Dense modules). ``forward``: (B, T) ids and mask → (B, T,
    dim) token vectors, not normalised. ``TokenEncoder`` runs it for inference; ``mvr train``
    trains it (``pipeline/training``)."""

    def __init__(self, backbone: torch.nn.Module, projection: Optional[torch.nn.Module]) -> None:
        super().__init__()
        self.backbone = backbone
        self.projection = projection

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return h if self.projection is None else self.projection(h)

    @property
    def dim(self) -> int:
        """The dimension of the token vectors."""
        if self.projection is None:
            return int(self.backbone.config.hidden_size)
        last = self.projection if isinstance(self.projection, torch.nn.Linear) else self.projection[-1]
        return int(last.out_features)


class TokenEncoder:
    """Backbone + projection. ``encode`` maps token-id sequences to per-token vectors
    (n_tokens, dim) float32, *not* normalised (the compressors need raw vectors)."""

    def __init__(self, name: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import AutoModel, AutoTokenizer

        self.path, self.format = locate_model(name)
        backbone_dir, dense_dirs = module_dirs(self.path, self.format)
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(backbone_dir)
        projection: Optional[torch.nn.Module] = None
        if self.format == "colbert":
            state = load_state(weights_file(Path(self.path)))  # type: ignore[arg-type]
            w = state["linear.weight"]
            projection = torch.nn.Linear(w.shape[1], w.shape[0], bias="linear.bias" in state)
            projection.load_state_dict({k[len("linear.") :]: v for k, v in state.items() if k.startswith("linear.")})
        elif dense_dirs:
            projection = torch.nn.Sequential(*(DenseLayer.load(d) for d in dense_dirs))
        self.model = TokenModel(AutoModel.from_pretrained(backbone_dir), projection)
        self.model.to(self.device, self.dtype).eval()
        self.dim = self.model.dim
        conventions = read_conventions(self.path)
        if conventions is not None and conventions.dim is not None and conventions.dim != self.dim:
            raise ValueError(f"{self.path}: {conventions.source} says dim {conventions.dim}, the weights give {self.dim}")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids and mask → (B, T, dim) float32."""
        with torch.inference_mode():  # not the decorator: torch is read as Any, which would leave forward untyped
            return self.model(input_ids.to(self.device), attention_mask.to(self.device)).float()

    def encode(
        self, sequences: Sequence[np.ndarray], batch_size: int = 32, pad_id: int = 0, attention: Optional[Sequence[np.ndarray]] = None
    ) -> list[np.ndarray]:
        """Encode token-id sequences ((n_i,) int) in length-sorted mini-batches, so a batch
        carries little padding; returns (n_i, dim) float32 per sequence, in input order.
        ``attention``: (n_i,) 0/1 per sequence (default all 1): positions other tokens may
        attend to; every position gets its vector either way (ColBERT's unattended [MASK]s)."""
        order = np.argsort([len(s) for s in sequences], kind="stable")
        out: list[Optional[np.ndarray]] = [None] * len(sequences)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            ids, present = pad([sequences[j] for j in idx], fill=pad_id, dtype=torch.long)
            mask = present.long() if attention is None else pad([attention[j] for j in idx], dtype=torch.long)[0]
            h = self.forward(ids, mask).cpu().numpy()
            for r, j in enumerate(idx):
                out[j] = h[r, : len(sequences[j])]
        return out  # type: ignore[return-value]


def set_threads(n: Optional[int]) -> int:
    """Set torch's intra-op threads (``None``: all CPUs of this machine). Returns the count."""
    n = n or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n
