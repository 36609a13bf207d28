"""The test suite's cache of built indexes, across runs: a whole-collection index (minutes of
both cores to encode) is built once and read by every later run until something that decides
its bytes changes.

An entry is ``<cache>/<name>-<key>/``: the built index in ``index/`` and ``entry.json``, written
last, naming the key, the recipe and every file of the index with its size. The key is a
sha256 over

- the recipe: what the fixture builds from (the dataset files' content hashes, the index and
  ANN / BM25 configurations, the entry it starts from), as the fixture states it;
- the packaged model checkpoint's fingerprint (``checkpoint.fingerprint``: its files' sha256);
- every source file that produces vectors, codes, shards, partitions and the manifest
  (``SOURCES``), and this file: their code (``code_sha256``), so that an edit of a comment or
  a docstring keeps the entries;
- the versions of the libraries that compute them (``LIBRARIES``), and the OpenBLAS kernels
  FAISS runs (``operators/openblas.py``: their float rounding is in a trained codebook).

Reading an entry checks it as ``mvr verify`` does (every file the manifest lists, against its
size and sha256), and that the index holds exactly the files it was built with at the same
manifest version (a test that wrote into it in place is caught); an entry that fails, or a
build that never finished (no ``entry.json``: the build's temporary directory is renamed into
place only when whole), is removed and built again, never used. Builds happen behind a file
lock per entry, so the workers of one run, and runs side by side, build each entry once.

Where: ``$MVR_TEST_CACHE``, else ``~/.cache/mvr-tests``. ``--fresh-fixtures`` rebuilds every
entry a run uses, once in that run. At most ``KEEP`` entries of a name are kept (the most
recently used): the others go when a new one is built."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# the source files whose change can change a cached index's bytes (relative to the root)
SOURCES = (
    "operators/encode",
    "operators/codecs",
    "operators/ann",
    "operators/retrieval/bm25.py",
    "operators/packed.py",
    "storage",
    "pipeline/indexing",
    "pipeline/config.py",
    "tests/metadata_corpus.py",
    "tests/fixture_cache.py",
)
LIBRARIES = ("torch", "transformers", "tokenizers", "faiss-cpu", "scann", "numpy", "pyarrow", "duckdb", "bm25s", "PyStemmer")
KEEP = 2
ENTRY = "entry.json"
ARRAYS = "arrays.npz"  # what an entry of ``FixtureCache.arrays`` holds


def default_root() -> Path:
    return Path(os.environ.get("MVR_TEST_CACHE") or Path.home() / ".cache" / "mvr-tests")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def code_sha256(path: Path) -> str:
    """sha256 of a Python file's code: its syntax tree without docstrings (comments are not in
    it), so that an edit of either keeps the digest; of its bytes when it does not parse."""
    source = path.read_bytes()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha256(source).hexdigest()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def sources_digest(root: Path = ROOT, sources: tuple[str, ...] = SOURCES) -> str:
    """sha256 over the ``.py`` files under ``sources``: their paths and code (``code_sha256``),
    in sorted order."""
    h = hashlib.sha256()
    for rel in sources:
        top = root / rel
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)
        for f in files:
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(code_sha256(f).encode())
    return h.hexdigest()


def library_versions() -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def blas_core_type() -> Optional[str]:
    """The OpenBLAS core type FAISS runs in mvr's processes (``OPENBLAS_CORETYPE`` as
    ``mvr.operators`` sets it)."""
    from mvr.operators.openblas import choose_core_type

    return choose_core_type(dict(os.environ))


def model_fingerprint(name: str = "minilm") -> str:
    from mvr.operators.encode.checkpoint import fingerprint, locate_model

    return fingerprint(locate_model(name)[0])


def entry_key(recipe: dict, environment: dict) -> str:
    """The key of ``recipe`` built in ``environment`` (model, sources, libraries, BLAS kernels)."""
    return hashlib.sha256(json.dumps({"recipe": recipe, **environment}, sort_keys=True, default=str).encode()).hexdigest()[:20]


def index_files(index: Path) -> dict[str, int]:
    """{path relative to ``index``: size} of every file under it."""
    return {p.relative_to(index).as_posix(): p.stat().st_size for p in sorted(index.rglob("*")) if p.is_file()}


def check_index(index: Path, recorded: dict) -> Optional[str]:
    """Why the index at ``index`` is not the one ``recorded`` (entry.json) describes, or None:
    ``mvr verify`` (every listed file's size and sha256), the same manifest version, exactly
    the same files."""
    from mvr.storage.manifest import load_manifest
    from mvr.storage.verify import verify_index

    try:
        manifest = load_manifest(str(index))
    except Exception as e:
        return f"manifest unreadable: {e}"
    report = verify_index(str(index), workers=2, manifest=manifest)
    if not report.ok:
        return f"verify: {[c.path for c in report.checks if not c.ok][:3]}"
    if manifest.version != recorded["version"]:
        return f"manifest version {manifest.version}, built at {recorded['version']}: written to in place"
    files = index_files(index)
    if files != recorded["files"]:
        changed = sorted(set(files.items()) ^ set(recorded["files"].items()))[:3]
        return f"files differ from those built: {changed}"
    return None


class FixtureCache:
    """Built indexes by recipe under ``root`` (``default_root()``); ``fresh``: rebuild every
    entry once, the first time this process (or a run: ``fresh_marks``) asks for it."""

    def __init__(
        self,
        root: Optional[Path] = None,
        environment: Optional[dict] = None,
        fresh: bool = False,
        fresh_marks: Optional[Path] = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.root = Path(root or default_root())
        self._environment = environment
        self.fresh = fresh
        self.fresh_marks = fresh_marks
        self.log = log
        self.builds: list[str] = []  # entries this object built, in order

    @property
    def environment(self) -> dict:
        if self._environment is None:
            self._environment = {"model": model_fingerprint(), "sources": sources_digest(), "libraries": library_versions(), "blas": blas_core_type()}
        return self._environment

    def key(self, recipe: dict) -> str:
        return entry_key(recipe, self.environment)

    def get(self, name: str, recipe: dict, build: Callable[[Path], None]) -> Path:
        """The index built by ``build(path)`` for ``recipe``: from the cache when an intact
        entry exists (and ``fresh`` does not ask for a rebuild), else built now, behind the
        entry's lock, into a temporary directory renamed into place when whole."""

        def made(tmp: Path) -> dict:
            build(tmp / "index")
            from mvr.storage.manifest import load_manifest

            return {"version": load_manifest(str(tmp / "index")).version, "files": index_files(tmp / "index")}

        return self._entry(name, recipe, made, lambda entry, recorded: check_index(entry / "index", recorded)) / "index"

    def arrays(self, name: str, recipe: dict, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """What ``compute()`` gives for ``recipe`` (an independent reference: plain
        transformers' vectors, an exact ranking; named arrays), as ``get`` keeps an index: from
        the cache when the entry's ``arrays.npz`` has the sha256 its entry.json records, else
        computed now and stored."""

        def made(tmp: Path) -> dict:
            np.savez(tmp / ARRAYS, **compute())
            return {"sha256": file_sha256(tmp / ARRAYS)}

        def why_not(entry: Path, recorded: dict) -> Optional[str]:
            return None if (entry / ARRAYS).is_file() and file_sha256(entry / ARRAYS) == recorded["sha256"] else f"{ARRAYS} is not the one stored"

        with np.load(self._entry(name, recipe, made, why_not) / ARRAYS) as stored:
            return {k: stored[k] for k in stored.files}

    def _entry(self, name: str, recipe: dict, make: Callable[[Path], dict], why_not: Callable[[Path, dict], Optional[str]]) -> Path:
        """The entry directory of ``recipe``: kept when ``why_not(entry, its entry.json)`` has
        no objection (and ``fresh`` does not ask for a rebuild), else made now by ``make(tmp)``
        (which returns what entry.json records besides the recipe), behind the entry's lock,
        into a temporary directory renamed into place when whole."""
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        entry = self.root / f"{name}-{self.key(recipe)}"
        with FileLock(str(entry) + ".lock"):
            self._remove_unfinished(name)
            why = self._why_not_usable(entry, why_not)
            if why is None and self._fresh_wanted(entry):
                why = "--fresh-fixtures"
            if why is None:
                os.utime(entry / ENTRY)  # last used: what pruning keeps
                return entry
            if entry.exists():
                self.log(f"fixture cache: rebuilding {entry.name} ({why})")
                shutil.rmtree(entry)
            tmp = self.root / f".{entry.name}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            t0 = time.monotonic()
            made = make(tmp)
            record = {
                "name": name,
                "key": entry.name.rsplit("-", 1)[1],
                "recipe": recipe,
                "environment": self.environment,
                **made,
                "built_s": round(time.monotonic() - t0, 1),
            }
            (tmp / ENTRY).write_text(json.dumps(record, indent=1, default=str))
            os.rename(tmp, entry)
            self._mark_fresh(entry)
            self.builds.append(entry.name)
            self.log(f"fixture cache: built {entry.name} in {record['built_s']} s")
        self._prune(name)
        return entry

    def _why_not_usable(self, entry: Path, why_not: Callable[[Path, dict], Optional[str]]) -> Optional[str]:
        if not entry.exists():
            return "not built"
        try:
            recorded = json.loads((entry / ENTRY).read_text())
        except (OSError, ValueError):
            return "no complete entry.json: an unfinished build"
        return why_not(entry, recorded)

    def _fresh_wanted(self, entry: Path) -> bool:
        if not self.fresh:
            return False
        return not (self.fresh_marks / entry.name).exists() if self.fresh_marks else entry.name not in self.builds

    def _mark_fresh(self, entry: Path) -> None:
        if self.fresh and self.fresh_marks:
            self.fresh_marks.mkdir(parents=True, exist_ok=True)
            (self.fresh_marks / entry.name).touch()

    def _remove_unfinished(self, name: str) -> None:
        """Temporary build directories of ``name`` whose process is gone (a killed build)."""
        for tmp in self.root.glob(f".{name}-*.tmp-*"):
            pid = int(tmp.name.rsplit("-", 1)[1])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                shutil.rmtree(tmp, ignore_errors=True)
            except PermissionError:
                pass

    def _prune(self, name: str) -> None:
        """Keep the ``KEEP`` most recently used entries of ``name``; an entry in use by another
        run is skipped (its lock is held)."""
        from filelock import FileLock, Timeout

        entries = [e for e in self.root.glob(f"{name}-*") if e.is_dir() and (e / ENTRY).exists() and e.name.rsplit("-", 1)[0] == name]
        entries.sort(key=lambda e: (e / ENTRY).stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            try:
                with FileLock(str(old) + ".lock", timeout=0):
                    shutil.rmtree(old, ignore_errors=True)
            except Timeout:
                pass
