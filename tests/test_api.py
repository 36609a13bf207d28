"""The Python API's docstring examples (``mvr/__init__.py`` and its functions in
``mvr/api.py``) run as doctests: a real corpus
indexed, searched in every mode and with filters, added to, deleted from, compacted, its
stats and files checked, a capacity plan, and a service started, queried through the
client and stopped."""

from __future__ import annotations

import doctest

import pytest

import mvr
import mvr.api

pytestmark = pytest.mark.ray


def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    return [*finder.find(mvr, "mvr"), *finder.find(mvr.api, "mvr.api")]


def _run(name: str) -> doctest.TestResults:
    tests = [t for t in _doctests() if t.name == name]
    assert tests and tests[0].examples, f"{name} has no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    return runner.summarize(verbose=False)


def test_every_public_function_with_examples_is_run_here():
    with_examples = {t.name for t in _doctests() if t.examples}
    assert with_examples == {"mvr", "mvr.api.plan", "mvr.api.serve"}


@pytest.mark.parametrize("name", ["mvr", "mvr.api.plan"])
def test_docstring_examples(name, ray_address):
    result = _run(name)
    assert result.failed == 0 and result.attempted > 0


def test_serve_docstring_example(ray_address, serve_port):
    """The service example, as a user would write it (port 8765), run on this worker's Ray
    cluster and its Serve: Serve has one HTTP proxy a cluster, listening on ``serve_port``, so
    the example's port is rewritten to that one before it runs. Then the example's index served
    on another port is refused, naming the port Serve listens on (a second ``serve.start``
    would be ignored and the service would answer elsewhere than its URL says)."""
    (test,) = [t for t in _doctests() if t.name == "mvr.api.serve"]
    written = [e for e in test.examples if "port=8765" in e.source]
    assert len(written) == 1, [e.source for e in test.examples]
    written[0].source = written[0].source.replace("port=8765", f"port={serve_port}")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted > 0
    other = mvr.ServeConfig(port=serve_port + 1)
    with pytest.raises(ValueError, match=rf"Serve already runs on this Ray cluster with its HTTP proxy on \S+:{serve_port}, not \S+:{serve_port + 1}"):
        mvr.serve(test.globs["index"], other)
