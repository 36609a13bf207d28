"""Indexes in object storage (issue 50), against an S3 endpoint on loopback (moto's server,
tests/s3_endpoint.py; its address reaches Ray's workers through the environment):

- an ``s3://`` URL without s3fs installed is one error line naming the extra;
- a store that ignores conditional writes (a proxy that strips ``If-None-Match``) is refused
  before any work, with the setting that allows a single writer; the same store with
  ``storage.single_writer`` is recorded as such;
- a corpus in the bucket indexed into the bucket: verified, and the same shards, codecs and
  answers as the same corpus indexed on local disk;
- ``mvr add``, two ``mvr delete`` processes racing for one version (both land: the store
  refuses the loser's conditional PUT and it re-applies its change) and ``mvr compact`` on
  it, verified after each;
- the catalog a filtered search opens, and the shards' codes it maps, come from the node's
  disk cache: no temporary file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import fsspec
import pytest

import mvr
from helpers import read_jsonl
from mvr.pipeline.config import AnnBuildConfig, IndexConfig
from mvr.storage import fs, local_cache
from mvr.storage.manifest import ConditionalWritesUnsupported, commit_guard, load_manifest
from mvr.storage.verify import expected_files

ROOT = Path(__file__).resolve().parents[1]


def _corpus(datasets: Path, picks: range) -> str:
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    return "".join(json.dumps(docs[i]) + "\n" for i in picks)


def test_an_s3_url_without_s3fs_names_the_extra():
    """``mvr stats s3://…`` where s3fs cannot be imported: one line, the extra to install."""
    code = "import sys; sys.modules['s3fs'] = None; from mvr.jobs.cli import main; sys.exit(main(['stats', 's3://bucket/index']))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=120)
    assert r.returncode == 2, r.stderr.decode()[-2000:]
    (line,) = r.stderr.decode().strip().splitlines()
    assert re.fullmatch(r"error: s3://bucket/index/\S*: s3:// URLs need the s3fs package: pip install 'mvr\[s3\]'", line), line


def test_a_store_that_ignores_conditional_writes_is_refused_before_any_work(s3, datasets, monkeypatch):
    from s3_endpoint import StrippingProxy

    bucket = s3.make_bucket("probe")
    assert commit_guard(f"{bucket}/direct") == {"commits": "exclusive-create", "probed": True}  # moto refuses the second create (412)
    proxy = StrippingProxy(s3.url)
    try:
        monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": proxy.url})  # this process's s3fs, through the proxy
        fs.write_bytes_atomic(f"{bucket}/corpus.jsonl", _corpus(datasets, range(2)).encode())
        with pytest.raises(ConditionalWritesUnsupported, match=r"set storage\.single_writer: true if only one writer"):
            mvr.index(f"{bucket}/corpus.jsonl", f"{bucket}/stripped", IndexConfig(), log=lambda _: None)
        assert proxy.stripped  # the conditional PUT was sent, and its condition dropped
        assert fs.list_files(f"{bucket}/stripped", include_tmp=True) == []  # nothing written, the probe removed
        assert commit_guard(f"{bucket}/stripped", single_writer=True) == {"commits": "single-writer", "probed": True}
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def indexed(s3, datasets, tmp_path_factory, ray_address) -> dict:
    """Ten msmarco-sample documents in the bucket, indexed into it with the defaults, and
    indexed from the same bytes on local disk."""
    bucket = s3.make_bucket("indexes")
    corpus = _corpus(datasets, range(10))
    fs.write_bytes_atomic(f"{bucket}/corpus.jsonl", corpus.encode())
    local = tmp_path_factory.mktemp("local")
    (local / "corpus.jsonl").write_text(corpus)
    remote = mvr.index(f"{bucket}/corpus.jsonl", f"{bucket}/index", IndexConfig(), log=lambda _: None).manifest
    here = mvr.index(str(local / "corpus.jsonl"), str(local / "index"), IndexConfig(), log=lambda _: None).manifest
    return {"bucket": bucket, "index": f"{bucket}/index", "remote": remote, "local": here, "local_index": str(local / "index")}


