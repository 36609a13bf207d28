"""``mvr plan`` / ``python -m mvr.jobs.plan``: a capacity plan for an index of N passages —
storage bytes (shards' Parquet and codes files, codec, catalog, manifest, ANN partitions,
BM25), RAM of one served partition, the partitions a RAM budget needs, and encode CPU / GPU
hours. Arithmetic from
the shard and ANN formats of this codebase and from figures measured on it
(``operators/planning/capacity.py``, docs/capacity.md); nothing is read or built."""

from __future__ import annotations

import argparse
import json
import sys

from mvr.jobs.common import ArgumentParser, output_console
from mvr.jobs.errors import error, run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr.operators import codecs
    from mvr.operators.planning.capacity import ANN_BACKENDS, MEASURED
    from mvr.operators.retrieval.scoring import VECTOR_KINDS

    p = p or ArgumentParser(prog="python -m mvr.jobs.plan", description=__doc__)
    m = MEASURED
    p.add_argument("--passages", type=int, required=True, help="passages after splitting documents")
    p.add_argument(
        "--tokens-per-passage",
        type=float,
        default=m["tokens_per_passage"].value,
        help=f"mean token vectors a passage before any pooling (default {m['tokens_per_passage'].value}: msmarco-sample, reference config; "
        f"{m['tokens_per_passage_colbert'].value} with configs/colbert.yaml)",
    )
    p.add_argument(
        "--pool-factor",
        type=int,
        default=1,
        help="token pooling (CompressConfig.pool_factor): a passage stores tokens-per-passage ÷ factor token vectors (default 1: none)",
    )
    p.add_argument("--dim", type=int, default=384, help="stored vector dimension (384: packaged MiniLM; 128: a ColBERT checkpoint's projection)")
    p.add_argument(
        "--codec",
        default=codecs.AUTO,
        help="the index codec (CompressConfig.codec): an operators/codecs name, e.g. "
        + ", ".join(codecs.EXAMPLES)
        + "; default auto: pca-192+residual-1 above 192 dims, residual-1 above 128, residual-2 at 128 or fewer",
    )
    p.add_argument(
        "--pooled-codec",
        default=codecs.AUTO,
        help="codec of the pooled and centroid vectors (CompressConfig.pooled_codec, default auto: pq-{dim/2}, dim/2 B a vector; int8: dim + 4 B)",
    )
    p.add_argument(
        "--first-m-codec",
        default=codecs.AUTO,
        help="first-m vectors (CompressConfig.first_m_codec): auto (refine-{dim/4}: the first m token codes plus dim/4 B of "
        "refinement a vector), refine-M, or pooled (a column in the pooled codec)",
    )
    p.add_argument("--first-m", type=int, default=8, help="first-m vectors a passage (CompressConfig.first_m, default 8)")
    p.add_argument("--centroids", type=int, default=4, help="k-means centroids a passage (CompressConfig.centroids, default 4; colbert.yaml 8)")
    p.add_argument("--rows-per-shard", type=int, default=1024, help="passages a shard (RuntimeConfig.write_rows_per_shard, default 1024)")
    p.add_argument("--text-bytes-per-passage", type=float, default=m["text_bytes_per_passage"].value, help="raw UTF-8 text a passage (default: msmarco-sample)")
    p.add_argument("--doc-id-chars", type=float, default=m["doc_id_chars"].value, help="mean doc id length (default: msmarco-sample)")
    p.add_argument(
        "--ann", choices=ANN_BACKENDS, default="codec-ivf", help="ANN backend of the partitions (default codec-ivf, as mvr build-ann; none: exact search only)"
    )
    p.add_argument("--kinds", default=",".join(VECTOR_KINDS), help="vector kinds with ANN partitions, served (default: all, as mvr build-ann)")
    p.add_argument("--pq-m", type=int, help="FAISS sub-quantizers (default: the build default, the divisor of dim ≤ 96 nearest dim/8)")
    p.add_argument("--nbits", type=int, help="FAISS bits a code (default 8 at these sizes)")
    p.add_argument("--dims-per-block", type=int, default=2, help="ScaNN AH dimensions a block (default 2)")
    p.add_argument(
        "--codes-hot-fraction",
        type=float,
        default=0.0,
        help="share of a replica's memory-mapped codes to provision as resident page cache (default 0: RAM for the ANN index, "
        "id maps and offsets only; 1: every code of the replica cached)",
    )
    p.add_argument("--no-bm25", action="store_true", help="no BM25 partitions (mvr build-ann --no-bm25)")
    p.add_argument("--partitions", type=int, help="a fixed number of partitions P (default: from --ram-per-partition-gb, else 1)")
    p.add_argument("--ram-per-partition-gb", type=float, help="RAM budget of one partition replica, decimal GB: P is the smallest that fits")
    p.add_argument(
        "--size-by",
        choices=("peak", "steady"),
        default="peak",
        help="fit the budget with the high-water mark while a replica loads (peak, default) or its size once loaded (steady)",
    )
    p.add_argument(
        "--cpu-passages-per-s",
        type=float,
        default=m["cpu_passages_per_s"].value,
        help=f"encode rate of one 2-vCPU node (default {m['cpu_passages_per_s'].value}: measured, see docs/capacity.md)",
    )
    p.add_argument("--gpu-passages-per-s", type=float, help="encode rate of one GPU; not measured for mvr, so GPU-hours are given only with it")
    p.add_argument("--json", dest="json_out", action="store_true", help="print the plan as JSON instead of tables")
    return p


