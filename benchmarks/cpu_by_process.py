"""Which processes use the cores while a command runs (the test suite, an indexing job): every
second, each process's CPU time since the last look goes to its kind (Ray workers by their
title, ``ray::<task or actor>``; Ray's daemons; the rest by name). At the end, three tables:
core-seconds by kind, the 60 largest titles, and the processes started by the title they
had when first seen (a Ray worker that has not yet set its title shows as ``raylet``). A
process that lives less than a second is missed; the sampler's own CPU is counted under ``python``.

    python benchmarks/cpu_by_process.py OUT.txt -- python -m pytest -q
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import time

import psutil

DAEMONS = ("raylet", "gcs_server", "dashboard/agent.py", "dashboard/dashboard.py", "log_monitor", "runtime_env", "monitor.py", "dashboard")


def kind(p: psutil.Process) -> tuple[str, str]:
    """(kind, title) of a process."""
    try:
        cmd = " ".join(p.cmdline())
        name = p.name()
    except psutil.Error:
        return "?", "?"
    if cmd.startswith("ray::"):
        return "ray-worker", re.sub(r"\d+", "N", cmd.split()[0])[:80]
    for daemon in DAEMONS:
        if daemon in cmd:
            return daemon, daemon
    if "pytest" in cmd:  # pytest itself, and processes naming its temporary paths
        return "pytest", "pytest"
    if "mvr.jobs.cli" in cmd:
        return "mvr-cli", cmd[:60]
    return name, name


def main() -> int:
    out, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    last: dict[int, float] = {}  # CPU seconds seen of each process: those running before the command start from theirs
    for p in psutil.process_iter():
        try:
            t = p.cpu_times()
            last[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    by_kind: collections.Counter = collections.Counter()
    by_title: collections.Counter = collections.Counter()
    started: collections.Counter = collections.Counter()  # processes first seen during the command, by title
    seen: set[int] = set(last)
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        for p in psutil.process_iter():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            used = t.user + t.system
            delta, last[p.pid] = used - last.get(p.pid, 0.0), used
            new = p.pid not in seen
            if not (new or delta > 0):
                continue
            k, title = kind(p)
            if new:
                seen.add(p.pid)
                started[title] += 1
            if delta > 0:
                by_kind[k] += delta
                by_title[title] += delta
        time.sleep(1.0)
    with open(out, "w") as f:
        f.write(f"total {sum(by_kind.values()):.0f} core-s\n")
        f.writelines(f"{v:9.1f}  {k}\n" for k, v in by_kind.most_common())
        f.write("\n")
        f.writelines(f"{v:9.1f}  {k}\n" for k, v in by_title.most_common(60))
        f.write(f"\n{sum(started.values())} processes started\n")
        f.writelines(f"{v:9d}  {k}\n" for k, v in started.most_common(60))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
