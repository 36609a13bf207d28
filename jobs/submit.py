"""``mvr submit [--address URL] COMMAND ARGS…``: run an mvr command as a Ray job on a cluster,
through Ray's job submission API. The same as ``ray job submit --working-dir . -- python -m
jobs.MODULE ARGS…`` with the project's runtime environment (``pipeline/job_submission.py``):
the checkout as working dir, offline model loading, and the variables given with ``--env``
(e.g. ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3``). Follows the job's logs and exits with
its outcome (0 when it succeeded); ``--no-wait`` prints the submission id and returns."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Mapping, Sequence

from mvr.jobs.common import ArgumentParser, console
from mvr.jobs.errors import error, run_job

NOT_SUBMITTABLE = ("submit", "demo")  # demo starts and stops its own local cluster


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from mvr.jobs.cli import COMMANDS

    p = p or ArgumentParser(prog="python -m mvr.jobs.submit", description=__doc__)
    p.add_argument("--address", help="the cluster's dashboard, http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS or $RAY_ADDRESS)")
    p.add_argument("--working-dir", default=".", help="directory shipped to the cluster as the job's working dir (default: .)")
    p.add_argument("--ray-token", help="Ray's auth token, when the cluster uses token authentication and $RAY_AUTH_TOKEN is not set")
    p.add_argument("--submission-id", help="a name for the job (default: Ray picks one)")
    p.add_argument("--no-wait", action="store_true", help="print the submission id and return")
    p.add_argument("--timeout", type=float, default=24 * 3600.0, help="seconds to follow the job before giving up (it keeps running)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="an environment variable for the job's driver and workers (repeatable); NAME alone passes this shell's value. "
        "Visible in the dashboard's job list: keep secrets in instance roles (docs/cluster.md)",
    )
    p.add_argument("command", choices=[c for c in COMMANDS if c not in NOT_SUBMITTABLE], help="the mvr command to run on the cluster")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments, as on the command line")
    return p


def env_vars(given: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values as {name: value}: ``NAME=VALUE``, or ``NAME`` with its value in
    ``environ`` (this shell's). ValueError naming a malformed or unset one."""
    out = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"--env {item!r}: expected NAME=VALUE or NAME, with NAME a variable name")
        if not sep:
            if name not in environ:
                raise ValueError(f"--env {name}: not set in this shell (give NAME=VALUE)")
            value = environ[name]
        out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    from mvr.jobs.cli import COMMANDS
    from mvr.pipeline.job_submission import TERMINAL, JobRunner, runtime_env

    module = COMMANDS[args.command][0].removeprefix("mvr.jobs.")
    try:
        env = runtime_env(args.working_dir, env_vars=env_vars(args.env, os.environ))
        runner = JobRunner(args.address, token=args.ray_token)
        job = runner.submit(module, args.args, env=env, submission_id=args.submission_id)
    except (ValueError, ConnectionError, RuntimeError) as exc:
        return error(exc)
    console.print(f"submitted {job}: python -m mvr.jobs.{module} {' '.join(args.args)}")
    if args.no_wait:
        print(job)
        return 0
    shown, deadline = 0, time.monotonic() + args.timeout
    while True:
        status = runner.status(job)
        logs = runner.logs(job)
        sys.stdout.write(logs[shown:])
        sys.stdout.flush()
        shown = len(logs)
        if status in TERMINAL:
            break
        if time.monotonic() > deadline:
            return error(TimeoutError(f"{job} still {status.value} after {args.timeout:.0f} s (it keeps running)"))
        time.sleep(1.0)
    message = runner.info(job).message or ""
    console.print(f"{job} {status.value}" + (f": {message}" if message and status.value != "SUCCEEDED" else ""))
    return 0 if status.value == "SUCCEEDED" else 1


def main(argv: list[str] | None = None) -> int:
    return run_job(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
