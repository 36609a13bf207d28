"""mvr's jobs on a real multi-node Ray cluster started on this machine (``tests/cluster.py``:
a head node with no CPUs, so every task and actor runs on a worker node, and two worker nodes
of one CPU each, every node a ``ray start`` of its own), submitted through Ray's job
submission API exactly as ``ray job submit --working-dir . -- python -m mvr.jobs.NAME …`` does
(``verify`` through ``mvr submit``); and the faults a cluster meets, each of which must
leave every passage indexed exactly once:

- an encode actor's worker process killed mid-job (Ray restarts the actor and retries);
- the whole job killed mid-way and submitted again (it resumes from the committed shards, with
  the codecs the first run trained);
- during that resubmitted job, the worker node running its encode actor stopped (the job
  ends on the other node); that job's corpus and index live only in a bucket (moto's S3
  server on loopback: the nodes share no directory for them);
- a truncated and a corrupted shard (``verify`` names them; the ANN build refuses them).

The collection: the 10 judged msmarco-sample queries with the fewest judgments, every judged
passage of theirs and unjudged passages up to 300, written to the cluster's shared disk (as a
bucket would be). Quality is checked against an independent exact computation with plain
transformers and ir-measures."""

from __future__ import annotations

import csv
import json
import os
import posixpath
import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq
import pytest
import requests
from ray.job_submission import JobStatus

from cluster import LocalCluster, free_ports
from helpers import ndcg10, plain_token_vectors, read_jsonl, read_qrels
from mvr.jobs import submit as submit_job
from mvr.pipeline.job_submission import JobRunner
from mvr.pipeline.serving.client import SearchClient
from mvr.storage import fs
from mvr.storage.catalog import Catalog
from mvr.storage.manifest import load_manifest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
N_QUERIES, N_DOCS = 10, 300
# Small encode batches and shards, so a job commits shards for a while before it ends and can
# be hit in the middle (input blocks of 64 KB: two of them, each validated and tokenized by a
# task of its own); torch on both of this machine's cores, although the encode actor's node
# has one logical CPU (the other node's tasks are light).
# float16 codes for the killed actor's job: its index is compared with an independent float computation;
# small_job_rows 0: an actor pool (a job this small would run in its driver), whose actor is killed
RUNTIME = "runtime:\n  block_bytes: 65536\n  encode_actor_batch: 16\n  write_rows_per_shard: 16\n  torch_threads: 2\n  small_job_rows: 0\n"
SMALL_BATCHES = RUNTIME + "compress:\n  codec: float16\n  pooled_codec: float16\n"
# the resubmitted job: the default codec, trained by the first run and reused by the second
# (the codes its committed shards hold stay decodable); every passage encoded again after the
# sample pass (runtime.encode_once false: a sample of all 300 passages would otherwise keep
# them encoded, and the second run would have no encode actor to lose with its node)
TRAINED_CODEC = RUNTIME + "  encode_once: false\n"
JOB_TIMEOUT = 300
STAGES = ("scan_block", "read_tokenize", "EncodeCompress", "write_shards")  # the indexing job's own tasks


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    c.start(workers=2, head_cpus=0)
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def runner(cluster) -> JobRunner:
    return JobRunner(cluster.dashboard_url, headers=cluster.headers)


