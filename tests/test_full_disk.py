"""A disk that fills up (issue 39): `mvr index`, `mvr add` and `mvr compact`, each run as a
user runs it against a size-limited tmpfs whose space runs out while the job writes its
shards, end in one line ``error: no space left on device writing PATH: …`` (exit status 2,
no traceback) and commit nothing: the index already there keeps its version and its files,
answers the same (to a reader opened before and to a new one) and `mvr verify` finds it
intact; no half-written file is left. With the space back, the same job run again completes,
resuming what the failed run staged, with the right counts. And the commit's last write,
the ``manifest.json`` pointer, refused by a full disk: the version is committed all the same.

Mounting a tmpfs needs root on Linux: without it every test here skips and says so."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from helpers import mvr, read_jsonl

N_DOCS = 60  # passages a corpus: ~2.2 MB of int8 codes, far more than a full disk leaves
LEAVE = 256 << 10  # bytes left free before a job that must fail: its staging fits, its shard does not
DISK = "48m"
PAGE = 4096  # tmpfs allocates whole pages
CODECS = {"compress.codec": "int8", "compress.pooled_codec": "int8"}  # untrained: no codec training to wait for
QUERIES = ["what is the manhattan project", "how long does it take to become a nurse", "symptoms of the flu"]


@dataclass
class Disk:
    """A mounted tmpfs and a ballast file that takes its free space."""

    path: Path

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> None:
        """Leave ``leave`` bytes free (rounded to pages): the ballast takes the rest."""
        self.give_back()
        with open(self.path / "ballast", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, self.free() - leave)
        assert abs(self.free() - leave) <= PAGE, (self.free(), leave)

    def give_back(self) -> None:
        (self.path / "ballast").unlink(missing_ok=True)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Disk]:
    """A tmpfs of ``size`` mounted at ``path`` for the block; the test skips, saying why, where
    it cannot be mounted."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip(f"a size-limited file system (tmpfs) is mounted only as root on Linux; this runs as uid {os.geteuid()} on {sys.platform}")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs at {path}: {r.stderr.strip() or f'mount exited {r.returncode}'}")
    try:
        yield Disk(path)
    finally:
        gc.collect()  # readers' memory maps of the shards
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=True)  # still mapped somewhere: detached now, freed when unmapped