def run(args: argparse.Namespace) -> int:
    import mvr
    from mvr.operators.planning.capacity import AnnSettings, ServeSettings, Throughput

    try:
        workload = dict(
            tokens_per_passage=args.tokens_per_passage,
            dim=args.dim,
            codec=args.codec,
            pooled_codec=args.pooled_codec,
            first_m_codec=args.first_m_codec,
            first_m=args.first_m,
            centroids=args.centroids,
            text_bytes_per_passage=args.text_bytes_per_passage,
            doc_id_chars=args.doc_id_chars,
            rows_per_shard=args.rows_per_shard,
            pool_factor=args.pool_factor,
        )
        ann = AnnSettings(args.ann, tuple(k.strip() for k in args.kinds.split(",") if k.strip()), args.pq_m, args.nbits, args.dims_per_block)
        serve = ServeSettings(not args.no_bm25, args.partitions, args.ram_per_partition_gb, args.size_by, args.codes_hot_fraction)
        plan = mvr.plan(args.passages, ann=ann, serve=serve, throughput=Throughput(args.cpu_passages_per_s, args.gpu_passages_per_s), **workload)
    except ValueError as exc:
        return error(exc)
    if args.json_out:
        print(json.dumps(plan.to_json(), indent=1))
    else:
        print_plan(plan)
    return 0


