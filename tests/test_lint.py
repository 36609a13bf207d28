"""The linter and the formatter (ruff, configured in pyproject.toml, pinned in
constraints.txt) find nothing in the repository: ``ruff check`` and ``ruff format --check``;
and vulture finds no dead code in the package at confidence 80 (its whitelist:
tests/vulture_whitelist.py, names only outside callers pass by name)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "--output-format", "concise"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_finds_nothing(command):
    done = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_vulture_finds_no_dead_code():
    folders = ["pipeline", "operators", "storage", "jobs", "mvr", "tests/vulture_whitelist.py"]
    done = subprocess.run([sys.executable, "-m", "vulture", *folders, "--min-confidence", "80"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
