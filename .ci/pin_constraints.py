"""Print ``NAME==VERSION`` for every installed distribution that ``mvr[test]`` needs,
transitively (markers evaluated for this interpreter): the body of constraints.txt.
Run by .ci/refresh-constraints inside a fresh venv."""

import importlib.metadata as md
import re

from packaging.markers import default_environment
from packaging.requirements import Requirement

env = default_environment()


def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()


seen = {}


def visit(name, extras=()):
    key = norm(name)
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        raise SystemExit(f"{name} is required but not installed") from None
    new = key not in seen
    seen.setdefault(key, (dist.metadata["Name"], dist.version, set()))
    extras = set(extras) - seen[key][2]
    if not new and not extras:
        return
    seen[key][2].update(extras)
    for r in dist.requires or []:
        req = Requirement(r)
        ok = False
        for e in [""] + sorted(seen[key][2]):
            e_env = dict(env, extra=e)
            if req.marker is None or req.marker.evaluate(e_env):
                ok = True
        if ok:
            visit(req.name, req.extras)


visit("mvr", ["test"])
for k, (n, v, _) in sorted(seen.items()):
    if k == "mvr":
        continue
    if k == "torch":
        v = v.split("+")[0]
    print(f"{n}=={v}")
