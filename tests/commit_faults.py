"""An ``mvr`` command run with a fault before its first commit, for the tests that race and
kill writers (tests/test_updates_concurrency.py); the product has no such hook.

    python tests/commit_faults.py [--barrier DIR:N] [--pause SECONDS] COMMAND ARGS...

At the command's first commit of an update (``commit_update``'s first call of
``commit_manifest``, the one naming the ``operation``: every file of the writer's change
written, the version file not yet created; an add's own workspace index, committed before,
does not count), ``--barrier DIR:N`` waits (at most 600 s)
until N such writers have got there (a file each in DIR), so they race for the same version at
once; ``--pause SECONDS`` then prints ``PAUSED`` on stderr and sleeps, so the test can kill the
writer there."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Optional

PAUSED = "commit_faults: paused before its commit"


def _barrier(spec: str) -> None:
    directory, n = spec.rsplit(":", 1)
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 600
    while len(os.listdir(directory)) < int(n) and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--barrier", help="DIR:N: wait until N writers have reached their commit")
    p.add_argument("--pause", type=float, help="seconds to sleep before the commit, after saying so")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)

    from mvr.storage import manifest

    original = manifest.commit_manifest
    done = False

    def commit(*a: Any, **k: Any) -> Any:  # commit_update looks the name up at each call
        nonlocal done
        if not done and (len(a) > 3 or "operation" in k):  # an update's commit, not a new index's
            done = True
            if args.barrier:
                _barrier(args.barrier)
            if args.pause is not None:
                print(f"{PAUSED} ({args.pause:g} s)", file=sys.stderr, flush=True)
                time.sleep(args.pause)
        return original(*a, **k)

    manifest.commit_manifest = commit
    from mvr.jobs.cli import main as cli

    return cli(args.command)


if __name__ == "__main__":
    sys.exit(main())
