"""``mvr train``'s files: the pairs it trains on (one Parquet file, written once a run), and
the checkpoint directories it writes (a PyLate / sentence-transformers model: the backbone at
the top with its tokenizer, ``1_Dense/``, ``modules.json``, ``sentence_bert_config.json``,
``config_sentence_transformers.json`` with the conventions and what it was trained for)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mvr.storage import fs

PAIR_SCHEMA = pa.schema(
    [
        pa.field("query", pa.string()),
        pa.field("positive", pa.string()),
        pa.field("positive_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("negatives", pa.list_(pa.string())),
        pa.field("tokens", pa.int32()),  # the pair's longest passage in tokens (null: counted by the workers)
    ]
)
TRAINER_STATE = "trainer_state.pt"  # optimiser, schedule and step: in a checkpoint, not in OUT


def dense_dir(i: int) -> str:
    """The directory of a checkpoint's ``i``-th Dense module (from 1): PyLate's ``1_Dense``,
    ``2_Dense``, …"""
    return f"{i}_Dense"


def pairs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The pairs (dicts of ``PAIR_SCHEMA``'s fields; a missing ``tokens`` is null) as a table."""
    return pa.Table.from_pylist(rows, schema=PAIR_SCHEMA)


def with_tokens(table: pa.Table, tokens: np.ndarray) -> pa.Table:
    """``table`` with its ``tokens`` column set to ``tokens`` ((n_pairs,) ints)."""
    i = PAIR_SCHEMA.get_field_index("tokens")
    return table.set_column(i, PAIR_SCHEMA.field(i), pa.array(np.asarray(tokens, np.int32)))


def write_pairs(url: str, table: pa.Table) -> int:
    """Write the pairs (a ``pairs_table``) atomically; returns their number."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    fs.write_bytes_atomic(url, buf.getvalue())
    return table.num_rows


def read_pairs(url: str) -> pa.Table:
    with fs.open_file(url) as f:
        return pq.read_table(f, schema=PAIR_SCHEMA)


def write_model_dir(directory: str, backbone, tokenizer, dense_layers: list, conventions: dict[str, Any], trained: dict[str, Any]) -> None:
    """A checkpoint PyLate and ``mvr index --model`` load: ``backbone`` (a transformers
    model) and ``tokenizer`` saved at the top, each Dense module (``DenseLayer``) in its own
    directory, the module list, and ``conventions`` (PyLate's config_sentence_transformers
    keys) plus ``trained`` (objective, base, steps, data) in config_sentence_transformers.json."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    backbone.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    for i, layer in enumerate(dense_layers, 1):
        sub = out / dense_dir(i)
        sub.mkdir(exist_ok=True)
        (sub / "config.json").write_text(json.dumps(layer.config, indent=2))
        save_file({k: v.detach().cpu().contiguous() for k, v in layer.state_dict().items()}, str(sub / "model.safetensors"))
        modules.append({"idx": i, "name": str(i), "path": sub.name, "type": "pylate.models.Dense.Dense"})
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": conventions["document_length"], "do_lower_case": False}, indent=2))
    (out / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "ColBERT", **conventions, "mvr_training": trained}, indent=2))


def copy_model_dir(checkpoint_dir: str, out: str) -> None:
    """The model files of a training checkpoint copied into ``out`` (its trainer state left)."""
    src, dst = Path(checkpoint_dir), Path(out)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.rglob("*"):
        if f.is_file() and f.name != TRAINER_STATE:
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
