"""``mvr serve INDEX`` / ``python -m mvr.jobs.serve INDEX``: the Ray Serve search service over
the index's current manifest (``POST /search``, ``POST /search/batch``, ``GET /health``,
``GET /stats``; OpenAPI docs at ``/docs``). Run it again on a rebuilt index to switch over
without refusing queries. Stays in the foreground until Ctrl-C (then deletes its apps),
unless ``--detach`` on a running cluster."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from mvr.jobs.common import ArgumentParser, check_port_free, console, output_console, port_number, print_config
from mvr.jobs.errors import error, run_job
from mvr.jobs.inputs import load_config, load_index_manifest


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr import SEARCH_MODES

    p = p or ArgumentParser(prog="python -m mvr.jobs.serve", description=__doc__)
    p.add_argument("index", help="index directory (path or fsspec URL)")
    p.add_argument("--config", help="YAML file with a ServeConfig (see configs/serve.yaml)")
    p.add_argument("--host", help="HTTP host (default 127.0.0.1; 0.0.0.0 to listen on every interface)")
    p.add_argument("--port", type=port_number, help="HTTP port (default 8000)")
    p.add_argument(
        "--modes", help=f"comma-separated modes to serve out of {','.join(SEARCH_MODES)} (default: the dense ones, and bm25 and hybrid when the index has BM25)"
    )
    p.add_argument("--exact", action="store_true", help="serve brute-force search even where ANN partitions exist")
    p.add_argument("--poll", type=float, metavar="SECONDS", help="follow the index: switch to a newer committed version when one appears (checked this often)")
    p.add_argument("--token", help="require this bearer token on every request (default: $MVR_TOKEN when set)")
    p.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, or start a local one)")
    p.add_argument("--detach", action="store_true", help="deploy and return (needs a running cluster: --address or $RAY_ADDRESS)")
    return p


def load_serve_config(args: argparse.Namespace):
    import mvr

    modes = args.modes.split(",") if args.modes else None
    return load_config(
        mvr.ServeConfig, args.config, **{"host": args.host, "port": args.port, "modes": modes, "search.exact": args.exact or None, "reload_poll_s": args.poll}
    )


def deployment_table(d):
    from rich.table import Table

    t = Table(title=f"serving {d.index_url} (manifest version {d.version}) at {d.url}", title_justify="left")
    for col in ("app", "deployment", "replicas", "CPUs each", "GPUs each", "threads", "holds"):
        t.add_column(col)
    r = d.resources
    if d.encoder_app:
        t.add_row(
            d.encoder_app, "QueryEncoder", str(r.encoder.replicas), f"{r.encoder.num_cpus:g}", f"{r.encoder.num_gpus:g}", str(r.encoder.threads or "-"), "model"
        )
    for s in d.layout.shards:
        holds = ", ".join(f"{k} ({'all, exact' if e is None else str(e['passages']) + ' passages'})" for k, e in s.kinds.items())
        if s.bm25:
            holds += f", BM25 partition(s) {', '.join(map(str, sorted(s.bm25)))}"
        if d.index_app:
            t.add_row(d.index_app, f"Partition{s.index}", str(r.partition.replicas), f"{r.partition.num_cpus:g}", "0", str(r.partition.threads), holds)
    modes = ", ".join(f"{m}: {s.path}" for m, s in d.layout.modes.items())
    here = (["model (the query encoder)"] if not d.encoder_app else []) + ([f"{len(d.layout.shards)} partition(s)"] if not d.index_app else [])
    holds = "; ".join(here + [modes])
    t.add_row("(ingress)", "Searcher", str(r.searcher.replicas), f"{r.searcher.num_cpus:g}", f"{r.searcher.num_gpus:g}", str(r.searcher.threads or "-"), holds)
    return t


def run(args: argparse.Namespace) -> int:
    address = args.address or os.environ.get("RAY_ADDRESS")
    if args.detach and not address:
        return error(ValueError("--detach needs a running Ray cluster (--address or $RAY_ADDRESS): a local one ends with this process"))
    config = load_serve_config(args)
    if not address:  # a local Ray is started here: its HTTP proxy must be able to listen (a joined cluster's may already)
        check_port_free(config.host, config.port)
    load_index_manifest(args.index)  # a missing or damaged index refused before Ray starts
    print_config("mvr serve: configuration", config)
    import mvr

    d = mvr.serve(args.index, config, args.token, log=console.print, address=address)  # no --token: $MVR_TOKEN when set
    follow = f"polling for new versions every {config.reload_poll_s:g} s" if config.reload_poll_s else "POST /admin/reload switches to a new version"
    console.print(f"serving version {d.version}; {follow}")
    output_console().print(deployment_table(d))
    console.print(f"ready in {d.seconds:.1f} s: {d.url}/search, {d.url}/docs" + (" (bearer token required)" if d.token_required else ""))
    if d.direct_urls:
        console.print(f"direct ingress, each replica on its own port (no proxy hop; balance over them): {', '.join(d.direct_urls)}", soft_wrap=True)
    if args.detach:
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        console.print("serving; Ctrl-C to stop")
        stop.wait()
    except KeyboardInterrupt:
        pass
    console.print("shutting down")
    mvr.stop_serving(config)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
