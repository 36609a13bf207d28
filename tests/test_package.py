"""mvr as users install and import it: one top-level name in site-packages (``mvr``, its
script and its metadata), every sub-package in the wheel, the API shown by ``help(mvr)``
and no import circle among the project's modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipeline", "operators", "jobs", "storage")


def _declared() -> tuple[dict[str, str], list[str]]:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return tool["package-dir"], tool["packages"]


def test_every_folder_with_modules_is_a_declared_package():
    """pyproject's explicit package list holds every folder of ``FOLDERS`` that holds an
    ``__init__.py`` (a sub-package left out would be missing from the wheel)."""
    package_dir, packages = _declared()
    assert package_dir == {"mvr": "mvr", **{f"mvr.{f}": f for f in FOLDERS}}
    found = {"mvr"}
    for top in FOLDERS:
        for d, dirs, files in os.walk(ROOT / top):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            if "__init__.py" in files:
                found.add("mvr." + Path(d).relative_to(ROOT).as_posix().replace("/", "."))
            else:
                assert not any(f.endswith(".py") for f in files), f"{d} holds modules but no __init__.py"
    assert set(packages) == found


def test_help_shows_the_api_and_import_starts_nothing_heavy():
    code = (
        "import sys, pydoc, mvr\n"
        "text = pydoc.render_doc(mvr, renderer=pydoc.plaintext)\n"
        "heavy = sorted(m for m in ('ray', 'torch', 'faiss', 'scann', 'duckdb') if m in sys.modules)\n"
        "print(heavy); print(text)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    heavy, text = out.split("\n", 1)
    assert heavy == "[]", heavy
    for name in ("index(", "open(", "add(", "delete(", "compact(", "stats(", "verify(", "plan(", "serve(", "client(", "build_ann(", "build_bm25("):
        assert name in text, name
    assert "Examples" in text and ">>> import mvr" in text


def test_the_api_names_the_modes_search_knows():
    import mvr
    from mvr.operators.retrieval import fusion, scoring

    assert (mvr.MODES, mvr.SEARCH_MODES, mvr.FUSIONS) == (scoring.MODES, scoring.SEARCH_MODES, fusion.FUSIONS)


def test_no_import_circle():
    tool = ROOT.parent / "shared" / "tools" / "import_circles.py"
    if not tool.is_file():
        pytest.skip(f"{tool} is not here")
    out = subprocess.run([sys.executable, str(tool), str(ROOT), *FOLDERS, "mvr"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip().endswith("0 import circle(s) among " + out.strip().rsplit("among ", 1)[-1]), out
    assert "circle:" not in out, out


@pytest.mark.slow
def test_the_wheel_installs_mvr_alone_at_the_top_level(tmp_path):
    """Build the wheel from the tracked files and install it (no dependencies) into a fresh
    venv: site-packages gains ``mvr`` and its dist-info, nothing else; ``bin/`` gains ``mvr``;
    every module of the checkout is in the wheel under ``mvr/``; and the installed package
    imports from outside the checkout."""
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        if rel.split("/")[0] in (*FOLDERS, "mvr") or rel in ("pyproject.toml", "README.md"):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)], check=True, timeout=300)
    (wheel,) = wheels.glob("mvr-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = {n for n in names if n.endswith(".py")}
    want = {"mvr/" + rel for rel in tracked if rel.endswith(".py") and rel.split("/")[0] in FOLDERS} | {
        rel for rel in tracked if rel.startswith("mvr/") and rel.endswith(".py")
    }
    assert want <= modules, sorted(want - modules)[:10]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = Path(
        subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    )
    # mvr's dependencies from the running environment, whether it is a venv or a bare
    # interpreter (``--system-site-packages`` would see the base interpreter's, not a venv's):
    # its site-packages on the new venv's path, after the venv's own (a path a .pth file adds
    # is no site dir: its own .pth files, such as the checkout's editable install, are not run)
    running = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (purelib / "_running_env.pth").write_text("".join(f"{p}\n" for p in sorted(running)))
    before, bin_before = set(os.listdir(purelib)), set(os.listdir(venv / "bin"))
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True, timeout=300)
    added = set(os.listdir(purelib)) - before
    print(f"\nsite-packages gained: {sorted(added)}; bin gained: {sorted(set(os.listdir(venv / 'bin')) - bin_before)}")
    assert added == {"mvr", "mvr-0.1.0.dist-info"}
    assert set(os.listdir(venv / "bin")) - bin_before == {"mvr"}
    where = subprocess.run(
        [str(py), "-c", "import mvr, mvr.pipeline.retrieval.plan as p, mvr.operators.ann.defaults as d; print(mvr.__file__, p.__file__, d.BRUTE_FORCE_BELOW)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert where.returncode == 0, where.stderr
    assert all(str(purelib) in p for p in where.stdout.split()[:2]), where.stdout
