"""pyproject.toml builds an installable dtq: the apps with their data files, not the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT


def test_the_wheel_holds_the_apps_and_their_data_files(tmp_path: Path) -> None:
    # A copy, so the build's build/ and *.egg-info never land in the checkout.
    source = tmp_path / "src"
    # Tool caches left out too: another test's mypy run writes its cache (and deletes its WAL files)
    # while this copies the tree.
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "var", "__pycache__", "build",
                                                                "*.egg-info", ".mypy_cache", ".ruff_cache",
                                                                ".pytest_cache"))
    # build_py is the part of a wheel build that picks packages and data files, and needs only
    # setuptools (no wheel package, no network for an isolated build).
    proc = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
                           "--build-lib", str(tmp_path / "lib")], cwd=source, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lib = tmp_path / "lib"
    assert {p.name for p in lib.iterdir()} == {"dtq_core", "dtq_tasks", "dtq_worker", "dtq_api", "dtq_dashboard"}
    names = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file()}
    for path in [*(ROOT / "dtq_core" / "scripts").rglob("*.lua"), *(ROOT / "dtq_dashboard" / "templates").rglob("*"),
                 *(ROOT / "dtq_dashboard" / "static").rglob("*"),
                 ROOT / "dtq_worker" / "management" / "commands" / "runworker_dtq.py",
                 ROOT / "dtq_dashboard" / "migrations" / "0001_console_permissions.py"]:
        if path.is_file():
            assert path.relative_to(ROOT).as_posix() in names