@pytest.fixture(scope="module")
def collection(cluster, datasets) -> Path:
    """The BEIR sub-collection (see the module docstring) under the cluster's data dir."""
    src = datasets / "msmarco-sample"
    qrels = read_qrels(src / "qrels" / "test.tsv")
    judgments = Counter(q.query_id for q in qrels)
    chosen = sorted(judgments, key=lambda q: (judgments[q], q))[:N_QUERIES]
    judged = {q.doc_id for q in qrels if q.query_id in chosen}
    corpus = read_jsonl(src / "corpus.jsonl")
    docs = [d for d in corpus if d["_id"] in judged]
    docs += [d for d in corpus if d["_id"] not in judged][: N_DOCS - len(docs)]
    assert len(docs) == N_DOCS
    out = cluster.data / "msmarco-sub"
    (out / "qrels").mkdir(parents=True)
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [q for q in read_jsonl(src / "queries.jsonl") if q["_id"] in chosen]
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    with open(out / "qrels" / "test.tsv", "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["query-id", "corpus-id", "score"])
        w.writerows([q.query_id, q.doc_id, q.relevance] for q in qrels if q.query_id in chosen)
    (cluster.data / "small-batches.yaml").write_text(SMALL_BATCHES)
    (cluster.data / "trained-codec.yaml").write_text(TRAINED_CODEC)
    return out


def doc_ids(collection: Path) -> list[str]:
    return sorted(d["_id"] for d in read_jsonl(collection / "corpus.jsonl"))


def committed(index: str | Path) -> set[str]:
    """The names (without ``.json``) of the shards the job running into ``index`` (a path or a
    bucket URL) has committed so far."""
    filesystem, path = fs.resolve(str(index))
    return {posixpath.basename(p).removesuffix(".json") for p in filesystem.find(posixpath.join(path, "_staging", "committed")) if p.endswith(".json")}


def committed_shards(index: str | Path) -> int:
    return len(committed(index))


def wait_until(condition: Callable[[], bool], what: str, runner: JobRunner, job: str, timeout: float = JOB_TIMEOUT) -> None:
    """Poll ``condition`` while ``job`` runs; fail with the job's logs if it ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        status = runner.status(job)
        assert status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED), f"job {status.value} before {what}:\n{runner.logs(job)[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def finish(runner: JobRunner, job: str) -> str:
    """Wait for ``job``; its logs. Fails unless it SUCCEEDED."""
    t0 = time.monotonic()
    status = runner.wait(job, JOB_TIMEOUT)
    print(f"\n{job}: {status.value} after {time.monotonic() - t0:.1f} s more")
    logs = runner.logs(job)
    assert status == JobStatus.SUCCEEDED, f"{status.value}: {runner.info(job).message}\n{logs[-4000:]}"
    return logs


def encode_actor(cluster: LocalCluster):
    """The live encode actor (``ActorState``; one job runs at a time here), or None."""
    alive = [a for a in cluster.list_state("actors", filters=[("state", "=", "ALIVE")], detail=True) if "EncodeCompress" in a.class_name]
    assert len(alive) <= 1, alive
    return alive[0] if alive and alive[0].pid and alive[0].node_id else None


def encoding(cluster: LocalCluster, runner: JobRunner, job: str, batches: int = 2):
    """The job's encode actor once it has encoded ``batches`` batches (and is still alive:
    the job is hit in the middle of encoding), else None."""
    ray_job = runner.info(job).job_id
    if ray_job is None:
        return None
    tasks = cluster.list_state("tasks", filters=[("job_id", "=", ray_job), ("state", "=", "FINISHED")])
    if sum("EncodeCompress" in t.name for t in tasks) < batches:
        return None
    return encode_actor(cluster)


def assert_exactly_once(index: str | Path, expected: list[str], logs: str) -> None:
    """The committed index (a path or a bucket URL) holds every input passage once: manifest
    counts, the shards' doc ids, the catalog, no orphan shard and no staging left."""
    assert f"indexed {len(expected)}, rejected 0 (input rows {len(expected)})" in logs
    m = load_manifest(str(index))
    assert m.counts["passages"] == m.counts["indexed_documents"] == m.counts["input_rows"] == len(expected)
    ids = []
    for s in m.shards:
        with fs.open_file(fs.join(str(index), s.path)) as f:
            ids += pq.read_table(f, columns=["doc_id"])["doc_id"].to_pylist()
    assert sorted(ids) == expected
    shards = fs.list_files(fs.join(str(index), "shards"), include_tmp=True)
    assert sorted(posixpath.basename(p) for p in shards) == sorted(posixpath.basename(p) for s in m.shards for p in (s.path, s.codes))
    assert not fs.exists(fs.join(str(index), "_staging"))
    cat = Catalog(str(index))
    try:
        assert cat.totals()["passages"] == len(expected)
    finally:
        cat.close()


