"""The package's shape: no import cycles, no private names across modules, small modules.

The import graph counts every ``import`` statement, including the ones inside
functions (a function-level import hides a cycle; it does not remove one), and
every string literal that names a module of the package (what a lazy
``importlib.import_module`` table loads). Only imports under
``if TYPE_CHECKING:`` are left out, since they never run.

Run ``python tests/test_architecture.py`` to print the graph's findings.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "src" / "audiotree"
# The issue asks for no module over *about* 600 lines; 650 leaves room for a docstring, not a concept.
MAX_LINES = 650


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Yields every Import/ImportFrom node that can run (skips TYPE_CHECKING blocks)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> modules of the package it imports; plus private-name imports found."""
    modules = package_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "." in node.value and node.value in modules and node.value != module:
                    graph[module].add(node.value)  # a lazy import by name
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != module:
                        graph[module].add(alias.name)
                continue
            target = _resolve(module, node, is_package)
            if target not in modules:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    dest = sub
                else:
                    dest = target
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{module}:{node.lineno} imports {alias.name} from {target}")
                if dest != module:
                    graph[module].add(dest)
    return graph, private


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


# Modules allowed over the budget for now, each with the reason. The test fails
# once one of them fits, so the entry cannot outlive its reason.
KNOWN_OVER_BUDGET = {
}


def long_modules() -> list[str]:
    out = []
    for module, path in package_modules().items():
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            out.append(f"{module}: {n} lines")
    return out


def test_no_import_cycles():
    graph, _ = import_graph()
    assert find_cycles(graph) == []


def test_no_private_names_imported_across_modules():
    _, private = import_graph()
    assert private == []


def test_no_module_over_the_line_budget():
    over = {line.split(":")[0] for line in long_modules()}
    assert over - set(KNOWN_OVER_BUDGET) == set()
    assert set(KNOWN_OVER_BUDGET) <= over, "a module fits the budget again: drop it from KNOWN_OVER_BUDGET"


def test_the_graph_sees_function_level_imports(tmp_path, monkeypatch):
    # The checker must be able to fail: a cycle hidden in a function body is found.
    pkg = tmp_path / "audiotree"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from audiotree.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from audiotree.a import f\n    from audiotree.a import _hidden\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_ROOT", pkg)
    graph, private = import_graph()
    assert find_cycles(graph) == [["audiotree.a", "audiotree.b"]]
    assert private == ["audiotree.b:3 imports _hidden from audiotree.a"]


if __name__ == "__main__":
    graph, private = import_graph()
    cycles = find_cycles(graph)
    edges = sum(len(v) for v in graph.values())
    print(f"{len(graph)} modules, {edges} import edges (function-level imports included)")
    print(f"import cycles: {len(cycles)}")
    for c in cycles:
        print("  cycle:", " <-> ".join(c))
    print(f"private names imported across modules: {len(private)}")
    for p in private:
        print("  ", p)
    longs = long_modules()
    print(f"modules over {MAX_LINES} lines: {len(longs)}")
    for m in longs:
        print("  ", m)
