"""The lock files say what dtq needs, and who needs it: requirements.txt pins exactly what
pyproject.toml's runtime declarations pull in, requirements-dev.txt exactly what the dev group adds,
at the versions this suite runs on; the image and `make run` install the runtime lock alone."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def read_lock(name: str) -> tuple[dict[str, str], list[str]]:
    """A lock's exact pins (canonical name -> version) and the files it includes with -r."""
    pins: dict[str, str] = {}
    includes: list[str] = []
    for number, raw in enumerate((ROOT / name).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            includes.append(line[3:].strip())
            continue
        package, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[\w.+!-]+", version), f"{name}:{number}: {raw!r} is not an exact pin"
        key = canonicalize_name(package)
        assert key not in pins, f"{name}:{number}: {package} is pinned twice"
        pins[key] = version
    return pins, includes


def needed_by(roots: list[str], pins: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every distribution `roots` need here (markers evaluated, extras followed), each with the
    first package found needing it, and what the pins cannot satisfy. Reads the installed
    metadata, which is the pinned version's (test_every_pin_is_what_the_suite_runs_on)."""
    needed: dict[str, str] = {}
    problems: list[str] = []
    todo = [(Requirement(text), "pyproject.toml") for text in roots]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement, by = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in done:
            continue
        done.add((name, frozenset(requirement.extras)))
        needed.setdefault(name, by)
        if name not in pins:
            problems.append(f"{requirement} (needed by {by}) is not pinned")
            continue
        if not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{by} needs {requirement}, the lock pins {pins[name]}")
        for text in metadata.requires(name) or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *requirement.extras)):
                todo.append((sub, name))
    return needed, problems


def runtime_roots() -> list[str]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    return [*PYPROJECT["project"]["dependencies"], *extras["web"], *extras["postgres"]]


def test_the_runtime_lock_pins_exactly_what_the_runtime_needs() -> None:
    runtime, includes = read_lock("requirements.txt")
    assert includes == []
    needed, problems = needed_by(runtime_roots(), runtime)
    # Not needed: nothing the runtime uses, e.g. a test tool (requirements-dev.txt) or a leftover.
    assert (problems, sorted(set(runtime) - set(needed))) == ([], [])
    assert {"django", "daphne", "psycopg", "psycopg-binary"} <= set(runtime)  # compose uses PostgreSQL


def test_the_dev_lock_pins_exactly_what_the_dev_group_adds() -> None:
    runtime, _ = read_lock("requirements.txt")
    dev, includes = read_lock("requirements-dev.txt")
    assert includes == ["requirements.txt"]
    assert sorted(set(runtime) & set(dev)) == [], "pinned in both locks"
    needed, problems = needed_by(PYPROJECT["dependency-groups"]["dev"], {**runtime, **dev})
    runtime_needs, _ = needed_by(runtime_roots(), runtime)
    assert (problems, sorted(set(needed) - set(runtime_needs))) == ([], sorted(dev))
    assert {"pytest", "pytest-xdist", "ruff", "playwright", "schemathesis"} <= set(dev)


def test_every_pin_is_what_the_suite_runs_on() -> None:
    pins = {**read_lock("requirements.txt")[0], **read_lock("requirements-dev.txt")[0]}
    installed = {name: metadata.version(name) for name in pins}
    assert {name: v for name, v in installed.items() if v != pins[name]} == {}


def make_dry_run(target: str, tmp_path: Path) -> str:
    """The commands `make <target>` would run on a fresh checkout (a venv that does not exist yet)."""
    proc = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_run_installs_the_runtime_lock_and_make_test_adds_the_dev_lock(tmp_path: Path) -> None:
    run = make_dry_run("run", tmp_path)
    assert "-r requirements.txt" in run and "requirements-dev.txt" not in run
    for target in ("test", "lint"):
        commands = make_dry_run(target, tmp_path)
        assert "-r requirements.txt" in commands and "-r requirements-dev.txt" in commands


def test_the_image_installs_the_runtime_lock_alone() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if line.startswith("RUN") and "pip install" in line]
    assert installs and all(re.findall(r"-r\s+(\S+)", line) == ["requirements.txt"] for line in installs)
    assert "COPY requirements.txt ." in dockerfile
