"""What ``mvr train`` buys each search mode: the packaged all-MiniLM-L6-v2 trained for each
objective on unsupervised pairs (Inverse Cloze Task and title → text) of msmarco-sample's
and dbpedia-sample's corpora, their queries never used (and pairs whose query equals a test
query of any of the three collections dropped), with the hard negatives the configuration
asks for mined with BM25 over the base model's index of the pair's own corpus (none for
first-m and softmax-centroid in the documented run, one for maxsim); then exact search,
nDCG@10 of every mode, base against trained, on msmarco-sample, dbpedia-sample and
cranfield (whose text was never trained on). Each objective may have its own configuration (``--objective-config``).
docs/training.md has the table and the command:

    python benchmarks/train_quality.py --workdir /tmp/trainbench --steps 250 \\
        --config benchmarks/train_quality.yaml \\
        --objective-config maxsim=benchmarks/train_quality_maxsim.yaml --tag grouped \\
        --objectives first-m,maxsim,softmax-centroid \\
        --json docs/train-quality.json --markdown /tmp/trainbench/table.md

Everything built is kept in WORKDIR and reused when the command runs again (indexes with a
manifest, their exact quality, checkpoints whose run reached its last step, with the training
time and rate first measured). Δ is trained − base ± the standard error of the paired
per-query difference (``mvr eval INDEX --baseline BASE_INDEX`` prints the same comparison for
one collection)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mvr.operators.retrieval.scoring import MODES
from mvr.pipeline.config import IndexConfig, TrainConfig
from mvr.storage.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("MVR_DATASETS", ROOT.parent / "shared" / "datasets"))
TRAINED_ON = ("msmarco-sample", "dbpedia-sample")
COLLECTIONS = TRAINED_ON + ("cranfield",)


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def index_once(corpus: Path, index: Path, model: str, bm25: bool = False) -> str:
    """``mvr index`` (default codecs) of a corpus with a model, unless already built."""
    import mvr

    if read_manifest(str(index)) is None:
        mvr.index(str(corpus), str(index), IndexConfig.from_yaml(None, **{"model.name": model}), log=log)
        if bm25:
            mvr.build_bm25(str(index))
    return str(index)


def quality_once(collection: str, index: str) -> dict[str, Any]:
    """``exact_quality`` of every mode, kept beside the index (INDEX.quality.json) and reused."""
    from mvr.pipeline.retrieval.evaluation import exact_quality  # search's dependencies: not where --only train runs

    kept = Path(f"{index}.quality.json")
    if kept.exists():
        return json.loads(kept.read_text())
    quality = exact_quality(str(DATASETS / collection), index, MODES)
    kept.write_text(json.dumps(quality))
    return quality


def device_name() -> str:
    """What trained: the GPU's name, else the CPU's core count."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"


def with_negatives(config: TrainConfig, negatives_from: list[str]) -> TrainConfig:
    """The configuration mining its hard negatives in ``negatives_from`` (when it asks for any)."""
    if not config.data.negatives:
        return config
    return config.model_copy(update={"data": config.data.model_copy(update={"negatives_from": negatives_from})})


def prepare_once(work: Path, name: str, config: TrainConfig, negatives_from: list[str]) -> str:
    """The run directory ``mvr train`` would write for this objective (pairs and record), not trained."""
    from mvr.pipeline.training.trainer import prepare_run

    return str(prepare_run(str(work / "corpus"), str(work / f"model-{name}"), with_negatives(config, negatives_from), False, log))


def train_once(work: Path, name: str, config: TrainConfig, negatives_from: list[str]) -> tuple[str, dict[str, Any]]:
    """A checkpoint trained with ``config`` (reused when its run reached its steps with this
    configuration; refused when WORKDIR holds ``name`` trained with another); a BM25 negative
    a pair unless the configuration asks for none."""
    import mvr
    from mvr.pipeline.training.trainer import run_record

    steps = config.train.steps
    out = work / f"model-{name}"
    config = with_negatives(config, negatives_from)
    progress, record, run = (out / ".mvr-train" / f for f in ("progress.json", "benchmark.json", "run.json"))
    if run.exists() and json.loads(run.read_text()) != run_record(str(work / "corpus"), config):
        raise SystemExit(f"{out}: trained with another configuration than {name}'s now: give another --tag, or remove it and its indexes ({name}-*)")
    if (out / "modules.json").exists() and progress.exists() and json.loads(progress.read_text())["step"] == steps:
        return str(out), json.loads((record if record.exists() else progress).read_text()) | {"reused": True}
    t0 = time.perf_counter()
    result = mvr.train(str(work / "corpus"), str(out), config, log=log)
    training = result.metrics | {"seconds": round(time.perf_counter() - t0, 1), "pairs": result.pairs, "device": device_name()}
    record.write_text(json.dumps(training))  # what a rerun reports for the reused checkpoint
    return str(out), training


