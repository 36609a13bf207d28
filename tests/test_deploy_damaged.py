"""A damaged partition at deploy (issue 39): `mvr serve` refuses an index whose partition
files are damaged with the one-line error search gives for the same damage, starts no
replica loop and leaves nothing behind; a service already up keeps serving its version.

- A truncated ANN file is found by a stat of the files the layout loads, before Ray or Serve
  starts anything (`mvr serve`, as a user runs it).
- A file changed in place (its size right: here a tombstones file, read and checked whole by
  every partition) is found by the partition replica as it loads: that replica starts once
  (no restart), the deploy fails with search's error, and what it started is deleted: on a
  first deploy everything, on a switch the new version's apps while the old keeps answering."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from cluster import free_ports
from helpers import mvr, read_jsonl

pytestmark = [pytest.mark.ray, pytest.mark.slow]

QUERY = "what is the manhattan project"


def search_error(index: str) -> str:
    """The one line `mvr search` prints for the index (as in-process search raises it)."""
    from mvr.jobs.errors import describe
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.integrity import IntegrityError

    with pytest.raises(IntegrityError) as e:
        Searcher(index)
    return describe(e.value)


def owned_apps(app_name: str) -> dict[str, str]:
    """This service's Serve applications and their status."""
    from ray import serve

    return {a: str(s.status.value) for a, s in serve.status().applications.items() if a == app_name or a.startswith(f"{app_name}-")}


def replicas_started(address: str, app: str) -> list[str]:
    """The states of every replica actor ever started for ``app``'s Partition deployments."""
    from ray.util.state import list_actors

    actors = list_actors(address=address, filters=[("class_name", "=", f"ServeReplica:{app}:Partition0")], limit=1000, raise_on_missing_output=False)
    return [a.state for a in actors]


def corrupt_in_place(path: Path) -> bytes:
    """Flip the bytes of ``path`` (its size kept); its old bytes."""
    data = path.read_bytes()
    path.write_bytes(bytes(b ^ 0xFF for b in data))
    return data


def test_serve_refuses_a_truncated_partition_file_before_starting_anything(msmarco_100, tmp_path, ray_address):
    from mvr.storage.manifest import load_manifest

    index = tmp_path / "index"
    shutil.copytree(msmarco_100, index)
    part = load_manifest(str(index)).ann["tokens"]["partitions"][0]
    ann_file = next(index / part["path"] / name for name in part["files"] if name.startswith("index/") and part["files"][name]["bytes"] > 1000)
    ann_file.write_bytes(ann_file.read_bytes()[:1000])
    expected = search_error(str(index))
    assert "truncated" in expected and str(ann_file.relative_to(index)) in expected
    t0 = time.monotonic()
    r = mvr("serve", index, "--port", str(free_ports(1)[0]), "--detach", env={"RAY_ADDRESS": ray_address}, timeout=300)
    seconds = time.monotonic() - t0
    err = r.stderr.decode()
    assert r.returncode == 2, err[-3000:]
    assert "Traceback" not in err and err.rstrip("\n").splitlines()[-1] == f"error: {expected}", err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("error:")] == [f"error: {expected}"]
    assert owned_apps("mvr") == {}  # no application (of the default name) was started
    print(f"\nrefused in {seconds:.1f} s (the command, its imports included)")


def test_a_partition_that_fails_to_load_fails_the_deploy_once(msmarco_100, tmp_path, ray_address, datasets, serve_port):
    from ray import serve

    from mvr.jobs.errors import describe
    from mvr.pipeline.config import ServeConfig
    from mvr.pipeline.indexing.updates import delete_documents
    from mvr.pipeline.serving.app import ReplicaStartError, deploy, shutdown
    from mvr.pipeline.serving.client import SearchClient
    from mvr.storage.manifest import load_manifest

    index = str(tmp_path / "index")
    shutil.copytree(msmarco_100, index)
    config = ServeConfig.model_validate({"port": serve_port, "app_name": "damaged", "modes": ["maxsim"]})

    def damaged_version(doc_id: str) -> tuple[int, Path, bytes, str]:
        """Commit a deletion, then change its tombstones file in place: (version, file, its bytes, search's error)."""
        m = delete_documents(index, [doc_id], log=lambda _: None).manifest
        path = Path(index) / m.tombstones["path"]
        good = corrupt_in_place(path)
        return m.version, path, good, search_error(index)

    def refused(expected: str) -> ReplicaStartError:
        t0 = time.monotonic()
        with pytest.raises(ReplicaStartError) as e:
            deploy(index, config, log=print)
        print(f"\ndeploy refused in {time.monotonic() - t0:.1f} s: {e.value}")
        assert describe(e.value) == expected  # the CLI's line: the same as search's
        assert e.value.deployment == "Partition0"
        time.sleep(3.0)  # time for a restart, were there one
        assert replicas_started(ray_address, e.value.app) == ["DEAD"]  # started once, not again
        assert e.value.app not in serve.status().applications
        return e.value

    try:
        # a first deploy: nothing was served, nothing stays
        _, path, good, expected = damaged_version(read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[0]["_id"])
        assert "corrupted" in expected and str(path.relative_to(index)) in expected
        refused(expected)
        assert owned_apps(config.app_name) == {}
        # repaired, it deploys; then a damaged next version leaves the served one answering
        path.write_bytes(good)
        d = deploy(index, config, log=print)
        client = SearchClient(d.url)
        before = client.search(QUERY, 10, "maxsim")
        assert before["version"] == d.version and not before["degraded"]
        serving = owned_apps(config.app_name)
        version, _, _, expected = damaged_version(before["results"][0]["doc_id"])
        assert version == d.version + 1
        refused(expected)
        assert owned_apps(config.app_name) == serving and set(serving.values()) == {"RUNNING"}
        after = client.search(QUERY, 10, "maxsim")
        assert after["version"] == d.version and after["results"] == before["results"] and not after["degraded"]
        assert load_manifest(index).version == version  # the index is ahead; the service stays on what it could load
    finally:
        shutdown(config)
