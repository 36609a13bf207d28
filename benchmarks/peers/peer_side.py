"""A peer's side of ``benchmarks/vs_plaid.py``: run in the peer's own venv (fast-plaid:
``benchmarks/peers/plaid_venv.py``; xtr-warp-rs: ``benchmarks/peers/warp_venv.py``), never in
mvr's environment; imports nothing of mvr.

    python peer_side.py PEER WORKDIR THREADS TOP_K SETTINGS_JSON

PEER: ``fast-plaid`` or ``xtr-warp``. WORKDIR holds what mvr exported: ``docs.npy`` (every
token vector of every passage, float32, in passage order), ``doc_offsets.npy`` (passage i owns
rows offsets[i]:offsets[i + 1]), ``queries.npy`` and ``query_offsets.npy`` (the queries' token
vectors, the same way). TOP_K: the k of the timed searches (the warm-up searches with it, and
xtr-warp-rs's per-query optimiser resolves its knobs for it). SETTINGS_JSON: {name: {"create":
{create() keywords}, "search": {search() keywords}}}; settings with the same ``create``
keywords share one index.

On start it builds each distinct index under WORKDIR/<plaid|warp>-<n> (timed: ``create``
alone, the peer's k-means and compression; xtr-warp-rs's index is then loaded, untimed, onto the
CPU in float32), warms up every setting, and prints one JSON line: {"builds", "settings":
{name: build}, "defaults" (its create() / search() keyword defaults), "resolved": {name: the
search knobs it runs with for the first query at TOP_K}, "versions", …}. Index bytes: every
file of its directory once loaded (lock files left out), less fast-plaid's ``embeddings.npy``,
a raw copy it keeps only for indexes of ≤ 1,000 documents; for xtr-warp-rs also
``searched_bytes_per_vector``, the files its search loads (not its per-chunk copies). Then it answers one JSON command a
line on stdin, one JSON line on stdout each:

- {"op": "time", "query": i, "top_k": k, "rotate": r}: query i searched once with every
  setting (in an order rotated by r), each timed around the peer's ``search`` alone →
  {"ms": {name: ms}, "top": {name: [[passage, score], …]}};
- {"op": "quit"}.

Threads: torch's intra-op pool is set to THREADS here, xtr-warp-rs's search gets
``num_threads=THREADS``; the caller also sets OMP_NUM_THREADS / MKL_NUM_THREADS /
RAYON_NUM_THREADS (both peers' Rust cores use rayon).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch


def split(vectors: np.ndarray, offsets: np.ndarray) -> list[torch.Tensor]:
    """One (n_i, dim) tensor a passage (or query): views of one array, no copies."""
    flat = torch.from_numpy(vectors)
    return [flat[int(a) : int(b)] for a, b in zip(offsets[:-1], offsets[1:])]


def index_bytes(path: Path) -> dict[str, int]:
    """Every file of the index directory and its size (lock files left out)."""
    return {str(f.relative_to(path)): f.stat().st_size for f in sorted(path.rglob("*")) if f.is_file() and not f.name.endswith(".lock")}


def signature_defaults(fn: Any) -> dict[str, Any]:
    """The keyword defaults of one of the peer's methods (JSON-able ones)."""
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.default is not inspect.Parameter.empty and isinstance(p.default, (int, float, str, bool, type(None))):
            out[name] = p.default
    return out


@dataclass
class Peer:
    """How to drive one peer: its package, index class, build, search and knob resolution."""

    package: str  # distribution name, for its version
    prefix: str  # index directories: WORKDIR/<prefix>-<n>
    cls: Callable[[], Any]  # the index class (imported in the peer's venv only)
    create: Callable[[Any, list[torch.Tensor], Path, dict[str, Any]], Any]  # (cls, docs, path, kwargs) -> index
    search: Callable[[Any, torch.Tensor, int, dict[str, Any], int], list]  # (index, query, k, kwargs, threads) -> hits
    resolve: Callable[[Any, torch.Tensor, int, dict[str, Any], dict[str, Any]], dict[str, Any]]  # knobs a search runs with
    uncounted: tuple[str, ...] = ()  # index files left out of its bytes
    searched: tuple[str, ...] = ()  # the index files its search loads, where they are fewer than all
    load: Callable[[Any], Any] | None = None  # after create, untimed, where searches need it


def _plaid_cls() -> Any:
    from fast_plaid import search as fp_search

    return fp_search.FastPlaid


def _plaid_create(cls: Any, docs: list[torch.Tensor], path: Path, create: dict[str, Any]) -> Any:
    index = cls(index=str(path), device="cpu")
    index.create(documents_embeddings=docs, **create)
    return index


def _plaid_search(index: Any, query: torch.Tensor, top_k: int, params: dict[str, Any], threads: int) -> list:
    # no progress bar (its default draws one a call); n_processes only splits batches of > 10 queries
    (hits,) = index.search(queries_embeddings=[query], top_k=top_k, show_progress=False, n_processes=1, **params)
    return hits


