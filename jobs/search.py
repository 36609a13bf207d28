"""``mvr search INDEX "query text"`` / ``python -m mvr.jobs.search``: one query from the shell,
answered in-process by the search core (ANN partitions when built, else exact; ``--exact``
forces brute force), or ``mvr search --url http://host:8000 "query text"`` by a running
service (``mvr serve``); ``--json`` prints the ``POST /search`` response body."""

from __future__ import annotations

import argparse
import json
import sys

from mvr.jobs.common import ArgumentParser, check_utf8
from mvr.jobs.errors import run_job


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr import FUSIONS, MODES, SEARCH_MODES

    p = p or ArgumentParser(prog="python -m mvr.jobs.search", description=__doc__)
    p.usage = "%(prog)s INDEX QUERY [options]\n       %(prog)s --url URL QUERY [options]"
    p.add_argument("index", nargs="?", metavar="INDEX", help="index directory (path or fsspec URL); not with --url")
    p.add_argument("query", metavar="QUERY", help="query text")
    p.add_argument("--url", help="ask a running service (mvr serve) at this base URL instead of searching in-process")
    p.add_argument("--token", help="bearer token for --url (default: $MVR_TOKEN)")
    p.add_argument("-k", "--k", type=int, default=10, help="number of documents to return (1..1000)")
    p.add_argument("--mode", choices=SEARCH_MODES, default="maxsim", help="scoring mode")
    p.add_argument("--exact", action="store_true", help="brute-force search even when ANN partitions exist")
    p.add_argument("--dense", choices=MODES, help="hybrid: the dense mode fused with BM25 (default maxsim)")
    p.add_argument("--fusion", choices=FUSIONS, help="hybrid: weighted (default) or rrf")
    p.add_argument("--lam", type=float, help="hybrid: λ, the dense side's weight in [0, 1] (default 0.8)")
    p.add_argument("--filter", metavar="EXPR", help="only documents this metadata filter selects, e.g. \"year >= 2010 AND lang = 'en'\" (docs/filters.md)")
    p.add_argument("--json", action="store_true", help="print the response as JSON on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    check_utf8("query", args.query)  # before any model or index is touched
    if args.filter is not None:
        check_utf8("--filter", args.filter)
    if args.url and args.index:
        raise ValueError(f"give INDEX or --url, not both (INDEX {args.index!r}, --url {args.url})")
    if not args.url and not args.index:
        raise ValueError("give an INDEX, or --url of a running service")
    import mvr

    knobs = {k: v for k, v in {"dense": args.dense, "fusion": args.fusion, "lam": args.lam}.items() if v is not None}
    config = mvr.SearchConfig(exact=args.exact)
    mvr.check_query(args.query, args.k, args.mode, config, **knobs)
    if args.filter is not None:
        mvr.check_filter(args.filter)  # syntax first, before any index or model is read
    if args.url:
        return show(
            args, ask_service(args.url, args.token, args.query, args.k, args.mode, {**knobs, **({"filter": args.filter} if args.filter is not None else {})})
        )
    if args.dense:
        config.hybrid.dense = args.dense
    if args.filter is not None:  # the filter checked against the catalog's columns before the model loads
        from mvr.jobs.inputs import load_index_manifest

        load_index_manifest(args.index)  # a missing or damaged index named as such, first
        mvr.check_filter(args.filter, args.index)
    with mvr.open(args.index, modes=(args.mode,), config=config) as searcher:
        body = searcher.answer(args.query, args.k, args.mode, filter=args.filter, **knobs)
    return show(args, body)


def ask_service(url: str, token: str | None, query: str, k: int, mode: str, knobs: dict) -> dict:
    """``POST /search`` to a running service; an unreachable or malformed URL as a ValueError."""
    import re

    import requests

    import mvr

    client = mvr.client(url, token)
    try:
        return client.search(query, k, mode, **knobs)
    except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL) as exc:
        raise ValueError(f"--url {url}: not an http(s) URL of the service ({exc})") from None
    except requests.Timeout:
        raise ValueError(f"the service at {url} did not answer within {client.timeout:.0f} s") from None
    except requests.ConnectionError as exc:
        reason = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
        raise ValueError(f"cannot reach the service at {url}" + (f" ({reason.group(1).strip()})" if reason else "")) from None
    finally:
        client.close()


def show(args: argparse.Namespace, body: dict) -> int:
    """Print a ``POST /search`` body as JSON or as a results table."""
    if args.json:
        print(json.dumps(body, ensure_ascii=False))
        return 0
    t = body["timings_ms"]
    where = f" · filter: {args.filter}" if getattr(args, "filter", None) is not None else ""
    degraded = f" · DEGRADED: {body['partitions_answered']}/{body['partitions']} partitions answered" if body.get("degraded") else ""
    caption = (
        f"{body['path']} search{where} · {body['candidates']} passages rescored{degraded} · encode {t['encode']:.1f} ms · "
        f"candidates {t['candidates']:.1f} ms · rescore {t['rescore']:.1f} ms · total {t['total']:.1f} ms"
    )
    from rich.console import Console

    from mvr.jobs.render import results_table

    Console().print(results_table(f"{args.mode}: {args.query}", body["results"], caption))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
