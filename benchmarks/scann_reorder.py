"""ScaNN with and without its exact reorder stage, followed in both cases by mvr's exact
rescoring from the codes: quality against exact search, latency, and bytes a vector on disk
and in RAM.

    python benchmarks/scann_reorder.py --index /tmp/idx2/msmarco-def --dataset ../shared/datasets/msmarco-sample \\
        [--index /tmp/idx2/dbpedia-def --dataset ../shared/datasets/dbpedia-sample] [--reorder 100,0] \\
        [--partitions 1] [--param NAME=VALUE …] [--json OUT]
    python benchmarks/scann_reorder.py --from-json OUT     # the table again

INDEX: an index at the default settings (``mvr index CORPUS INDEX``). For each index and each
``reorder_k`` build value (``--reorder``; 0 = no ``reorder()`` in ScaNN's builder, so ScaNN
keeps only its AH codes and no float32 ``dataset.npy``): ``build_ann`` (ScaNN over every
vector kind, P = ``--partitions``, no BM25, ``--force``: the same build path as ``mvr
build-ann --backend scann --param reorder_k=N``), then ``pipeline.retrieval.evaluation.evaluate``
(``mvr eval``) over every dense mode at the default search knobs: nDCG@10, overlap@10 with
the exact search, latency p50 / p95 (per query, one at a time, query encoding included) and
the search part's p50. Bytes a vector per kind: the partitions' ``index/`` files on disk ÷
the kind's vectors, and in RAM the resident-set growth of a fresh process loading those
indexes (``operators.ann.load_index``; RSS after − before, read from /proc/self/statm) ÷ vectors.

Check the machine's load first (``uptime``): the latency columns mean something only on an
otherwise idle machine; the script prints the 1-minute load average before each evaluation."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from mvr.operators.retrieval.scoring import MODE_VECTORS, MODES

RSS_PROBE = r"""
import json, os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
from mvr.operators.ann.factory import load_index
import faiss, scann  # libraries loaded before the baseline
before = rss()
held = [load_index(d) for d in sys.argv[1:]]
print(json.dumps({"rss_bytes": rss() - before}))
"""


def index_bytes(directories: list[str]) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d in directories for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))


def ram_bytes(directories: list[str]) -> int:
    """RSS growth of a fresh Python process loading these ANN index directories."""
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, *directories],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])},
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["rss_bytes"])


def load_average() -> float:
    return os.getloadavg()[0]


def run_one(index: str, dataset: str, reorder_k: int, partitions: int, params: dict[str, Any], log=print) -> dict[str, Any]:
    from mvr.pipeline.config import AnnBuildConfig, EvalConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.retrieval.evaluation import evaluate
    from mvr.storage.manifest import load_manifest

    cfg = AnnBuildConfig(backend="scann", partitions=partitions, params={**params, "reorder_k": reorder_k}, bm25=None)
    result = build_ann(index, cfg, log=log, force=True)
    manifest = load_manifest(index)
    kinds: dict[str, Any] = {}
    for kind, build in manifest.ann.items():
        dirs = [os.path.join(index, p["path"], "index") for p in build["partitions"]]
        vectors = sum(int(p.get("vectors", 0)) for p in build["partitions"])
        disk, ram = index_bytes(dirs), ram_bytes(dirs)
        kinds[kind] = {
            "vectors": vectors,
            "disk_bytes": disk,
            "ram_bytes": ram,
            "disk_bytes_per_vector": round(disk / max(vectors, 1), 2),
            "ram_bytes_per_vector": round(ram / max(vectors, 1), 2),
            "files": sorted({f for d in dirs for f in os.listdir(d)}),
        }
        log(f"  {kind}: {kinds[kind]}")
    load = load_average()
    log(f"  load average (1 min) before the evaluation: {load:.2f}")
    ev = evaluate(index, EvalConfig(dataset=dataset, modes=list(MODES)), log=log)
    return {
        "reorder_k": reorder_k,
        "build_s": round(getattr(result, "seconds", float("nan")), 1),
        "load_average": round(load, 2),
        "load_average_after": round(load_average(), 2),
        "kinds": kinds,
        "modes": {m: {k: v for k, v in f.items() if k != "exact"} | {"exact_nDCG@10": f.get("exact", {}).get("nDCG@10")} for m, f in ev.modes.items()},
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| collection | reorder_k | mode (kind) | nDCG@10 | exact nDCG@10 | overlap@10 | p50 ms | search p50 ms | B/vector disk | B/vector RAM | load |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for res in results:
        for run in res["runs"]:
            for mode, f in run["modes"].items():
                kind = MODE_VECTORS[mode]
                k = run["kinds"].get(kind, {})
                lines.append(
                    f"| {res['collection']} | {run['reorder_k']} | {mode} ({kind}) | {f['nDCG@10']:.4f} | {f['exact_nDCG@10']:.4f} | {f.get('overlap@10', float('nan')):.3f} "
                    f"| {f['latency_ms_p50']:.1f} | {f['search_ms_p50']:.1f} | {k.get('disk_bytes_per_vector', float('nan')):.1f} | {k.get('ram_bytes_per_vector', float('nan')):.1f} "
                    f"| {run['load_average']:.2f}–{run['load_average_after']:.2f} |"
                )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", default=[])
    p.add_argument("--dataset", action="append", default=[])
    p.add_argument("--from-json", action="append", default=[])
    p.add_argument("--reorder", default="100,0", help="reorder_k build values to compare (0: no reorder stage)")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--param", action="append", default=[], help="another ScaNN build parameter, NAME=VALUE (JSON value)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.from_json:
        print(table([r for path in args.from_json for r in json.load(open(path))]))
        return
    if not args.index or len(args.index) != len(args.dataset):
        p.error("give one --dataset for each --index")
    params = {}
    for item in args.param:
        name, _, value = item.partition("=")
        params[name] = json.loads(value)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    from mvr.storage.beir import read_collection

    results = []
    for index, dataset in zip(args.index, args.dataset):
        runs = [run_one(index, dataset, int(r), args.partitions, params, log) for r in args.reorder.split(",")]
        results.append({"index": index, "dataset": dataset, "collection": read_collection(dataset).name, "partitions": args.partitions, "runs": runs})
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