def verdict(objective: str, rows: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """The issue's targets: the objective's mode gains ≥ 0.03 averaged over the two trained-on
    collections; no mode loses more than 0.01 on either; the mode loses ≤ 0.01 on cranfield."""
    gain = round(sum(rows[c][objective]["delta"] for c in TRAINED_ON) / len(TRAINED_ON), 4)
    worst = min((rows[c][m]["delta"], f"{m} on {c}") for c in TRAINED_ON for m in MODES)
    unseen = rows["cranfield"][objective]["delta"]
    return {"gain": gain, "worst": {"delta": worst[0], "where": worst[1]}, "cranfield": unseen, "met": gain >= 0.03 and worst[0] >= -0.01 and unseen >= -0.01}


def mean_rows(runs: list[dict[str, dict[str, dict[str, float]]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per collection and mode, the mean over the runs (seeds) of the trained nDCG@10 and of Δ;
    ``se``: one run's paired standard error, or, over several, the standard deviation of Δ
    across them (``spread``)."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c in runs[0]:
        out[c] = {}
        for m in runs[0][c]:
            deltas = np.array([r[c][m]["delta"] for r in runs])
            out[c][m] = {
                "index": round(float(np.mean([r[c][m]["index"] for r in runs])), 4),
                "delta": round(float(deltas.mean()), 4),
                "se": round(float(deltas.std(ddof=1)), 4),
                "spread": "sd over seeds",
                "deltas": [float(d) for d in deltas],
            }
    return out


def mean_training(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's training record, or the mean seconds and examples/s over several."""
    if len(records) == 1:
        return records[0]
    mean = {k: round(float(np.mean([r[k] for r in records])), 2) for k in ("seconds", "examples_per_s") if all(k in r for r in records)}
    return {"steps": records[0].get("steps"), **mean, "runs": len(records)}


def markdown(result: dict[str, Any]) -> str:
    lines = ["| objective | collection | " + " | ".join(MODES) + " |", "| --- | --- | " + " | ".join("---" for _ in MODES) + " |"]
    for name in COLLECTIONS:
        lines.append(f"| base | {name} | " + " | ".join(f"{result['base'][name]['ndcg10'][m]:.4f}" for m in MODES) + " |")
    for obj, r in result["objectives"].items():
        for name in COLLECTIONS:
            cells = []
            for m in MODES:
                c = r["collections"][name][m]
                mark = "**" if m == obj else ""
                cells.append(f"{mark}{c['index']:.4f} ({c['delta']:+.4f} ± {c['se']:.4f}){mark}")
            lines.append(f"| {obj} | {name} | " + " | ".join(cells) + " |")
    seeds = result.get("seeds", [result.get("seed")])
    lines.append("")
    lines.append(
        f"nDCG@10 (Δ ± the standard deviation of Δ over seeds {', '.join(map(str, seeds))}: the mean of their runs)"
        if len(seeds) > 1
        else f"nDCG@10 (Δ ± the paired standard error over the queries; seed {seeds[0]})"
    )
    lines.append("")
    lines.append(
        "| objective | its mode's gain (msmarco + dbpedia) | worst Δ of any mode there | its mode on cranfield | target met | steps × pairs | hard negatives a pair | training s | examples/s |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for obj, r in result["objectives"].items():
        v, t = r["verdict"], r["training"]
        lines.append(
            f"| {obj} | {v['gain']:+.4f} | {v['worst']['delta']:+.4f} ({v['worst']['where']}) | {v['cranfield']:+.4f} | {'yes' if v['met'] else 'no'} | "
            f"{t.get('steps')} × {result['batch_size']} | {r['config']['data']['negatives']} | {t.get('seconds', 'reused')} | {t.get('examples_per_s', float('nan')):.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--objectives", default="maxsim,first-m,softmax-centroid")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", help="comma-separated seeds, one run each: the table holds their mean, ± the standard deviation over them")
    p.add_argument(
        "--config", help="a TrainConfig YAML the runs start from (the objective, steps, batch size, seed and the data to train on are the benchmark's)"
    )
    p.add_argument(
        "--objective-config",
        action="append",
        default=[],
        metavar="OBJECTIVE=YAML",
        help="a TrainConfig YAML for one objective instead of --config (its train.steps, when set, instead of --steps)",
    )
    p.add_argument("--tag", default="", help="a name for this configuration's checkpoints and indexes in WORKDIR")
    p.add_argument(
        "--only",
        choices=["pairs", "train"],
        help="pairs: write each objective's run directory (its pairs, negatives mined here) and stop; "
        "train: train each objective (from those run directories when present) and record it, no index built "
        "(a GPU machine without the indexes; the same WORKDIR path and $MVR_DATASETS on both)",
    )
    p.add_argument("--json", dest="json_out")
    p.add_argument("--markdown")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    for name in TRAINED_ON:
        link = work / "corpus" / f"{name}.jsonl"
        if not link.is_symlink():  # (a link whose target is on another machine stays)
            link.symlink_to(DATASETS / name / "corpus.jsonl")
    if args.only == "train":  # the indexes stay where the pairs were written
        base_index = {c: str(work / f"base-{c}") for c in COLLECTIONS}
        base = {c: {"ndcg10": {}} for c in COLLECTIONS}
    else:
        base_index = {c: index_once(DATASETS / c / "corpus.jsonl", work / f"base-{c}", "minilm", bm25=c in TRAINED_ON) for c in COLLECTIONS}
        base = {c: quality_once(c, base_index[c]) for c in COLLECTIONS}
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    result: dict[str, Any] = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seeds": seeds,
        "base": {c: {"ndcg10": base[c]["ndcg10"]} for c in COLLECTIONS},
        "objectives": {},
    }
    own = dict(item.split("=", 1) for item in args.objective_config)
    for objective in [o.strip() for o in args.objectives.split(",") if o.strip()]:
        path = own.get(objective, args.config)
        loaded = yaml.safe_load(Path(path).read_text()) if path is not None else None
        steps = ((loaded or {}).get("train") or {}).get("steps") if objective in own else None
        steps = steps or args.steps
        runs = []
        for seed in seeds:
            config = TrainConfig.from_mapping(
                loaded,
                objective=objective,
                **{
                    "data.eval_datasets": [str(DATASETS / c) for c in COLLECTIONS],
                    "data.on_overlap": "drop",
                    "data.max_pairs": steps * args.batch_size,  # one pass over steps × batch_size pairs
                    "train.steps": steps,
                    "train.batch_size": args.batch_size,
                    "train.seed": seed,
                },
            )
            name = "-".join([objective, *([args.tag] if args.tag else []), *([Path(path).stem] if objective in own else []), f"s{seed}"])
            if args.only == "pairs":
                log(f"{name}: pairs in {prepare_once(work, name, config, [base_index[c] for c in TRAINED_ON])}")
                continue
            model, training = train_once(work, name, config, [base_index[c] for c in TRAINED_ON])
            run: dict[str, Any] = {"seed": seed, "model": model, "training": training}
            if args.only != "train":
                from mvr.pipeline.retrieval.evaluation import compare_exact

                rows = {}
                for c in COLLECTIONS:
                    index = index_once(DATASETS / c / "corpus.jsonl", work / f"{name}-{c}", model)
                    rows[c] = compare_exact(base[c], quality_once(c, index), MODES)
                run |= {"collections": rows, "verdict": verdict(objective, rows)}
            runs.append(run)
            log(f"{name}: {json.dumps(run.get('verdict', training))}")
            result["objectives"][objective] = {"config": config.model_dump(mode="json", exclude={"train": {"seed"}}), "runs": runs}
            if args.only != "train":
                mean = mean_rows([r["collections"] for r in runs])
                result["objectives"][objective] |= {
                    "collections": mean,
                    "verdict": verdict(objective, mean),
                    "training": mean_training([r["training"] for r in runs]),
                }
                log(markdown(result))
            if args.json_out:
                Path(args.json_out).write_text(json.dumps(result, indent=1))
    if args.only:
        return 0
    table = markdown(result)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
