"""Shared fixtures: dataset locations and a session-wide local Ray cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("MVR_DATASETS", ROOT.parent / "shared" / "datasets"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def datasets() -> Path:
    if not (DATASETS / "msmarco-sample" / "corpus.jsonl").exists():
        pytest.fail(f"test collections not found at {DATASETS} (set MVR_DATASETS)")
    return DATASETS


@pytest.fixture(scope="session")
def minilm_tokenizer():
    from operators.checkpoint import load_tokenizer

    return load_tokenizer("minilm")
