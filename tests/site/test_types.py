"""The tree passes the type checker pinned in requirements-dev.txt, with the settings in
pyproject.toml's [tool.mypy] (strict on dtq_core); docs/contributing.md#types."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..conftest import ROOT


@pytest.mark.timeout(600)  # a cold run (no .mypy_cache) on a loaded 2-core machine: Django's stubs are large
def test_mypy_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output"],
                          cwd=ROOT, capture_output=True, text=True, timeout=590, check=False)
    assert proc.returncode == 0, f"mypy reports:\n{proc.stdout}{proc.stderr}"
