"""The type checker finds nothing in the package: mypy, configured in pyproject.toml (strict on
operators/ and pipeline/retrieval/, default elsewhere), over the installed layout, where the
folders at the repository's top level are ``mvr.pipeline``, ``mvr.operators`` and so on (a
tree of links in a temporary directory gives mypy that layout without installing).

The check alone, as a developer runs it: ``python -m pytest -n 0 tests/test_types.py``.
mypy's cache lives beside the fixture cache (``$MVR_TEST_CACHE`` or ``~/.cache/mvr-tests``),
so that a run after the first checks only what changed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from fixture_cache import default_root

ROOT = Path(__file__).resolve().parents[1]


def package_tree(into: Path) -> Path:
    """Links that lay the repository out as the installed package (pyproject's package-dir)."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = into / "mvr"
    package.mkdir()
    for name, folder in mapping.items():
        if name == "mvr":
            for source in (ROOT / folder).glob("*.py"):
                (package / source.name).symlink_to(source)
        else:
            (package / name.split(".", 1)[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return into


def test_mypy_finds_nothing(tmp_path):
    tree = package_tree(tmp_path)
    cache = default_root() / "mypy"
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache), "-p", "mvr"]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


def test_the_api_signatures_resolve():
    """Every public function of ``mvr`` resolves under ``typing.get_type_hints`` (Sphinx, IDEs
    and runtime checkers read them so), each naming what it returns; and reaching them
    (``mvr/api.py``) imports neither torch nor Ray: their bodies do, when called."""
    code = (
        "import sys, typing, mvr\n"
        "names = [n for n in mvr.__all__ if callable(getattr(mvr, n)) and not isinstance(getattr(mvr, n), type)]\n"
        "hints = {n: typing.get_type_hints(getattr(mvr, n)) for n in names}\n"
        "print(sorted(n for n, h in hints.items() if 'return' not in h))\n"
        "print(sorted(m for m in ('ray', 'torch', 'transformers', 'faiss', 'scann') if m in sys.modules))\n"
        "print(len(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    no_return, heavy, n = out.stdout.split("\n")[:3]
    assert (no_return, heavy) == ("[]", "[]") and int(n) >= 15, out.stdout
