"""``mvr demo`` end to end, as a user runs it: a real corpus (Python's own documentation)
indexed, ANN partitions built, the service started, the demo's queries sent over HTTP and
their results printed, the service shut down. The demo joins the test worker's Ray cluster
(``RAY_ADDRESS``, as on a cluster) and its Serve, on that Serve's port; on the way out it
deletes its own application only."""

from __future__ import annotations

import re

import pytest

from test_cli_errors import mvr

pytestmark = pytest.mark.ray
LIMIT = 140

# the demo's queries and a module whose documentation should be among the top 3
EXPECTED = {
    "maxsim: how do I parse JSON from a string": "json",
    "maxsim: run a shell command and capture its output": "subprocess",
    "maxsim: read and write zip archives": "zipfile",
    "hybrid: how do I parse JSON from a string": "json",
}


def test_demo_prints_a_results_table_for_each_query(tmp_path, ray_address, serve_port):
    from ray import serve

    from mvr.pipeline.studies.demo import DEMO_QUERIES

    port = serve_port
    # 140 documents: the first tier of the demo corpus (every topic and every module's own
    # docstring, 138 of them, the modules EXPECTED names among them) and two more
    r = mvr(
        "demo", "--workdir", tmp_path, "--limit", str(LIMIT), "-k", "3", "--port", str(port), env={"COLUMNS": "200", "RAY_ADDRESS": ray_address}, timeout=900
    )
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, err[-3000:]
    assert "Traceback" not in out + err
    titles = re.findall(r"^\s*(maxsim|hybrid): (.+?)\s*$", out, re.M)
    assert [f"{m}: {q}" for m, q in titles] == [f"maxsim: {q}" for q in DEMO_QUERIES] + [f"hybrid: {DEMO_QUERIES[0]}"], out
    sections = re.split(r"^\s*(?:maxsim|hybrid): .+$", out, flags=re.M)[1:]
    for (mode, query), section in zip(titles, sections):
        section = section.split("demo: ", 1)[0]
        ids = re.findall(r"(?:doc|topic):[\w.-]+", section)
        assert len(set(ids)) == 3, (query, section)  # k = 3 results
        assert re.search(rf"POST\s+http://127\.0\.0\.1:{port}/search", section), section
        module = EXPECTED.get(f"{mode}: {query}")
        if module:
            assert any(i == f"doc:{module}" or i.startswith(f"doc:{module}.") for i in ids), (query, ids)
    summary = re.search(r"demo: (\d+) documents, (\d+) passages, (\d+) token vectors .*?; (\d+) queries", out.replace("\n", " "))
    assert summary and int(summary[1]) == LIMIT and int(summary[2]) >= LIMIT and int(summary[4]) == len(DEMO_QUERIES) + 1, out
    assert "service shut down" in out and f"mvr search --url http://127.0.0.1:{port}" in out
    assert re.search(rf"try: mvr serve \S+ --port {port}\s", out), out  # the hint's service listens where its URL says
    assert "mvr" not in serve.status().applications  # its application deleted; the worker's Serve still runs
