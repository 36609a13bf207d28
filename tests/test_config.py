"""Job configuration: YAML files, dotted overrides, validation."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.config import IndexConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_reference_yaml_is_the_default_and_overrides_apply(tmp_path):
    assert IndexConfig.from_yaml(CONFIGS / "reference.yaml").vector_settings() == IndexConfig().vector_settings()
    c = IndexConfig.from_yaml(CONFIGS / "colbert.yaml", **{"model.name": "/m", "limit": 5, "runtime.block_bytes": None})
    assert c.model.name == "/m" and c.limit == 5 and c.tokenizer.query_augmentation
    assert IndexConfig.model_validate(IndexConfig.from_yaml(None).model_dump()) == IndexConfig()
    assert "passage_tokens: 256" in IndexConfig().to_yaml()


def test_invalid_settings_are_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tokenizer:\n  passage_tokens: 64\n  stride_tokens: 100\n")
    with pytest.raises(ValidationError, match="stride_tokens"):
        IndexConfig.from_yaml(bad)
    bad.write_text("tokenizer:\n  pasage_tokens: 64\n")  # misspelt key
    with pytest.raises(ValidationError, match="pasage_tokens"):
        IndexConfig.from_yaml(bad)
