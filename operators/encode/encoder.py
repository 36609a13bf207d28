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
from typing import Optional, Sequence

import numpy as np
import torch

from mvr.operators.encode.checkpoint import DEFAULT_MODEL, detect_format, load_state, module_dirs, read_conventions, resolve_model_path, weights_file

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


class DenseLayer(torch.nn.Module):
    """A sentence-transformers / PyLate ``Dense`` module: activation(linear(x)), plus x (or a
    bias-free ``residual`` projection of x when the widths differ) with ``use_residual``."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        cfg = json.loads((directory / "config.json").read_text())
        act = _ACTIVATIONS.get(cfg.get("activation_function", "torch.nn.modules.linear.Identity"))
        if act is None:
            raise ValueError(f"{directory}: unsupported Dense activation {cfg.get('activation_function')}")
        self.linear = torch.nn.Linear(cfg["in_features"], cfg["out_features"], bias=cfg.get("bias", True))
        self.activation = act()
        self.use_residual = bool(cfg.get("use_residual", False))
        if self.use_residual and cfg["in_features"] != cfg["out_features"]:
            self.residual = torch.nn.Linear(cfg["in_features"], cfg["out_features"], bias=False)
        state = load_state(weights_file(directory))  # type: ignore[arg-type]
        self.load_state_dict({k: v for k, v in state.items() if k.split(".", 1)[0] in ("linear", "residual")})
        self.out_features = int(cfg["out_features"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.linear(x))
        if self.use_residual:
            y = y + (self.residual(x) if hasattr(self, "residual") else x)
        return y


class TokenEncoder:
    """Backbone + projection. ``encode`` maps token-id sequences to per-token vectors
    (n_tokens, dim) float32, *not* normalised (the compressors need raw vectors)."""

    def __init__(self, name: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import AutoModel, AutoTokenizer

        self.path = resolve_model_path(name)
        self.format = detect_format(self.path) if Path(self.path).is_dir() else "plain"
        backbone_dir, dense_dirs = module_dirs(self.path, self.format)
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(backbone_dir)
        self.backbone = AutoModel.from_pretrained(backbone_dir)
        self.projection: Optional[torch.nn.Module] = None
        if self.format == "colbert":
            state = load_state(weights_file(Path(self.path)))  # type: ignore[arg-type]
            w = state["linear.weight"]
            self.projection = torch.nn.Linear(w.shape[1], w.shape[0], bias="linear.bias" in state)
            self.projection.load_state_dict({k[len("linear."):]: v for k, v in state.items() if k.startswith("linear.")})
        elif dense_dirs:
            self.projection = torch.nn.Sequential(*(DenseLayer(d) for d in dense_dirs))
        self.backbone.to(self.device, self.dtype).eval()
        if self.projection is not None:
            self.projection.to(self.device, self.dtype).eval()
        self.dim = self.projection_dim()
        conventions = read_conventions(self.path)
        if conventions is not None and conventions.dim is not None and conventions.dim != self.dim:
            raise ValueError(f"{self.path}: {conventions.source} says dim {conventions.dim}, the weights give {self.dim}")

    def projection_dim(self) -> int:
        if self.projection is None:
            return int(self.backbone.config.hidden_size)
        last = self.projection if isinstance(self.projection, torch.nn.Linear) else self.projection[-1]
        return int(last.out_features)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids and mask → (B, T, dim) float32."""
        h = self.backbone(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device)).last_hidden_state
        if self.projection is not None:
            h = self.projection(h)
        return h.float()

    def encode(
        self,
        sequences: Sequence[np.ndarray],
        batch_size: int = 32,
        pad_id: int = 0,
        attention: Optional[Sequence[np.ndarray]] = None,
    ) -> list[np.ndarray]:
        """Encode token-id sequences ((n_i,) int) in length-sorted mini-batches, so a batch
        carries little padding; returns (n_i, dim) float32 per sequence, in input order.
        ``attention``: (n_i,) 0/1 per sequence (default all 1): positions other tokens may
        attend to; every position gets its vector either way (ColBERT's unattended [MASK]s)."""
        order = np.argsort([len(s) for s in sequences], kind="stable")
        out: list[Optional[np.ndarray]] = [None] * len(sequences)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            width = max(len(sequences[j]) for j in idx)
            ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, j in enumerate(idx):
                n = len(sequences[j])
                ids[r, :n] = torch.from_numpy(np.asarray(sequences[j], dtype=np.int64))
                mask[r, :n] = 1 if attention is None else torch.from_numpy(np.asarray(attention[j], dtype=np.int64))
            h = self.forward(ids, mask).cpu().numpy()
            for r, j in enumerate(idx):
                out[j] = h[r, : len(sequences[j])]
        return out  # type: ignore[return-value]


def set_threads(n: Optional[int]) -> int:
    """Set torch's intra-op threads (``None``: all CPUs of this machine). Returns the count."""
    n = n or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n
