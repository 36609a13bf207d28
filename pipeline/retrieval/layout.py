"""Which partition host holds what, planned from an index's manifest: the same layout for
in-process search (``Searcher``: the hosts in this process) and the service (a Serve
deployment a host).

ANN builds split the passages into P contiguous ranges, the same ranges for every vector kind
(``storage.partitions.plan_partitions``). Host ``i`` holds range ``i`` of every served kind,
so P hosts serve all modes (a kind built with fewer partitions simply has no slice in the last
hosts). A mode without an ANN build (or every dense mode, ``exact``) is served exactly: one
brute-force slice over every passage, held by host 0.

BM25 partition ``i`` sits in host ``i`` (mode ``bm25``). For ``hybrid``, each host holding a
dense slice also holds the BM25 partitions over the same passages
(``storage.bm25_partitions.tiling``), so both sides of a passage are scored in one place."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from mvr.operators.retrieval.scoring import MODE_VECTORS, MODES, check_search_mode
from mvr.storage.bm25_partitions import tiling
from mvr.storage.manifest import Manifest


@dataclass(frozen=True)
class ServedMode:
    """How a mode is answered: ``path`` "ann" or "exact"; ``shards`` the deployments holding
    its slices (in partition order); ``passages`` and ``vectors`` over all of them."""

    mode: str
    kind: str
    path: str
    shards: tuple[int, ...]
    passages: int
    vectors: int


@dataclass
class ShardSpec:
    """What deployment ``index`` loads: per vector kind, the manifest's partition entry, or
    None for the exact slice over every passage."""

    index: int
    kinds: dict[str, Optional[dict[str, Any]]] = field(default_factory=dict)
    bm25: dict[int, dict[str, Any]] = field(default_factory=dict)  # BM25 partitions held, by number
    bm25_own: Optional[int] = None  # the BM25 partition answering mode bm25 here
    sparse: dict[str, list[int]] = field(default_factory=dict)  # kind → BM25 partitions over its slice
    first: dict[str, int] = field(default_factory=dict)  # kind → global number of its slice's first passage


@dataclass
class ServingLayout:
    index_url: str
    version: int
    modes: dict[str, ServedMode]
    shards: list[ShardSpec]
    bm25_config: Optional[dict[str, Any]] = None  # the analyzer and scoring BM25 was built with
    catalog: str = "catalog.duckdb"  # the version's catalog (relative to the index)

    @property
    def tag(self) -> str:
        """Short hash naming this layout's Serve application (index, version, slices)."""
        blob = json.dumps([self.index_url, self.version, [[s.kinds, s.bm25, s.sparse] for s in self.shards]], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


def default_modes(manifest: Manifest) -> list[str]:
    """What ``mvr serve`` serves unless told: every dense mode, and bm25 and hybrid when the
    index has BM25 partitions."""
    return list(MODES) + (["bm25", "hybrid"] if manifest.bm25 else [])


def _slice_range(spec: ShardSpec, kind: str, passages: int) -> tuple[int, int]:
    """(first passage, passages) of ``spec``'s slice of ``kind``: the exact slice (no manifest
    entry) holds all ``passages``."""
    entry = spec.kinds[kind]
    return spec.first[kind], passages if entry is None else int(entry["passages"])


def plan_layout(index_url: str, manifest: Manifest, modes: Sequence[str], exact: bool = False, hybrid_dense: str = "maxsim") -> ServingLayout:
    """The deployments needed to serve ``modes`` from ``manifest`` (``exact``: brute force for
    every dense mode, ignoring ANN builds; ``hybrid_dense``: the dense mode ``hybrid`` fuses
    by default, served too). ValueError when ``bm25`` or ``hybrid`` is asked of an index
    without BM25 partitions, or when they do not line up with the dense partitions."""
    modes = list(dict.fromkeys(modes))
    for m in modes:
        check_search_mode(m)
    sparse = [m for m in modes if m in ("bm25", "hybrid")]
    if sparse and not manifest.bm25:
        raise ValueError(
            f"{index_url} has no BM25 partitions, so {' and '.join(sparse)} cannot be served: build them with "
            "`mvr build-bm25 INDEX` (mvr build-ann builds them too), or leave those modes out"
        )
    if "hybrid" in modes and hybrid_dense not in modes:
        modes.append(hybrid_dense)
    shards: dict[int, ShardSpec] = {}
    served: dict[str, ServedMode] = {}
    passages = int(manifest.counts.get("passages", 0))
    mode: str
    for mode in (m for m in modes if m in MODES):
        kind = MODE_VECTORS[mode]
        entry = None if exact else manifest.ann.get(kind)
        if entry:
            parts = entry["partitions"]
            for i, p in enumerate(parts):
                spec = shards.setdefault(i, ShardSpec(i))
                spec.kinds[kind], spec.first[kind] = p, int(p["first_passage"])
            served[mode] = ServedMode(mode, kind, "ann", tuple(range(len(parts))), sum(p["passages"] for p in parts), sum(p["vectors"] for p in parts))
        else:
            spec = shards.setdefault(0, ShardSpec(0))
            spec.kinds[kind], spec.first[kind] = None, 0
            served[mode] = ServedMode(mode, kind, "exact", (0,), passages, 0)
    bm25_parts = manifest.bm25.get("partitions", []) if sparse else []
    if "bm25" in modes:
        for i, e in enumerate(bm25_parts):
            spec = shards.setdefault(i, ShardSpec(i))
            spec.bm25[i], spec.bm25_own = e, i
        served["bm25"] = ServedMode("bm25", "bm25", "bm25", tuple(range(len(bm25_parts))), passages, 0)
    if "hybrid" in modes:
        for mode, sm in list(served.items()):
            if mode not in MODES:
                continue
            ranges = [_slice_range(shards[i], sm.kind, passages) for i in sm.shards]
            for i, tile in zip(sm.shards, tiling(ranges, bm25_parts)):
                shards[i].sparse[sm.kind] = tile
                shards[i].bm25.update({j: bm25_parts[j] for j in tile})
        dense = served[hybrid_dense]
        served["hybrid"] = ServedMode("hybrid", dense.kind, dense.path, dense.shards, dense.passages, dense.vectors)
    return ServingLayout(
        index_url, manifest.version, served, [shards[i] for i in sorted(shards)], manifest.bm25.get("config") if sparse else None, manifest.catalog
    )
