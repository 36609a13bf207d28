"""The linter and the formatter (ruff, configured in pyproject.toml, pinned in
constraints.txt) find nothing in the repository: ``ruff check`` and ``ruff format --check``."""

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