def half_written(root: Path) -> list[str]:
    """Temporary files of atomic writes under ``root`` (a write that never finished)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name)


def files(index: Path) -> dict[str, int]:
    """Every file under the index: relative path → bytes."""
    return {str(p.relative_to(index)): p.stat().st_size for p in sorted(index.rglob("*")) if p.is_file()}


def out_of_space(r: subprocess.CompletedProcess, under: Path) -> str:
    """The job failed with status 2 and, as its last line on stderr and its only error, one
    line saying the disk is full while writing a file under ``under``; that file."""
    err = r.stderr.decode("utf-8", "backslashreplace")
    lines = err.rstrip("\n").splitlines()
    assert r.returncode == 2, (r.returncode, err[-3000:])
    assert "Traceback" not in err and "max_errored_blocks" not in err, err[-3000:]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], err[-3000:]
    m = re.fullmatch(r"error: no space left on device writing (?P<path>\S+): free space there and run the command again", lines[-1])
    assert m, lines[-1]
    assert m.group("path").startswith(f"{under}/"), (m.group("path"), under)
    return m.group("path")


_ENCODER: dict = {}  # the query encoder, loaded once for every search here


def top10(index: Path) -> list[list[tuple[str, float]]]:
    """The exact top-10 of each of QUERIES, searched through a new reader of the index."""
    with reader(index) as s:
        return answers(s)


def reader(index: Path):
    from mvr.pipeline.config import SearchConfig
    from mvr.pipeline.retrieval.searcher import Searcher

    s = Searcher(str(index), ["maxsim"], SearchConfig(exact=True), _ENCODER.get("encoder"))
    _ENCODER.setdefault("encoder", s.query_encoder.encoder)
    return s


def answers(searcher) -> list[list[tuple[str, float]]]:
    return [r.hits() for r in searcher.search(QUERIES, 10, "maxsim")]


def same(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> None:
    assert [[d for d, _ in q] for q in a] == [[d for d, _ in q] for q in b]
    np.testing.assert_allclose([s for q in a for _, s in q], [s for q in b for _, s in q], atol=1e-5)


def intact(index: Path, version: int, listed: dict[str, int], before: list, old_reader, workspace: str | None = None) -> None:
    """Nothing of the failed job was committed to ``index``: its version and its files as they
    were (``listed``), new files only in the job's own workspace (``workspace``: the resumable
    state of an add); `mvr verify` finds it intact; a reader opened before and a new one
    answer as before."""
    import mvr as api
    from mvr.storage.manifest import load_manifest

    assert load_manifest(str(index)).version == version
    now = files(index)
    assert {p: n for p, n in now.items() if p in listed or workspace is None or not p.startswith(workspace)} == listed
    report = api.verify(str(index))
    assert report.ok, report.problems
    same(answers(old_reader), before)
    same(top10(index), before)


def _write(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


@pytest.fixture(scope="module")
def full(tmp_path_factory, datasets, ray_address):
    """{disk, index (A: the first N_DOCS passages, committed), corpora, env for `mvr`}: A on a
    tmpfs, built in process; `mvr` processes join this session's Ray cluster."""
    import mvr as api
    from mvr.pipeline.config import IndexConfig

    root = tmp_path_factory.mktemp("full-disk")
    docs = read_jsonl(datasets / "msmarco-sample" / "corpus.jsonl")[: 2 * N_DOCS]
    corpus_a, corpus_b = _write(root / "a.jsonl", docs[:N_DOCS]), _write(root / "b.jsonl", docs[N_DOCS:])
    config = IndexConfig.from_yaml(None, **CODECS)
    with tmpfs(root / "disk", DISK) as disk:
        index = disk.path / "A"
        api.index(corpus_a, str(index), config, log=lambda _: None)
        yield {"disk": disk, "index": index, "a": corpus_a, "b": corpus_b, "docs": docs, "config": config, "env": {"RAY_ADDRESS": ray_address}}


@pytest.mark.ray
def test_index_on_a_full_disk_commits_nothing_and_reruns(full):
    import mvr as api
    from mvr.storage.manifest import load_manifest, read_manifest

    disk, index, target = full["disk"], full["index"], full["disk"].path / "B"
    version, listed, before = load_manifest(str(index)).version, files(index), top10(index)
    with reader(index) as old:
        disk.fill(LEAVE)
        r = mvr("index", full["b"], target, "--codec", "int8", "--pooled-codec", "int8", env=full["env"])
        out_of_space(r, target)
        assert read_manifest(str(target)) is None  # nothing committed: no manifest, no version
        assert not (target / "manifest.json").exists() and not list(target.glob("versions/*"))
        assert half_written(disk.path) == []
        intact(index, version, listed, before, old)
    disk.give_back()
    logs: list[str] = []
    result = api.index(full["b"], str(target), full["config"], log=logs.append)
    assert any("resuming the unfinished job" in line for line in logs), logs
    assert result.manifest.version == 1 and result.manifest.counts["passages"] == N_DOCS
    assert api.verify(str(target)).ok and half_written(disk.path) == []
    shutil.rmtree(target)  # its space, for the next jobs


@pytest.mark.ray
def test_add_on_a_full_disk_commits_nothing_and_reruns(full):
    import mvr as api
    from mvr.storage.manifest import load_manifest

    disk, index = full["disk"], full["index"]
    base = load_manifest(str(index))
    listed, before = files(index), top10(index)
    with reader(index) as old:
        disk.fill(LEAVE)
        r = mvr("add", index, full["b"], env=full["env"])
        out_of_space(r, index / "adds")
        assert half_written(disk.path) == []
        intact(index, base.version, listed, before, old, workspace="adds/")  # the add's staged state alone is new
    disk.give_back()
    logs: list[str] = []
    result = api.add(str(index), full["b"], log=logs.append)
    assert any("resuming the unfinished job" in line for line in logs), logs
    m = result.manifest
    assert m.version == base.version + 1 and m.counts["passages"] == base.counts["passages"] + N_DOCS
    assert api.verify(str(index)).ok and half_written(disk.path) == []
    added = full["docs"][N_DOCS]
    with reader(index) as s:
        assert s.search([added["text"]], 1, "maxsim")[0].hits()[0][0] == added["_id"]