def print_plan(plan) -> None:
    """The plan (an ``operators.planning.capacity.CapacityPlan``) as rich tables: inputs, storage, RAM a
    partition, encode hours, notes."""
    from rich.table import Table

    from mvr.operators.planning.capacity import MEASURED, human_bytes

    out = output_console()
    w, ann, serve, tp = plan.workload, plan.ann, plan.serve, plan.throughput
    inputs = Table(title="mvr plan: inputs", show_header=False)
    inputs.add_column(justify="left")
    inputs.add_column(justify="left", overflow="fold")
    for key, value in (
        ("passages", f"{w.passages:,}"),
        (
            "token vectors a passage",
            f"{w.tokens_per_passage:g}" + (f", pooled ÷ {w.pool_factor}: {w.stored_tokens_per_passage:g} stored" if w.pool_factor > 1 else ""),
        ),
        ("dim, token codec", f"{w.dim}, {w.codec_name}{' (auto)' if w.codec == 'auto' else ''}: {w.bytes_per_vector} B a vector, decoded dim {w.codec_dim}"),
        ("pooled/centroids codec", f"{w.pooled_codec_name}: {w.bytes_per_vector_of('pooled')} B a vector, decoded dim {w.dim_of('pooled')}"),
        (
            "first-m codec",
            f"the token codes + {w.first_m_codec_name}: {w.bytes_per_vector_of('first-m')} B a vector beyond them, decoded dim {w.dim_of('first-m')}"
            if w.refines_first_m
            else f"{w.pooled_codec_name} (the pooled codec's, a column of its own)",
        ),
        ("first-m, centroids", f"{w.first_m}, {w.centroids}"),
        ("ANN", f"{ann.backend} over {', '.join(ann.kinds)}" if ann.backend != "none" else "none (exact)"),
        ("served codes", f"memory-mapped; {serve.codes_hot_fraction:g} of them provisioned as page cache"),
        ("BM25", "yes" if serve.bm25 else "no"),
    ):
        inputs.add_row(key, value)
    out.print(inputs)

    storage = Table(title=f"storage: {human_bytes(plan.storage_bytes)}")
    for col in ("item", "bytes", "how"):
        storage.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold")
    for line in plan.storage:
        storage.add_row(line.item, human_bytes(line.bytes), line.how)
    storage.add_row("[bold]total[/bold]", f"[bold]{human_bytes(plan.storage_bytes)}[/bold]", "")
    out.print(storage)

    budget = f", budget {serve.ram_per_partition_gb:g} GB ({serve.size_by})" if serve.ram_per_partition_gb else ""
    ram = Table(title=f"RAM of one partition replica: {plan.partitions:,} partition(s) of {plan.passages_per_partition:,} passages{budget}")
    for col in ("item", "bytes", "how"):
        ram.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold")
    for line in plan.ram:
        ram.add_row(line.item, human_bytes(line.bytes), line.how)
    ram.add_row("[bold]steady: loaded, serving[/bold]", f"[bold]{human_bytes(plan.ram_steady_bytes)}[/bold]", "everything above but the load peak")
    ram.add_row("[bold]peak: while loading[/bold]", f"[bold]{human_bytes(plan.ram_peak_bytes)}[/bold]", "")
    ram.add_row("all partitions, steady", human_bytes(plan.partitions * plan.ram_steady_bytes), f"{plan.partitions:,} × steady")
    ram.add_row("all partitions, provisioned", human_bytes(plan.ram_total_bytes), f"{plan.partitions:,} × {serve.size_by}")
    out.print(ram)

    if plan.build:
        build = Table(title=f"ANN build: one partition's build task (a task a kind and partition): peak {human_bytes(plan.build_peak_bytes)}")
        for col in ("item", "bytes", "how"):
            build.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold")
        for line in plan.build:
            build.add_row(line.item, human_bytes(line.bytes), line.how)
        out.print(build)

    enc = Table(title="encode")
    for col in ("what", "hours", "from"):
        enc.add_column(col, justify="right" if col == "hours" else "left", overflow="fold")
    cpu_src = (
        "measured: " + MEASURED["cpu_passages_per_s"].source
        if tp.cpu_passages_per_s == MEASURED["cpu_passages_per_s"].value
        else "given (--cpu-passages-per-s)"
    )
    enc.add_row("CPU node-hours (2 vCPUs)", f"{plan.cpu_node_hours:,.0f}", f"{tp.cpu_passages_per_s:g} passages/s, {cpu_src}")
    enc.add_row("CPU vCPU-hours", f"{plan.cpu_vcpu_hours:,.0f}", f"× {tp.cpu_vcpus} vCPUs")
    if plan.gpu_hours is None:
        enc.add_row("GPU-hours", "-", "not measured: pass --gpu-passages-per-s")
    else:
        enc.add_row("GPU-hours", f"{plan.gpu_hours:,.1f}", f"{tp.gpu_passages_per_s:g} passages/s a GPU: ASSUMED (given), not measured by mvr")
    out.print(enc)
    for note in plan.notes:
        out.print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