def independent_runs(collection: Path, fixture_cache) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Exact pooled and MaxSim search with plain transformers over the collection (title + " "
    + text, ≤ 256 tokens; queries ≤ 32; ``helpers.plain_token_vectors``, kept in the fixture
    cache) and numpy: {mode: {query id: [(doc id, score)]}}."""

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    docs = read_jsonl(collection / "corpus.jsonl")
    queries = read_jsonl(collection / "queries.jsonl")
    d_vecs = plain_token_vectors(fixture_cache, "cluster-docs", [" ".join(filter(None, [d.get("title"), d["text"]])) for d in docs], 256, batch=32)
    q_vecs = plain_token_vectors(fixture_cache, "cluster-queries", [q["text"] for q in queries], 32, batch=32)
    runs: dict[str, dict] = {"pooled": {}, "maxsim": {}}
    pooled_d = unit(np.stack([v.mean(0) for v in d_vecs]))
    for q, qv in zip(queries, q_vecs):
        scores = {"pooled": pooled_d @ unit(qv.mean(0)), "maxsim": np.array([(unit(qv) @ unit(v).T).max(1).sum() for v in d_vecs])}
        for mode, s in scores.items():
            runs[mode][q["_id"]] = [(docs[i]["_id"], float(s[i])) for i in np.argsort(-s)[:100]]
    return runs


@pytest.fixture(scope="module")
def recovered(cluster, runner, collection) -> dict:
    """The collection indexed by a submitted job (small blocks and shards) whose encode actor
    is killed after it has encoded two batches; the job's indexing tasks by node."""
    index = cluster.data / "index"
    job = runner.submit("index_corpus", [collection, index, "--config", cluster.data / "small-batches.yaml"], working_dir=ROOT)
    wait_until(lambda: encoding(cluster, runner, job) is not None, "2 batches encoded", runner, job)
    actor = encode_actor(cluster)
    os.kill(int(actor.pid), signal.SIGKILL)
    print(f"\nkilled encode actor {actor.actor_id[:8]} (pid {actor.pid}); {committed_shards(index)} shards committed")
    logs = finish(runner, job)
    tasks = cluster.list_state("tasks", filters=[("job_id", "=", runner.info(job).job_id)])
    nodes = Counter(t.node_id for t in tasks if t.node_id and any(stage in t.name for stage in STAGES))
    return {"index": index, "logs": logs, "actor": actor, "nodes": nodes}


def test_killed_encode_actor_is_restarted_and_nothing_is_lost(cluster, collection, recovered):
    assert_exactly_once(recovered["index"], doc_ids(collection), recovered["logs"])
    actor = cluster.list_state("actors", filters=[("actor_id", "=", recovered["actor"].actor_id)], detail=True)[0]
    assert int(actor.num_restarts) >= 1
    # the indexing stages ran on both worker nodes (the head has no CPU for them)
    workers = {n.node_id for n in cluster.workers()}
    assert len(workers) == 2 and set(recovered["nodes"]) == workers, recovered["nodes"]


