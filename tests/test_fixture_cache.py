"""The suite's cache of built indexes across runs (tests/fixture_cache.py): an entry is reused
only while its key (recipe, model, sources, libraries) is the same and it checks out as
``mvr verify`` would; a changed key, a damaged, written-to or half-written entry, and
``--fresh-fixtures`` each build it again. The entries here are copies of the real
``msmarco_100`` index, in a cache of the test's own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixture_cache import ENTRY, KEEP, FixtureCache, sources_digest

ENV = {"model": "m0", "sources": "s0", "libraries": {"faiss-cpu": "1"}, "blas": "SkylakeX"}


@pytest.fixture
def copies(msmarco_100):
    """A build function copying ``msmarco_100``, and the list of paths it built."""
    built: list[Path] = []

    def build(path: Path) -> None:
        shutil.copytree(msmarco_100, path)
        built.append(path)

    return build, built


def test_an_entry_is_built_once_and_reused_by_a_later_run(tmp_path, copies):
    build, built = copies
    first = FixtureCache(tmp_path, ENV, log=lambda _: None).get("idx", {"a": 1}, build)
    again = FixtureCache(tmp_path, dict(ENV), log=lambda _: None).get("idx", {"a": 1}, build)  # another run: a new object
    assert first == again and len(built) == 1
    recorded = json.loads((first.parent / ENTRY).read_text())
    assert recorded["recipe"] == {"a": 1} and recorded["environment"] == ENV and recorded["files"]["manifest.json"] > 0


@pytest.mark.parametrize("change", ["recipe", "model", "sources", "libraries", "blas"])
def test_a_change_to_any_part_of_the_key_builds_again(tmp_path, copies, change):
    build, built = copies
    FixtureCache(tmp_path, ENV, log=lambda _: None).get("idx", {"a": 1}, build)
    env, recipe = dict(ENV), {"a": 1}
    if change == "recipe":
        recipe = {"a": 2}
    else:
        env[change] = {"faiss-cpu": "2"} if change == "libraries" else "other"
    other = FixtureCache(tmp_path, env, log=lambda _: None).get("idx", recipe, build)
    assert len(built) == 2 and other.parent.name != built[0].parent.name


def test_the_sources_digest_follows_every_source_file(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "one.py").write_text("z = 3\n")
    sources = ("pkg", "one.py")
    before = sources_digest(tmp_path, sources)
    assert sources_digest(tmp_path, sources) == before
    (tmp_path / "pkg" / "notes.txt").write_text("not a source")
    assert sources_digest(tmp_path, sources) == before
    for f in ("pkg/sub/b.py", "one.py"):
        (tmp_path / f).write_text((tmp_path / f).read_text() + "w = 4\n")
        assert sources_digest(tmp_path, sources) != before
        before = sources_digest(tmp_path, sources)
    (tmp_path / "pkg" / "sub" / "c.py").write_text("")  # a new module
    assert sources_digest(tmp_path, sources) != before


def test_the_sources_digest_keeps_comments_and_docstrings_out(tmp_path):
    """An edit of a comment or a docstring keeps the digest (no cold run for it); the same
    text as code, or a string that is not a docstring, changes it."""
    code = 'def f(x):\n    """Doc."""\n    return x + 1  # one\n'
    (tmp_path / "a.py").write_text(code)
    before = sources_digest(tmp_path, ("a.py",))
    for same in (code.replace("# one", "# two"), code.replace("Doc.", "Other words."), '"""Module."""\n' + code):
        (tmp_path / "a.py").write_text(same)
        assert sources_digest(tmp_path, ("a.py",)) == before, same
    for other in (code.replace("x + 1", "x + 2"), code.replace('"""Doc."""', '"""Doc."""\n    y = "Doc."'), code + "\nclass C:\n    pass\n"):
        (tmp_path / "a.py").write_text(other)
        assert sources_digest(tmp_path, ("a.py",)) != before, other
    (tmp_path / "a.py").write_text("def f(:\n")  # not Python: its bytes
    broken = sources_digest(tmp_path, ("a.py",))
    (tmp_path / "a.py").write_text("def f(:  \n")
    assert sources_digest(tmp_path, ("a.py",)) != broken


def _damage_a_shard(index: Path) -> None:
    shard = next(p for p in sorted((index / "shards").iterdir()) if p.stat().st_size > 100)
    data = bytearray(shard.read_bytes())
    data[50] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))


def _commit_in_place(index: Path) -> None:
    from mvr.storage.manifest import commit_manifest, load_manifest

    commit_manifest(str(index), load_manifest(str(index)))  # a new version, as a test writing into the fixture would


@pytest.mark.parametrize(
    "harm",
    [_damage_a_shard, _commit_in_place, lambda index: (index / "stray.tmp").write_text("x"), lambda index: (index.parent / ENTRY).unlink()],
    ids=["damaged", "committed-in-place", "extra-file", "unfinished"],
)
def test_a_damaged_written_or_unfinished_entry_is_built_again(tmp_path, copies, harm):
    build, built = copies
    logged: list[str] = []
    cache = FixtureCache(tmp_path, ENV, log=logged.append)
    index = cache.get("idx", {"a": 1}, build)
    harm(index)
    assert FixtureCache(tmp_path, ENV, log=logged.append).get("idx", {"a": 1}, build) == index
    assert len(built) == 2 and any("rebuilding" in line for line in logged), logged
    from mvr.storage.verify import verify_index

    assert verify_index(str(index)).ok


def test_a_killed_build_leaves_nothing_that_is_used(tmp_path, copies, msmarco_100):
    """A build killed half-way leaves its temporary directory (never the entry's name): the
    next run removes it and builds."""
    build, built = copies
    code = (
        "import os, shutil, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from fixture_cache import FixtureCache\n"
        "def build(path):\n"
        "    shutil.copytree(sys.argv[3], path)\n"
        "    os.kill(os.getpid(), 9)\n"
        f"FixtureCache(sys.argv[2], {ENV!r}).get('idx', {{'a': 1}}, build)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path), msmarco_100], capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr[-2000:]
    left = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(left) == 1 and left[0].startswith(".idx-") and ".tmp-" in left[0], left
    index = FixtureCache(tmp_path, ENV, log=lambda _: None).get("idx", {"a": 1}, build)
    assert len(built) == 1 and [p.name for p in tmp_path.iterdir() if p.is_dir()] == [index.parent.name]


def test_fresh_fixtures_builds_each_entry_once_in_a_run(tmp_path, copies):
    build, built = copies
    FixtureCache(tmp_path, ENV, log=lambda _: None).get("idx", {"a": 1}, build)
    marks = tmp_path / "run-marks"
    for _ in range(2):  # the run's two workers
        FixtureCache(tmp_path, ENV, fresh=True, fresh_marks=marks, log=lambda _: None).get("idx", {"a": 1}, build)
    assert len(built) == 2


def test_old_entries_of_a_name_are_pruned(tmp_path, copies):
    build, _ = copies
    cache = FixtureCache(tmp_path, ENV, log=lambda _: None)
    entries = []
    for i in range(KEEP + 2):
        entries.append(cache.get("idx", {"a": i}, build).parent)
        os.utime(entries[-1] / ENTRY, (1_000_000 + i, 1_000_000 + i))  # older first
    cache.get("other", {"a": 0}, build)
    kept = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("idx-"))
    assert kept == sorted(e.name for e in entries[-KEEP:]) and (tmp_path / f"{cache.builds[-1]}").exists()


def test_a_reference_is_computed_once_and_recomputed_when_its_file_is_damaged(tmp_path):
    """``arrays``: an independent reference (named arrays) kept as an entry is returned equal
    by a later run without computing it again; a changed byte in its file computes it again."""
    calls: list[int] = []

    def compute() -> dict[str, np.ndarray]:
        calls.append(1)
        return {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(["x", "y"])}

    first = FixtureCache(tmp_path, ENV, log=lambda _: None).arrays("ref", {"r": 1}, compute)
    again = FixtureCache(tmp_path, dict(ENV), log=lambda _: None).arrays("ref", {"r": 1}, compute)
    assert len(calls) == 1 and again.keys() == first.keys() == {"a", "b"}
    assert np.array_equal(again["a"], first["a"]) and again["a"].dtype == np.float32 and list(again["b"]) == ["x", "y"]
    (stored,) = tmp_path.glob("ref-*/arrays.npz")
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    redone = FixtureCache(tmp_path, dict(ENV), log=lambda _: None).arrays("ref", {"r": 1}, compute)
    assert len(calls) == 2 and np.array_equal(redone["a"], first["a"])
