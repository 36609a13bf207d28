"""Which Serve partition deployment holds what, planned from an index's manifest.

ANN builds split the passages into P contiguous ranges, the same ranges for every vector kind
(``storage.partitions.plan_partitions``). Deployment ``i`` holds range ``i`` of every served
kind, so P deployments serve all modes (a kind built with fewer partitions simply has no
slice in the last deployments). A mode without an ANN build is served exactly: one
brute-force slice over every passage, held by deployment 0."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from operators.scoring import MODE_VECTORS, check_mode
from storage.manifest import Manifest


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


@dataclass
class ServingLayout:
    index_url: str
    version: int
    modes: dict[str, ServedMode]
    shards: list[ShardSpec]

    @property
    def tag(self) -> str:
        """Short hash naming this layout's Serve application (index, version, slices)."""
        blob = json.dumps([self.index_url, self.version, [s.kinds for s in self.shards]], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


def plan_layout(index_url: str, manifest: Manifest, modes: Sequence[str], exact: bool = False) -> ServingLayout:
    """The deployments needed to serve ``modes`` from ``manifest`` (``exact``: brute force for
    every mode, ignoring ANN builds)."""
    shards: dict[int, ShardSpec] = {}
    served: dict[str, ServedMode] = {}
    passages = int(manifest.counts.get("passages", 0))
    for mode in dict.fromkeys(modes):
        kind = MODE_VECTORS[check_mode(mode)]
        entry = None if exact else manifest.ann.get(kind)
        if entry:
            parts = entry["partitions"]
            for i, p in enumerate(parts):
                shards.setdefault(i, ShardSpec(i)).kinds[kind] = p
            served[mode] = ServedMode(mode, kind, "ann", tuple(range(len(parts))), sum(p["passages"] for p in parts), sum(p["vectors"] for p in parts))
        else:
            shards.setdefault(0, ShardSpec(0)).kinds[kind] = None
            served[mode] = ServedMode(mode, kind, "exact", (0,), passages, 0)
    return ServingLayout(index_url, manifest.version, served, [shards[i] for i in sorted(shards)])