def test_ann_eval_and_serve_jobs_on_the_recovered_index(cluster, runner, collection, recovered, fixture_cache):
    """build_ann, evaluate and serve, each a submitted job, on the index of the killed-actor
    job: its quality is that of an independent exact computation."""
    index = recovered["index"]
    logs = runner.run("build_ann", [index, "--partitions", 2, "--vectors", "pooled"], working_dir=ROOT, timeout=JOB_TIMEOUT)
    assert "BM25 partitions" in logs and len(load_manifest(str(index)).ann["pooled"]["partitions"]) == 2

    out = cluster.data / "eval.json"
    runner.run("evaluate", [index, "--dataset", collection, "--modes", "pooled,maxsim", "--json", out], working_dir=ROOT, timeout=JOB_TIMEOUT)
    figures = json.loads(out.read_text())["modes"]
    reference = independent_runs(collection, fixture_cache)
    qrels = read_qrels(collection / "qrels" / "test.tsv")
    expected = {mode: ndcg10(run, qrels) for mode, run in reference.items()}
    print(f"\ncluster eval: { ({m: f['nDCG@10'] for m, f in figures.items()}) }, independent: {expected}")
    assert figures["pooled"]["path"] == "ann" and figures["pooled"]["partitions"] == 2
    assert figures["pooled"]["overlap@10"] == 1.0  # P = 2 flat partitions: the exact ranking
    for mode in ("pooled", "maxsim"):
        assert figures[mode]["nDCG@10"] == pytest.approx(expected[mode], abs=0.01), mode

    # the service, deployed by a job that returns (--detach), answers over HTTP with the
    # independent exact ranking, through the proxy and (direct ingress) at each replica's port
    port = free_ports(1)[0]
    serve_yaml = cluster.data / "serve.yaml"
    serve_yaml.write_text(f"port: {port}\nproxy_location: HeadOnly\nmodes: [pooled, bm25]\ndirect_ingress: true\n")
    logs = runner.run("serve", [index, "--config", serve_yaml, "--detach"], working_dir=ROOT, timeout=JOB_TIMEOUT)
    try:
        client = SearchClient(f"http://127.0.0.1:{port}")
        queries = read_jsonl(collection / "queries.jsonl")
        bodies = client.search_batch([q["text"] for q in queries], 10, "pooled")
        assert all(b["path"] == "ann" and not b["degraded"] for b in bodies)
        overlap = [len({r["doc_id"] for r in b["results"]} & {d for d, _ in reference["pooled"][q["_id"]][:10]}) / 10 for q, b in zip(queries, bodies)]
        assert np.mean(overlap) >= 0.95, overlap
        assert client.search(queries[0]["text"], 10, "bm25")["results"]
        direct = re.search(r"direct ingress, each replica on its own port[^:]*: (.+)", logs)
        assert direct, logs[-3000:]
        urls = [u.strip() for u in direct.group(1).split(",")]
        assert urls and all(not u.endswith(f":{port}") for u in urls), urls  # not the proxy's port
        for url in urls:  # each replica alone: the proxy's answers, in full
            replica = SearchClient(url)
            assert [[r["doc_id"] for r in b["results"]] for b in replica.search_batch([q["text"] for q in queries], 10, "pooled")] == [
                [r["doc_id"] for r in b["results"]] for b in bodies
            ], url
            assert replica.session.post(url + "/search", json={"query": ""}, timeout=60).status_code == 422  # validated there too
    finally:  # Serve's REST API on the dashboard, as `serve shutdown -a URL` does
        requests.delete(f"{cluster.dashboard_url}/api/serve/applications/", headers=cluster.headers, timeout=60).raise_for_status()


def test_truncated_or_corrupted_shard_is_named_and_refused(cluster, runner, recovered, capsys):
    index = cluster.data / "damaged"
    shutil.copytree(recovered["index"], index)
    shards = sorted(load_manifest(str(index)).shards, key=lambda s: s.path)
    assert len(shards) >= 2
    truncated, flipped = index / shards[0].path, index / shards[-1].path
    truncated.write_bytes(truncated.read_bytes()[:-10])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))

    verify = ["--address", cluster.dashboard_url, "--ray-token", cluster.token, "--working-dir", str(ROOT), "verify", str(index)]
    assert submit_job.main(verify) == 1
    logs = capsys.readouterr().out
    named = {status: path for status, path in re.findall(r"(truncated|corrupted) +│ (\S+)", logs)}
    assert named == {"truncated": shards[0].path, "corrupted": shards[-1].path}, logs[-3000:]
    job = runner.submit("build_ann", [index, "--partitions", 1, "--vectors", "pooled", "--no-bm25"], working_dir=ROOT)
    assert runner.wait(job, JOB_TIMEOUT) == JobStatus.FAILED
    logs = runner.logs(job)
    assert shards[0].path in logs and "do not match the manifest" in logs, logs[-3000:]
    assert load_manifest(str(index)).version == load_manifest(str(recovered["index"])).version  # nothing committed


