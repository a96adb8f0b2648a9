"""dtq_core sits at the bottom: nothing in it imports the Django apps or dtq_tasks, and its own
modules import each other without a ring; an import it keeps inside a function says why
(docs/contributing.md, "Where things live").

The graph is read from the source with `ast`: module-level and function-level imports alike, since
an import inside a function is still a dependency (it only dodges the ring at load time). Imports
under `if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from ..conftest import ROOT

PACKAGES = ("dtq_core", "dtq_tasks", "dtq_api", "dtq_dashboard", "dtq_worker", "dtq_site")
ABOVE_CORE = PACKAGES[1:]  # what dtq_core must never import


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tree_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _is_type_checking(node):
            children = node.orelse  # the body only runs under a type checker
        stack.extend(children)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, is_package: bool, source: str, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the module's source, resolved to the tree's modules."""
    for node in _import_nodes(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _absolute(module, is_package, node)
            # `from pkg import mod` imports the submodule; `from mod import name` the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            parts = target.split(".")
            # importing a.b.c runs a and a.b first; a module's own parent packages are already loaded
            for depth in range(1, len(parts) + 1):
                name = ".".join(parts[:depth])
                if name in known and name != module and not module.startswith(f"{name}."):
                    yield name, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: the line of its first import}, within the tree."""
    modules = tree_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for target, line in imports_of(module, path.name == "__init__.py", path.read_text(), set(modules)):
            edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, {}):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def ring(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    """The shortest ring through the component's first module, with the line of each import."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while start not in came_from:  # breadth first: every member of the component leads back to start
        reached = []
        for here in frontier:
            for target in sorted(graph[here]):
                if target in members and target not in came_from:
                    came_from[target] = here
                    reached.append(target)
        frontier = reached
    path = [start]
    while len(path) == 1 or path[-1] != start:
        path.append(came_from[path[-1]])
    path.reverse()
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:], strict=False)) + f" -> {start}"


def test_the_graph_sees_module_and_function_level_imports() -> None:
    graph = import_graph()
    assert {"dtq_core.registry", "dtq_core.django_tasks.backend"} <= set(graph["dtq_core.django_tasks.runner"])
    # function level, under TYPE_CHECKING skipped: a fixture of each kind
    source = ("import dtq_core.keys\n"
              "from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from dtq_core import engine\n"
              "def f():\n    from . import task\n    from .scripts import SOURCES\n")
    known = {"dtq_core", "dtq_core.keys", "dtq_core.engine", "dtq_core.task", "dtq_core.scripts", "dtq_core.worker"}
    found = {name for name, _ in imports_of("dtq_core.worker", False, source, known)}
    assert found == {"dtq_core.keys", "dtq_core.task", "dtq_core.scripts"}


def test_the_ring_finder_finds_rings() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert ring(graph, ["a", "b", "c"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"


def test_dtq_core_imports_nothing_above_it() -> None:
    graph = import_graph()
    upward = [f"{module} imports {target} (line {line})"
              for module, edges in sorted(graph.items()) if module.split(".")[0] == "dtq_core"
              for target, line in sorted(edges.items()) if target.split(".")[0] in ABOVE_CORE]
    assert not upward, "dtq_core must not import the Django apps or dtq_tasks:\n" + "\n".join(upward)


def test_dtq_core_modules_form_no_ring() -> None:
    graph = import_graph()
    core = {module: {t: line for t, line in edges.items() if t.split(".")[0] == "dtq_core"}
            for module, edges in graph.items() if module.split(".")[0] == "dtq_core"}
    rings = [f"{ring(core, component)}\n  (the ring runs among {', '.join(component)})" for component in cycles(core)]
    assert not rings, "import rings among dtq_core modules:\n" + "\n".join(rings)


def test_function_level_imports_in_dtq_core_say_why() -> None:
    silent = []
    for module, path in tree_modules().items():
        if module.split(".")[0] != "dtq_core":
            continue
        lines = path.read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in _import_nodes(function):
                text = lines[node.lineno - 1 : node.end_lineno]
                if not any("#" in line for line in text):
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not silent, "an import inside a function needs a comment saying why it is not at the top:\n" + "\n".join(
        silent)
