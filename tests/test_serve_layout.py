"""Which partition deployment serves what (pipeline/retrieval/layout.py), without Ray; the
serve config file; how the API's error answers echo client input; and the ingress's in-place
calls to the partitions it holds (no service needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mvr.operators.retrieval.scoring import MODES
from mvr.pipeline.config import ServeConfig
from mvr.pipeline.retrieval.layout import default_modes, plan_layout
from mvr.storage.manifest import Manifest


def _manifest(ann: dict, bm25: dict | None = None) -> Manifest:
    return Manifest(config={}, model={}, input={}, counts={"passages": 30}, dim=4, codecs={}, shards=[], ann=ann, bm25=bm25 or {})


def _part(i: int, passages: int, vectors: int, first: int = 0) -> dict:
    return {"path": f"ann/x/b/part-{i:05d}", "first_passage": first, "passages": passages, "vectors": vectors, "files": {}}


def _bm25(*sizes: int) -> dict:
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    return {
        "partitions": [{"path": f"bm25/b/part-{i:05d}", "first_passage": f, "passages": n, "files": {}} for i, (f, n) in enumerate(zip(firsts, sizes))],
        "config": {"stopwords": "en"},
    }


def test_partition_i_holds_range_i_of_every_kind_and_exact_modes_sit_in_partition_0() -> None:
    m = _manifest({"tokens": {"partitions": [_part(0, 15, 900), _part(1, 15, 950, 15)]}, "pooled": {"partitions": [_part(0, 30, 30)]}})
    layout = plan_layout("/idx", m, ["maxsim", "pooled", "softmax-centroid"])
    assert [s.index for s in layout.shards] == [0, 1]
    assert layout.shards[0].kinds["tokens"]["vectors"] == 900 and layout.shards[1].kinds == {"tokens": layout.shards[1].kinds["tokens"]}
    assert layout.shards[0].kinds["centroids"] is None  # no ANN build: exact slice over every passage
    maxsim, pooled, centroid = (layout.modes[m] for m in ("maxsim", "pooled", "softmax-centroid"))
    assert (maxsim.path, maxsim.shards, maxsim.passages, maxsim.vectors) == ("ann", (0, 1), 30, 1850)
    assert (pooled.path, pooled.shards) == ("ann", (0,))
    assert (centroid.path, centroid.shards, centroid.passages) == ("exact", (0,), 30)


def test_bm25_sits_by_number_and_hybrid_slices_hold_the_bm25_partitions_over_their_passages() -> None:
    ann = {"tokens": {"partitions": [_part(0, 15, 900), _part(1, 15, 950, 15)]}, "pooled": {"partitions": [_part(0, 30, 30)]}}
    layout = plan_layout("/idx", _manifest(ann, _bm25(15, 15)), ["bm25", "hybrid", "pooled"], hybrid_dense="maxsim")
    assert set(layout.modes) == {"bm25", "hybrid", "pooled", "maxsim"}  # hybrid's dense mode is served too
    assert layout.modes["bm25"].shards == (0, 1) and [s.bm25_own for s in layout.shards] == [0, 1]
    assert layout.modes["hybrid"].kind == "tokens" and layout.modes["hybrid"].shards == (0, 1)
    s0, s1 = layout.shards
    assert s0.sparse == {"tokens": [0], "pooled": [0, 1]} and s1.sparse == {"tokens": [1]}  # pooled P = 1 spans both
    assert sorted(s0.bm25) == [0, 1] and sorted(s1.bm25) == [1] and layout.bm25_config == {"stopwords": "en"}
    with pytest.raises(ValueError, match="line up"):
        plan_layout("/idx", _manifest(ann, _bm25(10, 10, 10)), ["hybrid"])
    with pytest.raises(ValueError, match="no BM25 partitions"):
        plan_layout("/idx", _manifest(ann), ["maxsim", "hybrid"])
    assert default_modes(_manifest(ann)) == list(MODES) and default_modes(_manifest(ann, _bm25(30)))[-2:] == ["bm25", "hybrid"]


def test_exact_ignores_ann_and_the_tag_follows_the_version() -> None:
    m = _manifest({"tokens": {"partitions": [_part(0, 15, 900), _part(1, 15, 950, 15)]}})
    exact = plan_layout("/idx", m, ["maxsim"], exact=True)
    assert len(exact.shards) == 1 and exact.modes["maxsim"].path == "exact"
    a = plan_layout("/idx", m, ["maxsim"])
    m.version += 1
    assert plan_layout("/idx", m, ["maxsim"]).tag != a.tag


def test_serve_yaml_is_the_defaults_and_a_partial_file_keeps_the_rest(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    assert ServeConfig.from_yaml(root / "configs" / "serve.yaml") == ServeConfig()
    f = tmp_path / "s.yaml"
    f.write_text("port: 9000\npartition:\n  replicas: 2\nsearch:\n  maxsim:\n    k_prime: 64\n")
    c = ServeConfig.from_yaml(f)
    assert (c.port, c.partition.replicas, c.search.maxsim.k_prime) == (9000, 2, 64)
    assert c.search.maxsim.candidate_cap == 1024 and c.encoder.max_batch_size == 16


def test_error_answers_echo_short_json_safe_excerpts() -> None:
    from mvr.pipeline.serving.errors import ERRORS_SHOWN, excerpt, short_errors

    assert excerpt(42) == 42 and excerpt(0.5) == 0.5 and excerpt(None) is None and excerpt("short") == "short"
    for value in ("x" * 10_000, {"query": "y" * 10_000}, b"\xff" * 1000, 10**4000, [[[]]] * 5000):
        e = excerpt(value)
        assert isinstance(e, str) and len(e) <= 100 and e.endswith("…"), e
    for value in (math.nan, math.inf, "\ud800abc", {"\udfff": math.nan}):
        json.dumps(excerpt(value), allow_nan=False).encode("utf-8")  # writable as strict JSON, as UTF-8
    errors = [{"type": "string_type", "loc": ("body", "queries", i, "\ud800" * 1000), "msg": "m" * 5000, "input": i} for i in range(1000)]
    short = short_errors(errors)
    assert len(short) == ERRORS_SHOWN + 1 and "990 more errors" in short[-1]["msg"]
    assert len(json.dumps(short, allow_nan=False).encode("utf-8")) < 8000


def test_a_partition_in_the_ingress_answers_each_call_with_its_result_or_its_error() -> None:
    """``partition.placement: ingress``: the ingress calls its partitions in place through
    ``LocalPartition``, with the same futures as over a deployment's handle."""
    import asyncio

    from mvr.pipeline.retrieval.host import LocalPartition

    class Host:  # the two outcomes of a PartitionHost trip
        def hits(self, kind: str, k: int) -> tuple[str, int]:
            return kind, k

        def rank(self, *args: object) -> None:
            raise ValueError("partition 0 holds no pooled vectors")

        def info(self) -> dict:
            return {"shard": 0}

    async def calls() -> tuple:
        part = LocalPartition(Host())
        futures = part.call("hits", "tokens", 3), part.call("rank", "maxsim", "pooled"), part.call("info")
        done = await asyncio.gather(*futures, return_exceptions=True)
        return done, part.trips, part.calls, await part.info()

    (hits, rank, info), trips, calls, about = asyncio.run(calls())
    assert hits == ("tokens", 3) and trips == calls == 3
    assert about == {"shard": 0, "placement": "ingress"}
    assert isinstance(rank, ValueError) and "no pooled vectors" in str(rank)
    assert isinstance(info, ValueError) and "not a partition trip" in str(info)
