"""What a job reads before it works, checked: its configuration file (YAML, key by key, one
line for any way it can be wrong), the model it names and the index's manifest."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from mvr.jobs.common import positive_int
from mvr.jobs.errors import validation_summary


class ConfigError(ValueError):
    """A configuration that cannot be used, named in one line."""


def load_config(cls: Any, path: str | None, **overrides: object):
    """``cls.from_yaml(path, **overrides)`` with every way a config can be wrong (no such file,
    not YAML, top level not a mapping, unknown key, wrong type or value) as a ConfigError."""
    from pydantic import ValidationError

    where = f"--config {path}" if path else "configuration"
    loaded = _check_yaml(path, cls().model_dump(mode="json", by_alias=True)) if path is not None else None
    try:  # the file read once: a pipe (--config <(...)) has nothing left for a second read
        return cls.from_mapping(loaded, **overrides)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {validation_summary(exc)}") from None


def _check_yaml(path: str, defaults: dict) -> Optional[dict]:
    """The YAML file's content, checked to be a mapping whose sections are mappings."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--config {path}: no such file")
    if p.is_dir():
        raise ConfigError(f"--config {path}: is a directory, not a YAML file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"--config {path}: not valid YAML: {problem}{where}") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror or exc})") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the top level must be a mapping of settings (key: value), got {_yaml_type(data)}")
    _check_sections(path, data or {}, defaults, "")
    return data


def _check_sections(path: str, data: dict, defaults: dict, prefix: str) -> None:
    for key, value in data.items():
        default = defaults.get(key) if isinstance(key, str) else None
        if isinstance(default, dict) and value is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"--config {path}: {prefix}{key} must be a mapping of settings, got {_yaml_type(value)}")
            _check_sections(path, value, default, f"{prefix}{key}.")


def _yaml_type(value: object) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(type(value), type(value).__name__)


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with an IndexConfig (see configs/)")
    p.add_argument("--model", help="model directory, hub id, or 'minilm' (packaged default)")
    p.add_argument("--limit", type=positive_int, help="index only the first N input rows (N ≥ 1)")
    p.add_argument("--codec", help="token vectors' codec (compress.codec): auto, float16, int8, residual-N, pq-M, pca-D+C (docs/codecs.md)")
    p.add_argument("--pooled-codec", help="codec of the pooled and centroid vectors (compress.pooled_codec, default auto: pq-{dim/2}; int8)")
    p.add_argument(
        "--first-m-codec",
        help="first-m vectors (compress.first_m_codec): auto (refine-{dim/4}: the first m token codes plus a refinement), refine-M, "
        "or pooled (a column in the pooled codec)",
    )


def load_index_config(args: argparse.Namespace):
    from mvr.pipeline.config import IndexConfig

    overrides = {"model.name": args.model, "limit": args.limit}
    overrides |= {"compress.codec": getattr(args, "codec", None), "compress.pooled_codec": getattr(args, "pooled_codec", None)}
    overrides |= {"compress.first_m_codec": getattr(args, "first_m_codec", None)}
    config = load_config(IndexConfig, args.config, **overrides)
    check_model(config.model.name)
    return config


def check_model(name: str) -> None:
    """``checkpoint.check_model_name`` as a configuration error (before any work starts)."""
    from mvr.operators.encode.checkpoint import check_model_name

    try:
        check_model_name(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_index_manifest(index_url: str):
    """The index's manifest; a damaged ``manifest.json`` is a ValueError naming it."""
    from pydantic import ValidationError

    from mvr.storage.manifest import MANIFEST_FILE, load_manifest

    try:
        return load_manifest(index_url)
    except ValidationError as exc:
        raise ValueError(f"{index_url}: {MANIFEST_FILE} is damaged ({validation_summary(exc)})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{index_url}: {MANIFEST_FILE} is damaged (not UTF-8 text)") from None
