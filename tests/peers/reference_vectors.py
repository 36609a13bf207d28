"""Reference side of tests/test_checkpoint_conventions.py: run in the peer virtual environment
(pylate, colbert-ai; never mvr's), not by pytest.

    python reference_vectors.py {pylate|colbert} TOKENIZER_DIR WORK_DIR
    python reference_vectors.py pylate-load CHECKPOINT_DIR WORK_DIR

Builds tiny random-weight BERT checkpoints (2 layers, hidden 32, the vocabulary of the
tokenizer in TOKENIZER_DIR), has the reference library itself save them with non-default
conventions (PyLate: ``ColBERT.save`` writes config_sentence_transformers.json; colbert-ai:
``Checkpoint.save`` writes artifact.metadata), loads each saved directory back with the
library the way a user of a published checkpoint does, and encodes the queries and documents
of WORK_DIR/texts.json with it. For each variant NAME it writes:

- WORK_DIR/NAME/          the checkpoint directory, as the library saved it;
- WORK_DIR/NAME.npz       q0, q1, … (query vectors), d0, d1, … (document vectors), float32,
                          L2-normalised, exactly the vectors the library returns;
- WORK_DIR/NAME.json      the conventions the loaded model reports and the token ids it used
                          (for diagnosing a mismatch).

``pylate-load`` loads CHECKPOINT_DIR (written by ``mvr train``) with PyLate and writes
WORK_DIR/loaded.npz and loaded.json the same way.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
from transformers import AutoTokenizer, BertConfig, BertModel


def tiny_bert(tokenizer_dir: str, out: Path, seed: int) -> str:
    """A random-weight 2-layer BERT with the given tokenizer, saved under ``out``."""
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(cfg).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def write(work: Path, name: str, queries: list, documents: list, info: dict) -> None:
    arrays = {f"q{i}": np.asarray(q, dtype=np.float32) for i, q in enumerate(queries)}
    arrays |= {f"d{i}": np.asarray(d, dtype=np.float32) for i, d in enumerate(documents)}
    np.savez(work / f"{name}.npz", **arrays)
    (work / f"{name}.json").write_text(json.dumps(info, indent=1))


# -- PyLate ----------------------------------------------------------------------------------

PYLATE_VARIANTS = {
    # marker tokens new to the vocabulary (PyLate adds them), short lengths, expansion tokens
    # attended to, a skiplist that is not punctuation only
    "pylate-a": dict(
        query_prefix="[QRY] ",
        document_prefix="[DOC] ",
        query_length=24,
        document_length=40,
        do_query_expansion=True,
        attend_to_expansion_tokens=True,
        skiplist_words=[",", ".", "?", "the"],
    ),
    # a marker already in the vocabulary, no document marker, no query expansion, a default
    # prompt (text before queries and documents alike), PyLate's default skiplist, and a second
    # Dense layer with a residual
    "pylate-b": dict(
        query_prefix="[unused7]",
        document_prefix="",
        query_length=20,
        document_length=48,
        do_query_expansion=False,
        prompts={"retrieval": "search: "},
        default_prompt_name="retrieval",
    ),
}


def run_pylate(tokenizer_dir: str, work: Path, texts: dict) -> None:
    from pylate import models
    from pylate.models import Dense

    for seed, (name, kwargs) in enumerate(PYLATE_VARIANTS.items()):
        base = tiny_bert(tokenizer_dir, work / f"{name}-base", seed)
        torch.manual_seed(100 + seed)
        model = models.ColBERT(base, embedding_size=16, device="cpu", **kwargs)
        if name == "pylate-b":
            model.append(Dense(in_features=16, out_features=8, bias=True, use_residual=True))
        model.save(str(work / name))
        del model
        loaded = models.ColBERT(str(work / name), device="cpu")  # as a user loads a published model
        q = loaded.encode(texts["queries"], is_query=True, convert_to_numpy=True, batch_size=2)
        d = loaded.encode(texts["documents"], is_query=False, convert_to_numpy=True, batch_size=2)
        prompt = loaded.prompts.get(loaded.default_prompt_name) if loaded.default_prompt_name else None

        def with_prompt(xs: list, prompt: str | None = prompt) -> list:  # encode adds it the same way
            return [(prompt or "") + x for x in xs]

        info = {
            "conventions": {
                "query_prefix": loaded.query_prefix,
                "document_prefix": loaded.document_prefix,
                "query_length": loaded.query_length,
                "document_length": loaded.document_length,
                "do_query_expansion": loaded.do_query_expansion,
                "attend_to_expansion_tokens": loaded.attend_to_expansion_tokens,
                "skiplist_words": loaded.skiplist_words,
                "prompt": prompt,
            },
            "query_ids": loaded.tokenize(with_prompt(texts["queries"]), is_query=True)["input_ids"].tolist(),
            "document_ids": loaded.tokenize(with_prompt(texts["documents"]), is_query=False)["input_ids"].tolist(),
        }
        write(work, name, q, d, info)


# -- Stanford ColBERT (colbert-ai) -------------------------------------------------------------

COLBERT_VARIANTS = {
    # other marker tokens, short lengths, [MASK] padding attended to
    "colbert-a": dict(
        dim=16, query_token_id="[unused2]", doc_token_id="[unused3]", query_maxlen=24, doc_maxlen=40, attend_to_mask_tokens=True, mask_punctuation=True
    ),
    # default markers, [MASK] padding not attended to (ColBERT's default), other lengths
    "colbert-b": dict(dim=12, query_maxlen=20, doc_maxlen=36),
}


def run_colbert(tokenizer_dir: str, work: Path, texts: dict) -> None:
    from colbert.infra import ColBERTConfig
    from colbert.modeling.colbert import ColBERT

    # ColBERT() compiles a C++ extension (segmented_maxsim, used only for scoring on CPU) the
    # first time it is built unless the class says it is loaded; encoding does not need it.
    ColBERT.loaded_extensions = True
    from colbert.modeling.checkpoint import Checkpoint

    for seed, (name, kwargs) in enumerate(COLBERT_VARIANTS.items()):
        base = tiny_bert(tokenizer_dir, work / f"{name}-base", 10 + seed)
        torch.manual_seed(200 + seed)
        model = Checkpoint(base, colbert_config=ColBERTConfig(checkpoint=base, **kwargs), verbose=0)
        model.save(str(work / name))  # model.safetensors (bert.* + linear), tokenizer, artifact.metadata
        del model
        # as a user loads a published checkpoint: every setting from its artifact.metadata
        loaded = Checkpoint(str(work / name), colbert_config=ColBERTConfig(), verbose=0)
        q = loaded.queryFromText(texts["queries"]).float().cpu().numpy()
        d = loaded.docFromText(texts["documents"], keep_dims=False)
        cfg = loaded.colbert_config
        q_ids, q_mask = loaded.query_tokenizer.tensorize(texts["queries"])
        d_ids, _ = loaded.doc_tokenizer.tensorize(texts["documents"])
        info = {
            "conventions": {
                k: getattr(cfg, k)
                for k in ("query_token_id", "doc_token_id", "query_maxlen", "doc_maxlen", "attend_to_mask_tokens", "mask_punctuation", "dim", "similarity")
            },
            "query_ids": q_ids.tolist(),
            "query_attention": q_mask.tolist(),
            "document_ids": d_ids.tolist(),
        }
        write(work, name, list(q), [x.float().cpu().numpy() for x in d], info)


def load_pylate(checkpoint: str, work: Path, texts: dict) -> None:
    """A checkpoint another program wrote (``mvr train``), loaded as a PyLate user would."""
    from pylate import models

    loaded = models.ColBERT(checkpoint, device="cpu")
    q = loaded.encode(texts["queries"], is_query=True, convert_to_numpy=True, batch_size=2)
    d = loaded.encode(texts["documents"], is_query=False, convert_to_numpy=True, batch_size=2)
    info = {
        "query_prefix": loaded.query_prefix,
        "document_prefix": loaded.document_prefix,
        "query_length": loaded.query_length,
        "document_length": loaded.document_length,
    }
    write(work, "loaded", q, d, info)


def main() -> None:
    library, tokenizer_dir, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    texts = json.loads((work / "texts.json").read_text())
    {"pylate": run_pylate, "colbert": run_colbert, "pylate-load": load_pylate}[library](tokenizer_dir, work, texts)


if __name__ == "__main__":
    main()