def _plaid_resolve(index: Any, query: torch.Tensor, top_k: int, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {**defaults, **params}


def _warp_cls() -> Any:
    from xtr_warp import XTRWarp

    return XTRWarp


def _warp_create(cls: Any, docs: list[torch.Tensor], path: Path, create: dict[str, Any]) -> Any:
    index = cls(index=str(path))
    index.create(embeddings_source=docs, device="cpu", show_progress=False, **create)
    return index


def _warp_load(index: Any) -> Any:
    return index.load(device="cpu", dtype=torch.float32)


def _warp_search(index: Any, query: torch.Tensor, top_k: int, params: dict[str, Any], threads: int) -> list:
    (hits,) = index.search(queries_embeddings=query, top_k=top_k, num_threads=threads, show_progress=False, **params)
    return hits


def _warp_resolve(index: Any, query: torch.Tensor, top_k: int, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """What ``XTRWarp.search`` runs with: its optimiser's knobs (index density, k, the query's
    length) where the setting leaves them None."""
    bound, nprobe, threshold, max_candidates, t_prime = index.optimize_hyperparams(top_k, query.unsqueeze(0))
    knobs = {"nprobe": nprobe, "bound": bound, "t_prime": t_prime, "max_candidates": max_candidates, "centroid_score_threshold": threshold}
    return {**knobs, **{k: v for k, v in params.items() if v is not None}}


PEERS = {
    "fast-plaid": Peer("fast-plaid", "plaid", _plaid_cls, _plaid_create, _plaid_search, _plaid_resolve, ("embeddings.npy",)),
    # xtr-warp-rs's searcher loads the compacted arrays; the per-chunk files (<n>.codes.npy,
    # <n>.residuals.npy, ...) are kept for add() / update() / compact()
    "xtr-warp": Peer(
        "xtr-warp-rs",
        "warp",
        _warp_cls,
        _warp_create,
        _warp_search,
        _warp_resolve,
        load=_warp_load,
        searched=(
            "metadata.json",
            "centroids.npy",
            "bucket_weights.npy",
            "sizes.compacted.npy",
            "codes.compacted.npy",
            "residuals.compacted.npy",
            "residuals.repacked.compacted.npy",
        ),
    ),
}


def main() -> None:
    peer = PEERS[sys.argv[1]]
    work, threads, top_k, settings = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
    # the protocol gets the real stdout; anything the peer prints goes to stderr
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    torch.set_num_threads(threads)
    cls = peer.cls()
    docs = split(np.load(work / "docs.npy"), np.load(work / "doc_offsets.npy"))
    queries = split(np.load(work / "queries.npy"), np.load(work / "query_offsets.npy"))
    n_vectors = sum(len(d) for d in docs)
    defaults = {"create": signature_defaults(cls.create), "search": signature_defaults(cls.search)}
    indexes: dict[str, Any] = {}  # build name -> index
    builds: dict[str, dict[str, Any]] = {}  # build name -> facts
    of_setting: dict[str, str] = {}  # setting -> build name
    for name, s in settings.items():
        create = s.get("create", {})
        build_name = next((b for b, facts in builds.items() if facts["create"] == create), None)
        if build_name is None:
            build_name = f"{peer.prefix}-{len(builds)}"
            path = work / build_name
            shutil.rmtree(path, ignore_errors=True)
            t0 = time.perf_counter()
            indexes[build_name] = peer.create(cls, docs, path, create)
            seconds = time.perf_counter() - t0
            meta = json.loads((path / "metadata.json").read_text()) if (path / "metadata.json").exists() else {}
            builds[build_name] = {"create": create, "seconds": seconds, "metadata": meta}
            if peer.load is not None:
                peer.load(indexes[build_name])
        of_setting[name] = build_name
    resolved = {}
    for name, s in settings.items():  # warm-up: the first search loads (or pages in) the index
        index, params = indexes[of_setting[name]], s.get("search", {})
        peer.search(index, queries[0], top_k, params, threads)
        resolved[name] = peer.resolve(index, queries[0], top_k, params, defaults["search"])
    for build_name, facts in builds.items():
        files = index_bytes(work / build_name)
        counted = sum(size for f, size in files.items() if f not in peer.uncounted)
        facts |= {"files": files, "bytes": counted, "bytes_per_vector": counted / max(n_vectors, 1)}
        if peer.searched:
            facts["searched_bytes_per_vector"] = sum(size for f, size in files.items() if f in peer.searched) / max(n_vectors, 1)
    print(
        json.dumps(
            {
                "builds": builds,
                "settings": of_setting,
                "defaults": defaults,
                "resolved": resolved,
                "resolved_for": {"query": 0, "query_vectors": len(queries[0]), "top_k": top_k},
                "versions": {p: version(p) for p in (peer.package, "torch", "numpy")},
                "torch_threads": torch.get_num_threads(),
                "token_vectors": n_vectors,
            }
        ),
        file=protocol,
        flush=True,
    )
    names = list(settings)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        q = queries[cmd["query"]]
        r = cmd.get("rotate", 0) % len(names)
        ms: dict[str, float] = {}
        top: dict[str, list] = {}
        for name in names[r:] + names[:r]:  # rotating order, as for mvr's searchers
            index, params = indexes[of_setting[name]], settings[name].get("search", {})
            t0 = time.perf_counter()
            hits = peer.search(index, q, cmd["top_k"], params, threads)
            ms[name] = (time.perf_counter() - t0) * 1e3
            top[name] = [[int(p), float(v)] for p, v in hits]
        print(json.dumps({"ms": ms, "top": top}), file=protocol, flush=True)


if __name__ == "__main__":
    main()