@pytest.mark.ray
def test_compact_on_a_full_disk_commits_nothing_and_reruns(full):
    import mvr as api
    from mvr.storage.manifest import load_manifest

    disk, index = full["disk"], full["index"]
    gone = [d["_id"] for d in full["docs"][:10]]
    base = api.delete(str(index), gone, log=lambda _: None).manifest
    listed, before = files(index), top10(index)
    with reader(index) as old:
        disk.fill(LEAVE)
        r = mvr("compact", index, env=full["env"])
        out_of_space(r, index / "compacted")
        assert half_written(disk.path) == []
        intact(index, base.version, listed, before, old)  # not even a file of the compaction's own
    disk.give_back()
    m = api.compact(str(index), log=lambda _: None).manifest
    assert m.version == base.version + 1 and not m.tombstones
    assert m.counts["passages"] == base.counts["passages"] - len(gone) and m.counts["deleted_passages"] == 0
    assert api.verify(str(index)).ok and half_written(disk.path) == []
    same(top10(index), before)  # the deleted passages were already left out
    assert load_manifest(str(index)).version == m.version


# --- the manifest pointer: the commit's last write (no Ray; milliseconds) -----------------------


def _empty() -> "object":
    from mvr.storage.manifest import Manifest

    return Manifest(config={}, model={}, input={}, counts={}, dim=8, codecs={})


def test_a_first_commit_whose_pointer_finds_the_disk_full_is_committed(tmp_path):
    from mvr.storage.manifest import commit_manifest, load_manifest

    with tmpfs(tmp_path / "disk", "1m") as disk:
        index = disk.path / "idx"
        disk.fill(2 * PAGE)  # the shard list and the version file fit, the pointer does not
        assert commit_manifest(str(index), _empty(), based_on=None).version == 1
        assert not (index / "manifest.json").exists() and half_written(disk.path) == []
        assert load_manifest(str(index)).version == 1  # read from the version file, the commit point


def test_a_commit_whose_pointer_finds_the_disk_full_is_committed(tmp_path):
    from mvr.storage.manifest import commit_manifest, load_manifest

    with tmpfs(tmp_path / "disk", "1m") as disk:
        index = disk.path / "idx"
        commit_manifest(str(index), _empty(), based_on=None)
        disk.fill(PAGE)  # the next version file fits (its shard list is the same file), the pointer does not
        assert commit_manifest(str(index), load_manifest(str(index))).version == 2
        assert json.loads((index / "manifest.json").read_bytes())["version"] == 1 and half_written(disk.path) == []
        assert load_manifest(str(index)).version == 2  # readers follow the versions past the pointer
        disk.fill(0)
        with pytest.raises(OSError, match="No space left on device") as e:
            commit_manifest(str(index), load_manifest(str(index)))  # the version file itself does not fit: nothing committed
        assert e.value.filename == str(index / "versions" / "000000000003.json")
        assert load_manifest(str(index)).version == 2 and half_written(disk.path) == []


@pytest.mark.parametrize(
    "exc, line",
    [
        (
            OSError(28, "No space left on device", "/d/idx/shards/x.codes.arrow"),
            "no space left on device writing /d/idx/shards/x.codes.arrow: free space there and run the command again",
        ),
        (
            RuntimeError("OSError: [Errno 28] No space left on device: '/d/idx/x'"),
            "no space left on device writing /d/idx/x: free space there and run the command again",
        ),
        (OSError(28, "No space left on device"), "no space left on device: free space and run the command again"),
        (OSError(122, "Disk quota exceeded", "/d/x"), "disk quota exceeded writing /d/x: free space there and run the command again"),
        (
            OSError('IO Error: Could not write file "/d/c.duckdb": No space left on device'),
            'no space left on device (IO Error: Could not write file "/d/c.duckdb": No space left on device): free space and run the command again',
        ),
    ],
)
def test_a_full_disk_is_one_line_saying_what_to_do(exc, line):
    from mvr.jobs.errors import describe

    assert describe(exc) == line
