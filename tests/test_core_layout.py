"""The core's floors: no import circle among its modules (type-checking imports
included), no module over 800 lines, and at most 24 presets."""

from __future__ import annotations

import ast
from pathlib import Path

from stoker.core import registry

CORE = Path(__file__).resolve().parents[1] / "src" / "stoker" / "core"
MAX_LINES = 800


def _module(path: Path) -> str:
    parts = path.relative_to(CORE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each core module and the core modules it imports, at any depth of its body."""
    files = {_module(p): p for p in CORE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found.update(t for t in targets if t in files and t != name)
        graph[name] = found
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle among modules that are not packages' ``__init__`` re-exports."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_circle_in_the_core() -> None:
    graph = _imports()
    # a package's __init__ re-exports its modules: an edge into it from one of them is
    # the package importing itself, not a circle of parts
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert _cycle(graph) is None


def test_no_core_module_over_the_floor() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in CORE.rglob("*.py")}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_presets_that_earn_their_place() -> None:
    assert len(registry.presets()) <= 24