@pytest.mark.ray
def test_an_index_in_the_bucket_equals_the_same_index_on_disk(indexed, datasets):
    remote, local = indexed["remote"], indexed["local"]
    assert mvr.verify(indexed["index"]).ok
    assert remote.storage == {"commits": "exclusive-create", "probed": True} and local.storage == {"commits": "exclusive-create", "probed": False}
    assert [(s.sha256, s.codes_sha256) for s in remote.shards] == [(s.sha256, s.codes_sha256) for s in local.shards]
    assert {g: c["sha256"] for g, c in remote.codecs.items()} == {g: c["sha256"] for g, c in local.codecs.items()}
    queries = [q["text"] for q in read_jsonl(datasets / "msmarco-sample" / "queries.jsonl")[:5]]
    for mode in ("maxsim", "pooled"):
        with mvr.open(indexed["index"]) as a, mvr.open(indexed["local_index"]) as b:
            assert [r.hits() for r in a.search(queries, 5, mode)] == [r.hits() for r in b.search(queries, 5, mode)], mode


@pytest.mark.ray
def test_add_concurrent_deletes_and_compact_in_the_bucket(indexed, datasets, tmp_path, monkeypatch):
    index, bucket = indexed["index"], indexed["bucket"]
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")
    fs.write_bytes_atomic(f"{bucket}/more.jsonl", _corpus(datasets, range(10, 13)).encode())
    m = mvr.add(index, f"{bucket}/more.jsonl", log=lambda _: None).manifest
    assert m.counts["passages"] == 13 and mvr.verify(index).ok

    # two `mvr delete` processes that read the same version and meet before their commits
    # (tests/commit_faults.py --barrier): the store refuses the loser's conditional PUT of the
    # version the winner created, and the loser re-applies its deletion on top: both land
    base, gone = m.version, [docs[0]["_id"], docs[1]["_id"]]
    procs = []
    for i, doc_id in enumerate(gone):
        (tmp_path / f"ids{i}.txt").write_text(doc_id + "\n")
        cmd = [
            sys.executable,
            str(ROOT / "tests" / "commit_faults.py"),
            "--barrier",
            f"{tmp_path / 'barrier'}:2",
            "delete",
            index,
            "--ids",
            str(tmp_path / f"ids{i}.txt"),
        ]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("applying the change again" in " ".join(o.split()) for o in outs) == 1, outs  # exactly one lost the race and re-applied (lines wrapped)
    m = load_manifest(index)
    assert m.version == base + 2 and m.counts["deleted_passages"] == 2 and mvr.verify(index).ok
    assert [h["operation"] for h in m.history[-2:]] == ["delete", "delete"]

    m = mvr.compact(index, log=lambda _: None).manifest
    assert (m.counts["passages"], m.counts.get("deleted_passages", 0)) == (11, 0) and mvr.verify(index).ok
    # the filtered search opens the catalog from the node's cache, not a temporary copy (the
    # cache starts here: this small index's compaction ran in this process, and what it read
    # for its rebuild, the old partition's trained index, is cached as well)
    cache, scratch = tmp_path / "cache", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv(local_cache.CACHE_ENV, str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    m = mvr.build_ann(index, AnnBuildConfig(backend="codec-ivf", partitions=1, vectors=["tokens"]), log=lambda _: None).manifest  # no training: instant
    with mvr.open(index) as searcher:
        (hit,) = searcher.search([docs[11]["text"]], 3, "maxsim", filter=f"doc_id = '{docs[11]['_id']}'")
    assert hit.hits()[0][0] == docs[11]["_id"]
    # and the shards' codes and the ANN partition's files (its lists mapped) from the same
    # cache, each named by its sha256: no other entry but the catalog's, nothing staged left,
    # and no temporary file
    cached = {p.name for p in (cache / local_cache.FILES_DIR).iterdir()}
    codes = {f"{s.codes_sha256}.arrow" for s in m.shards}
    (part,) = m.ann["tokens"]["partitions"]
    ann = {f"{f['sha256']}{os.path.splitext(n)[1]}" for n, f in part["files"].items() if n.startswith("index/")}
    listed = {f"{e.sha256}{os.path.splitext(e.path)[1]}" for e in expected_files(m)}
    assert codes | ann <= cached and len(cached - listed) == 1
    # (torch makes its per-user compile cache there when transformers' model code is first imported)
    assert not list((cache / local_cache.STAGING_DIR).iterdir()) and [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")] == []
