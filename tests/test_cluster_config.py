"""ray_cluster.yaml passes Ray's own cluster-launcher validation (no cloud access needed)."""

from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config


def test_cluster_config_is_valid():
    cfg = prepare_config(yaml.safe_load((Path(__file__).resolve().parents[1] / "ray_cluster.yaml").read_text()))
    validate_config(cfg)
    types = cfg["available_node_types"]
    assert types["gpu_encode"]["resources"]["GPU"] >= 1 and "GPU" not in types[cfg["head_node_type"]]["resources"]
    assert {"cpu_build", "cpu_serve"} <= set(types) and all("GPU" not in types[t]["resources"] for t in ("cpu_build", "cpu_serve"))
    assert any("--object-spilling-directory" in c for c in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"])
