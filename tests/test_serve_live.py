"""The service follows a live index (issue 17): a client queries continuously while `mvr
add`, `mvr delete` and `mvr compact` commit new versions and the service switches to each
(POST /admin/reload once, polling otherwise). No answer fails; every answer names its
version; no deleted document is returned by a version that has its deletion; an added
document is found by every version that has it; a document that stays is always found. The
switches are made in place: the ingress replica stays, and builds each version beside the last.
And the service's ``QueryEncoder`` deployment (kept across those switches) isolates a text it
cannot encode from its batch-mates.

The index lives in a bucket (moto's S3 server on loopback, tests/s3_endpoint.py), as on a
cloud cluster: the replicas map its files from the node's disk cache
(``storage/local_cache.py``), and each version switch fetches only the files it changed (a
codes file cached for the first version is the same file, never fetched again, when the
last version still lists it)."""

from __future__ import annotations

import json
import threading
import time

import fsspec
import numpy as np
import pytest
import requests

from conftest import serve_config
from helpers import read_jsonl
from mvr.storage import local_cache

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TOKEN = "live-t0ken"


def _wait_version(url: str, version: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = requests.get(url + "/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        if r.status_code == 200 and r.json()["version"] >= version:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the service did not switch to version {version} within {timeout:.0f} s")


def cached_codes() -> dict[str, int]:
    """{cache entry name: inode} of the codes files in the run's node cache (a file fetched
    again is written anew and renamed into place: another inode)."""
    files = local_cache.cache_root() / local_cache.FILES_DIR
    return {p.name: p.stat().st_ino for p in files.iterdir() if p.name.endswith(".arrow")}


@pytest.fixture(scope="module")
def live(msmarco_100, s3, serve_port):
    """A copy of the 100-passage index in a bucket, served with a token and its reloader, the
    encoder as a deployment of its own (as for an index updated often: it is kept across the
    switches; test_serve.py switches with the default, the encoder in the ingress)."""
    from mvr.pipeline.serving.app import deploy, shutdown, start_reloader

    index = s3.make_bucket("live") + "/index"
    fsspec.filesystem("s3").put(str(msmarco_100), index, recursive=True)
    config = serve_config(serve_port, "t-live", modes=["maxsim"], reload_poll_s=1.0, partition_timeout_s=10.0, encoder={"placement": "deployment"})
    d = deploy(index, config, token=TOKEN, log=print)
    start_reloader(index, config, TOKEN, d.version)
    yield {"index": index, "config": config, "deployment": d, "codes": cached_codes()}
    shutdown(config)  # the module's apps, and its reloader (a detached actor: it would outlive the test)


def test_the_encoder_isolates_a_failing_text_in_its_batch(live, datasets):
    """Defence in depth, at the encoder itself (the service's ``QueryEncoder`` deployment,
    called by its DeploymentHandle past the ingress's validation): a text the tokenizer raises
    on, batched with valid ones, comes back as a ``QueryNotEncodable`` while its batch-mates
    get the vectors they get alone."""
    from ray import serve

    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.pipeline.serving.query_encoder import QueryNotEncodable

    assert live["deployment"].encoder_app is not None
    encoder = serve.get_deployment_handle("QueryEncoder", live["deployment"].encoder_app)
    valid = [q["text"] for q in read_jsonl(datasets / "msmarco-sample" / "queries.jsonl")[:6]]
    expected = {q: e.tokens for q, e in zip(valid, Searcher(live["index"], ["maxsim"]).encode(valid))}
    filler = [" ".join(valid)] * 16  # keeps the encoder busy while the texts below queue up as one batch
    for _ in range(3):
        splits = len(encoder.info.remote().result()["split_batches"])
        texts = filler + valid[:3] + ["\ud800 bad"] + valid[3:]
        responses = [encoder.encode.remote(t) for t in texts]
        results = [r.result() for r in responses]
        assert isinstance(results[len(filler) + 3], QueryNotEncodable) and "cannot take" in str(results[len(filler) + 3])
        for text, got in zip(texts, results):
            if text in expected:
                np.testing.assert_allclose(got.tokens, expected[text], atol=1e-4)
        split = encoder.info.remote().result()["split_batches"][splits:]
        assert len(split) == 1 and split[0][1] == 1, split  # one batch fell back to one by one; one text refused
        if split[0][0] > 1:  # the bad text shared its batch with valid ones
            break
    else:
        pytest.fail("the bad text was batched alone three times")


def test_queries_during_add_delete_compact(live, tmp_path, datasets):
    from mvr.pipeline.indexing.compaction import compact
    from mvr.pipeline.indexing.updates import add_documents, delete_documents
    from mvr.storage.manifest import load_manifest

    index, d = live["index"], live["deployment"]
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    stay, gone, new = docs[0:3], docs[3:6], docs[100:130]
    url = d.url
    probes = [("stay", x) for x in stay] + [("gone", x) for x in gone] + [("new", x) for x in new[:3]]
    answers: list[tuple[str, str, int, int, list[str]]] = []  # kind, doc id, status, version, ids
    stop = threading.Event()

    def client() -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {TOKEN}"
        i = 0
        while not stop.is_set() and len(answers) < 4000:
            kind, doc = probes[i % len(probes)]
            i += 1
            r = session.post(url + "/search", json={"query": doc["text"][:300], "k": 10, "mode": "maxsim"}, timeout=120)
            body = r.json() if r.status_code == 200 else {}
            answers.append((kind, doc["_id"], r.status_code, body.get("version", -1), [x["doc_id"] for x in body.get("results", [])]))
            time.sleep(0.2)  # a steady client (~5 queries a second), not a saturating one: the jobs and the new replicas share the 2 cores

    worker = threading.Thread(target=client)
    worker.start()
    try:
        corpus = tmp_path / "new.jsonl"
        corpus.write_text("".join(json.dumps(x) + "\n" for x in new))
        v_add = add_documents(str(corpus), index, log=lambda _: None).manifest.version
        r = requests.post(url + "/admin/reload", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert r.status_code == 202 and r.json()["latest"] == v_add, r.text
        assert requests.post(url + "/admin/reload", timeout=30).status_code == 401  # no token
        _wait_version(url, v_add)
        v_del = delete_documents(index, [x["_id"] for x in gone], log=lambda _: None).manifest.version
        _wait_version(url, v_del)  # by polling
        v_compact = compact(index, log=lambda _: None).manifest.version
        _wait_version(url, v_compact)
        time.sleep(2.0)
    finally:
        stop.set()
        worker.join()
    print(f"\n{len(answers)} answers over versions {sorted({a[3] for a in answers})}")
    # the three switches were made in place by the ingress replica that served the first
    # version (the same configuration and token): no new replica started
    stats = requests.get(url + "/stats", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
    assert stats["version"] == v_compact and stats["switches_in_place"] == 3, stats
    assert len(answers) > 30
    assert all(status == 200 for _, _, status, _, _ in answers), [a for a in answers if a[2] != 200][:3]
    assert {v for *_, v, _ in answers} >= {d.version, v_compact}
    final = load_manifest(index)
    assert v_compact == final.version
    # the replicas mapped every codes file of the last version from the node's cache, and
    # those the first version had already fetched were not fetched again
    now, first = cached_codes(), live["codes"]
    kept = {f"{s.codes_sha256}.arrow" for s in final.shards} & set(first)
    assert {f"{s.codes_sha256}.arrow" for s in final.shards} <= set(now) and kept
    assert {name: now[name] for name in kept} == {name: first[name] for name in kept}
    for kind, doc_id, _, version, ids in answers:
        if kind == "stay" or (kind == "new" and version >= v_add) or (kind == "gone" and version < v_del):
            assert doc_id in ids, (kind, doc_id, version, ids)
        if kind == "gone" and version >= v_del:
            assert doc_id not in ids, (kind, doc_id, version, ids)
        if kind == "new" and version < v_add:
            assert doc_id not in ids
