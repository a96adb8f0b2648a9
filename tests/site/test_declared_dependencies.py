"""`pip install dtq` (no extras) gives a working engine, worker and operator commands, as
docs/install.md says: every module-level import of the engine's packages is a declared
dependency (cryptography too: dtq_core/config.py checks the encryption keys with it).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from ..conftest import ROOT

ENGINE_PACKAGES = ("dtq_core", "dtq_tasks", "dtq_worker")
# Module-level imports of the web extra, in modules only a [web] install loads (docs/observability.md).
WEB_ONLY = {"dtq_core/metrics_urls.py"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_normalize(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def test_every_module_level_import_of_the_engine_is_a_declared_dependency() -> None:
    dists = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared: dict[str, list[str]] = {}
    for package in ENGINE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative in WEB_ONLY:
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top.startswith("dtq_"):
                        continue
                    provided_by = {_normalize(d) for d in dists.get(top, [top])}
                    if not provided_by & declared:
                        undeclared.setdefault(top, []).append(f"{relative}:{node.lineno}")
    assert not undeclared, f"imported at module level but not in [project].dependencies: {undeclared}"
