"""fast-plaid's side of ``benchmarks/vs_plaid.py``: run in the fast-plaid venv
(``benchmarks/peers/plaid_venv.py``), never in mvr's environment; imports nothing of mvr.

    python fast_plaid_side.py WORKDIR THREADS SETTINGS_JSON

WORKDIR holds what mvr exported: ``docs.npy`` (every token vector of every passage, float32,
in passage order), ``doc_offsets.npy`` (passage i owns rows offsets[i]:offsets[i + 1]),
``queries.npy`` and ``query_offsets.npy`` (the queries' token vectors, the same way).
SETTINGS_JSON: {name: {"create": {create() keywords}, "search": {search() keywords}}};
settings with the same ``create`` keywords share one index.

On start it builds each distinct index under WORKDIR/plaid-<n> (timed: FastPlaid.create,
k-means and compression; index bytes: its files on disk once loaded, less ``embeddings.npy``,
a raw copy fast-plaid keeps only for indexes of ≤ 1,000 documents), warms up every setting,
and prints one JSON line: {"builds", "settings": {name: build}, "defaults", "versions", …}.
Then it answers one JSON command a line on stdin, one JSON line on stdout each:

- {"op": "time", "query": i, "top_k": k, "rotate": r}: query i searched once with every
  setting (in an order rotated by r), each timed around ``FastPlaid.search`` alone →
  {"ms": {name: ms}, "top": {name: [[passage, score], …]}};
- {"op": "quit"}.

Threads: torch's intra-op pool is set to THREADS here; the caller also sets
OMP_NUM_THREADS / MKL_NUM_THREADS / RAYON_NUM_THREADS (fast-plaid's Rust core uses rayon).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fast_plaid import search as fp_search


def split(vectors: np.ndarray, offsets: np.ndarray) -> list[torch.Tensor]:
    """One (n_i, dim) tensor a passage (or query): views of one array, no copies."""
    flat = torch.from_numpy(vectors)
    return [flat[int(a) : int(b)] for a, b in zip(offsets[:-1], offsets[1:])]


def index_bytes(path: Path) -> dict[str, int]:
    """Every file of the index directory and its size (lock files left out)."""
    return {str(f.relative_to(path)): f.stat().st_size for f in sorted(path.rglob("*")) if f.is_file() and not f.name.endswith(".lock")}


def build(docs: list[torch.Tensor], path: Path, create: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A fresh fast-plaid index over ``docs`` at ``path``: the index and its build facts."""
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    index = fp_search.FastPlaid(index=str(path), device="cpu")
    index.create(documents_embeddings=docs, **create)
    seconds = time.perf_counter() - t0
    meta = json.loads((path / "metadata.json").read_text()) if (path / "metadata.json").exists() else {}
    return index, {"create": create, "seconds": seconds, "metadata": meta}


def search(index: Any, query: torch.Tensor, top_k: int, params: dict[str, Any]) -> list[tuple[int, float]]:
    (hits,) = index.search(queries_embeddings=[query], top_k=top_k, show_progress=False, n_processes=1, **params)
    return hits


def signature_defaults(fn: Any) -> dict[str, Any]:
    """The keyword defaults of one of fast-plaid's methods (JSON-able ones)."""
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.default is not inspect.Parameter.empty and isinstance(p.default, (int, float, str, bool, type(None))):
            out[name] = p.default
    return out


def main() -> None:
    work, threads, settings = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    # the protocol gets the real stdout; anything fast-plaid prints goes to stderr
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    torch.set_num_threads(threads)
    docs = split(np.load(work / "docs.npy"), np.load(work / "doc_offsets.npy"))
    queries = split(np.load(work / "queries.npy"), np.load(work / "query_offsets.npy"))
    n_vectors = sum(len(d) for d in docs)
    indexes: dict[str, Any] = {}  # build name -> FastPlaid
    builds: dict[str, dict[str, Any]] = {}  # build name -> facts
    of_setting: dict[str, str] = {}  # setting -> build name
    for name, s in settings.items():
        create = s.get("create", {})
        build_name = next((b for b, facts in builds.items() if facts["create"] == create), None)
        if build_name is None:
            build_name = f"plaid-{len(builds)}"
            indexes[build_name], builds[build_name] = build(docs, work / build_name, create)
        of_setting[name] = build_name
    for name, s in settings.items():  # warm-up: the first search loads the index
        search(indexes[of_setting[name]], queries[0], 10, s.get("search", {}))
    for build_name, facts in builds.items():
        files = index_bytes(work / build_name)
        counted = sum(size for f, size in files.items() if f != "embeddings.npy")
        facts |= {"files": files, "bytes": counted, "bytes_per_vector": counted / max(n_vectors, 1)}
    print(
        json.dumps(
            {
                "builds": builds,
                "settings": of_setting,
                "defaults": {"create": signature_defaults(fp_search.FastPlaid.create), "search": signature_defaults(fp_search.FastPlaid.search)},
                "versions": {p: version(p) for p in ("fast-plaid", "torch", "numpy")},
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
            index = indexes[of_setting[name]]
            t0 = time.perf_counter()
            hits = search(index, q, cmd["top_k"], settings[name].get("search", {}))
            ms[name] = (time.perf_counter() - t0) * 1e3
            top[name] = [[int(p), float(v)] for p, v in hits]
        print(json.dumps({"ms": ms, "top": top}), file=protocol, flush=True)


if __name__ == "__main__":
    main()