@pytest.fixture(scope="module")
def resubmitted(cluster, runner, collection, s3) -> dict:
    """The collection (small blocks and shards, the default codec) indexed by a job whose
    driver is killed after 3 shards are committed, then by the same job submitted again, whose
    encode actor's worker node is stopped once it has encoded two batches. Two faults in one
    run, each with its own test: the second job's work is what the stopped node takes down.
    Corpus and index live in a bucket only (moto's S3 server, tests/s3_endpoint.py, whose
    address every node's environment holds): the nodes share no directory for them."""
    bucket = s3.make_bucket("cluster")
    fs.write_bytes_atomic(f"{bucket}/msmarco-sub/corpus.jsonl", (collection / "corpus.jsonl").read_bytes())
    index = f"{bucket}/resubmitted"
    args = [f"{bucket}/msmarco-sub/corpus.jsonl", index, "--config", cluster.data / "trained-codec.yaml"]

    first = runner.submit("index_corpus", args, working_dir=ROOT)
    wait_until(lambda: committed_shards(index) >= 3, "3 committed shards", runner, first)
    driver = runner.info(first).driver_info
    os.killpg(os.getpgid(int(driver.pid)), signal.SIGKILL)  # the driver and its shell, at once
    first_status = runner.wait(first, 60)
    committed_before = committed(index)
    manifest_after_kill = fs.exists(fs.join(index, "manifest.json"))
    print(f"\nkilled the job's driver after {len(committed_before)} shards")

    second = runner.submit("index_corpus", args, working_dir=ROOT)
    wait_until(lambda: encoding(cluster, runner, second) is not None, "2 batches encoded", runner, second)
    actor = encode_actor(cluster)
    node = cluster.node_of(actor.node_id)
    assert node is not None and not node.head
    cluster.kill_node(node)
    print(f"stopped {node.name} (the encode actor's node); {committed_shards(index)} shards committed")
    logs = finish(runner, second)
    restarted = cluster.list_state("actors", filters=[("actor_id", "=", actor.actor_id)], detail=True)[0]
    return {
        "index": index,
        "expected": doc_ids(collection),
        "first_status": first_status,
        "committed_before": committed_before,
        "manifest_after_kill": manifest_after_kill,
        "logs": logs,
        "stopped": node,
        "actor": restarted,
    }


def test_killed_job_resubmitted_resumes_from_committed_shards(resubmitted):
    r = resubmitted
    assert r["first_status"] == JobStatus.FAILED and not r["manifest_after_kill"] and len(r["committed_before"]) >= 3
    assert "resuming the unfinished job" in r["logs"]
    assert "reusing the codecs the interrupted run trained" in r["logs"]  # its shards' codes stay decodable
    assert r["committed_before"] <= {posixpath.basename(s.path) for s in load_manifest(str(r["index"])).shards}  # kept, not redone
    assert_exactly_once(r["index"], r["expected"], r["logs"])


def test_stopped_worker_node_the_job_finishes_on_the_other(cluster, resubmitted):
    """Last in the module: it leaves the cluster one worker node short."""
    r = resubmitted
    assert not r["stopped"].alive and [n.node_id for n in cluster.workers()] != [r["stopped"].node_id]
    assert len(cluster.workers()) == 1
    assert int(r["actor"].num_restarts) >= 1 and r["actor"].node_id == cluster.workers()[0].node_id  # finished on the other node
    assert_exactly_once(r["index"], r["expected"], r["logs"])
