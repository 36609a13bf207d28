"""``mvr demo`` / ``python -m mvr.jobs.demo``: the whole path offline on a small real corpus
(Python's own documentation): build the corpus, index it, build ANN partitions, start the
Serve search service, send a few queries over HTTP, print the results and shut down. Rerun
with the same ``--workdir`` to reuse the index."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile

from mvr.jobs.common import ArgumentParser, check_port_free, console, port_number, positive_int, print_config
from mvr.jobs.errors import run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr.pipeline.studies.demo_corpus import DEFAULT_LIMIT

    p = p or ArgumentParser(prog="python -m mvr.jobs.demo", description=__doc__)
    p.add_argument(
        "--workdir", help="where corpus.jsonl and index/ go (default: a new temporary directory); reused by a rerun, the index rebuilt when the corpus changed"
    )
    p.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, help=f"documents in the corpus (default {DEFAULT_LIMIT})")
    p.add_argument("-k", "--k", type=positive_int, default=3, help="results shown per query (default 3)")
    p.add_argument("--port", type=port_number, default=8000, help="HTTP port of the demo service (default 8000)")
    return p


def run(args: argparse.Namespace) -> int:
    import mvr

    serve_config = mvr.ServeConfig(port=args.port)
    if not os.environ.get("RAY_ADDRESS"):  # a local Ray starts here: its HTTP proxy must be able to listen (a joined cluster's may already)
        check_port_free(serve_config.host, serve_config.port)  # before minutes of indexing, not after (or seconds of imports)
    from rich.console import Console

    from mvr.jobs.render import results_table

    workdir = args.workdir or tempfile.mkdtemp(prefix="mvr-demo-")
    config = mvr.IndexConfig()
    print_config("mvr demo: index configuration", config)
    console.rule(f"mvr demo: {workdir}")
    result = mvr.demo(workdir, args.limit, args.k, config=config, serve_config=serve_config, quiet=True, log=console.print)
    out = Console()
    for body in result.answers:
        t = body["timings_ms"]
        caption = (
            f"POST {result.url}/search · {body['path']} · {body['partitions_answered']}/{body['partitions']} partitions · "
            f"encode {t['encode']:.1f} ms · candidates {t['candidates']:.1f} ms · rescore {t['rescore']:.1f} ms · total {t['total']:.1f} ms"
        )
        out.print(results_table(f"{body['mode']}: {body['query']}", body["results"], caption, show_title=False))
    counts = result.index.manifest.counts
    indexing = "index up to date" if result.index.up_to_date else f"indexed in {result.index.seconds:.1f} s"
    indexing += ", ANN partitions built" if result.ann_built else ", ANN partitions reused"
    mean_ms = sum(b["timings_ms"]["total"] for b in result.answers) / max(len(result.answers), 1)
    out.print(
        f"demo: {counts['indexed_documents']} documents, {counts['passages']} passages, "
        f"{counts['tokens']} token vectors ({indexing}); {len(result.answers)} queries, "
        f"{mean_ms:.0f} ms/query mean in the service; {result.seconds:.1f} s total (service shut down)"
    )
    port = f" --port {args.port}" if args.port != mvr.ServeConfig().port else ""  # the service the hint starts listens where the URL says
    out.print(f'try: mvr serve {shlex.quote(result.index_url)}{port}   then   mvr search --url {result.url} "parse command-line arguments"')
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
