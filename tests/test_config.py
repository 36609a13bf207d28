"""Job configuration: YAML files, dotted overrides, validation."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from mvr.pipeline.config import IndexConfig

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


def test_search_and_build_configs_round_trip_and_merge_partial_sections(tmp_path):
    from mvr.pipeline.config import AnnBuildConfig, EvalConfig, SearchConfig

    assert EvalConfig.from_yaml(CONFIGS / "eval.yaml") == EvalConfig()
    assert AnnBuildConfig.from_yaml(CONFIGS / "ann.yaml") == AnnBuildConfig()
    part = tmp_path / "search.yaml"
    part.write_text("first-m:\n  k_prime: 7\n")  # one knob of one mode: the rest keep defaults
    s = SearchConfig.from_yaml(part)
    assert s.for_mode("first-m").k_prime == 7 and s.for_mode("first-m").candidate_cap == 1024
    assert s.for_mode("maxsim") == SearchConfig().maxsim
    fs = SearchConfig.from_yaml(None, **{"pooled.nprobe": 3}).for_mode("pooled").first_stage()
    assert fs.ann == {"probe_fraction": 0.25, "nprobe": 3}
    with pytest.raises(ValueError, match="unknown mode"):
        s.for_mode("bm25")
    with pytest.raises(ValidationError, match="probe_fraction"):
        SearchConfig.from_yaml(None, **{"maxsim.probe_fraction": 2})


def test_codec_names_are_checked_and_the_cli_sets_them():
    from mvr.jobs.index_corpus import parser
    from mvr.jobs.inputs import ConfigError, load_index_config

    args = parser().parse_args(["corpus", "index", "--codec", "pca-64+residual-1", "--pooled-codec", "float16"])
    c = load_index_config(args).compress
    assert (c.codec, c.pooled_codec) == ("pca-64+residual-1", "float16")
    assert load_index_config(parser().parse_args(["corpus", "index"])).compress.codec == "auto"
    for bad in ("bogus-2", "residual-3", "pca-64+pca-32"):
        with pytest.raises(ConfigError, match="compress.codec"):
            load_index_config(parser().parse_args(["corpus", "index", "--codec", bad]))


def test_an_index_written_before_a_setting_existed_keeps_what_it_did():
    """A manifest without ``compress.centroid_space`` was written when centroids were raw:
    ``of_index`` reads it so (``mvr add`` computes new centroids as the old ones were), while a
    new job's default is the unit space; both are part of the vector settings (resume keys)."""
    fresh = IndexConfig()
    assert fresh.compress.centroid_space == "unit"
    old = fresh.model_dump(mode="json")
    del old["compress"]["centroid_space"]
    assert IndexConfig.of_index(old).compress.centroid_space == "raw"
    assert IndexConfig.of_index(fresh.model_dump(mode="json")) == fresh
    assert fresh.vector_settings()["compress"]["centroid_space"] == "unit"
    assert IndexConfig.of_index(old).vector_settings() != fresh.vector_settings()


def test_a_config_from_a_pipe_is_read_once(tmp_path):
    """``--config <(printf ...)`` is a pipe: the job reads it once (the check and the settings
    from the same read); a second read would find it empty and fall back to the defaults."""
    import os

    from mvr.jobs.inputs import load_config

    read, write = os.pipe()  # what bash's <(...) hands a command: /dev/fd/N of a pipe
    os.write(write, b"compress:\n  first_m: 4\n")
    os.close(write)
    try:
        assert load_config(IndexConfig, f"/dev/fd/{read}").compress.first_m == 4
    finally:
        os.close(read)
