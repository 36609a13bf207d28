"""The Python API's docstring examples (``mvr/__init__.py``) run as doctests: a real corpus
indexed, searched in every mode and with filters, added to, deleted from, compacted, its
stats and files checked, a capacity plan, and a service started, queried through the
client and stopped."""

from __future__ import annotations

import doctest

import pytest

import mvr

pytestmark = pytest.mark.ray


def _run(name: str) -> doctest.TestResults:
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(mvr, "mvr") if t.name == name]
    assert tests and tests[0].examples, f"{name} has no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    return runner.summarize(verbose=False)


def test_every_public_function_with_examples_is_run_here():
    with_examples = {t.name for t in doctest.DocTestFinder().find(mvr, "mvr") if t.examples}
    assert with_examples == {"mvr", "mvr.plan", "mvr.serve"}


@pytest.mark.parametrize("name", ["mvr", "mvr.plan"])
def test_docstring_examples(name, ray_address):
    result = _run(name)
    assert result.failed == 0 and result.attempted > 0


def test_serve_docstring_example():
    """The service example (port 8765, as a user would write it), run in a process of its own
    with a Ray of its own: Serve is one per Ray cluster, and a test's cluster may hold another
    module's service (a second ``serve.start`` on it races the first one's shutdown)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8765)) == 0:
            pytest.skip("port 8765 is taken on this machine")
    code = (
        "import doctest, mvr\n"
        "(test,) = [t for t in doctest.DocTestFinder().find(mvr, 'mvr') if t.name == 'mvr.serve']\n"
        "runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)\n"
        "runner.run(test)\n"
        "r = runner.summarize(verbose=False)\n"
        "print('RESULT', r.failed, r.attempted)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert "RESULT" in out.stdout, (out.stdout[-3000:], out.stderr[-3000:])
    failed, attempted = map(int, out.stdout.rsplit("RESULT", 1)[1].split())
    assert failed == 0 and attempted > 0, out.stdout[-5000:]
