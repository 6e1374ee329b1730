"""The package's shape: no import cycles, no private names across modules, small modules.

The import graph counts every ``import`` statement, including the ones inside
functions (a function-level import hides a cycle; it does not remove one), and
every string literal that names a module of the package (what a lazy
``importlib.import_module`` table loads). Only imports under
``if TYPE_CHECKING:`` are left out, since they never run.

Above the modules, the graph is read per unit: a package with its subpackages
(``audiotree.sources``), or a root module (``audiotree.commands``). Units form no
cycle (an edge kept would be listed in ``KNOWN_UNIT_CYCLE_EDGES`` with its reason),
and ``LAYERS`` states their order, bottom to top: an import goes down or
sideways, and at most one goes up, listed in ``KNOWN_UPWARD`` with its reason.
Every unit has a place, so a new package or root module states its layer.

Beyond the graph, four counts must be 0 (or name each exception with its reason,
in the ``KNOWN_*`` tables below; an entry that no longer matches fails, so no
exception outlives its reason):

* **Private modules across packages.** A private module (``pkg/_name.py``) is
  the internals of its package: modules of ``pkg`` and of its subpackages may
  import it (``transforms.jax`` shares ``transforms._math``; ``cli/*`` share
  ``cli._common``), as Grain does with its own private modules; those imports
  are not counted. A private module at the top (``audiotree/_name.py``) belongs
  to no package, so any import of it from a subpackage counts: such a module is
  a public module of the layer it serves (``audiotree.fs``, ``audiotree.limits``).
  Importing a private *name* (``from m import _x``) from another module counts
  too, as before.
* **Private attributes across modules.** ``obj._x`` (also ``getattr(obj, "_x")``)
  counts unless ``obj`` is ``self``/``cls``/``super()``, or ``_x`` belongs to a
  class of the same module: it is set on ``self`` or declared in a class body
  there, and ``obj`` is a plain name not bound to (or ``isinstance``-tested
  against) a class imported from elsewhere; a chain like ``self.a._x`` only
  passes when no other module of the package declares ``_x``. State another
  module needs is a public property or method. Third-party private names we
  have to use are listed with the reason.
* **Eager imports that defeat a lazy table.** A package whose ``__init__`` has a
  ``_LAZY`` table (or a ``__getattr__`` naming submodules) promises that those
  modules load on first use. The modules that importing the package runs (its
  module-level imports, followed transitively, plus what ``from pkg import
  lazy_name`` triggers) must not include them.
* **Validators written twice.** ``audiotree.validation`` holds the one
  definition of ``is_int``, ``is_real`` and the ``check_*`` functions. A
  function elsewhere with one of those names (leading ``_`` ignored), or an
  inline spelling of ``is_int``/``is_real`` (``isinstance(v, bool)`` combined
  with ``isinstance(v, int | numbers.Integral | numbers.Real | ...)`` on the
  same ``v``), counts.

Run ``python tests/test_architecture.py`` to print the graph's findings.
"""

from __future__ import annotations

import ast
import re
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


# ------------------------------------------------------------ private modules
def _is_private_part(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _own_package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imported_modules(module: str, path: Path, tree: ast.AST, modules: dict[str, Path]):
    """(line, module of the package) for every import that can run."""
    is_package = path.name == "__init__.py"
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield node.lineno, alias.name
            continue
        target = _resolve(module, node, is_package)
        if target not in modules:
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            yield node.lineno, sub if sub in modules else target


def private_module_imports() -> list[str]:
    """Imports of a private module from outside the package that owns it (see the module docstring)."""
    modules = package_modules()
    root = PACKAGE_ROOT.name
    out = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        importer_pkg = _own_package(module, path)
        for line, target in _imported_modules(module, path, tree, modules):
            if target == module or not _is_private_part(target.rpartition(".")[2]):
                continue
            owner = target.rpartition(".")[0]
            if owner == root:
                allowed = importer_pkg == root
            else:
                allowed = importer_pkg == owner or importer_pkg.startswith(owner + ".")
            if not allowed:
                out.append(f"{module}:{line} imports the private module {target}")
    return sorted(set(out))


# --------------------------------------------------------- private attributes
_SELF = {"self", "cls"}


def _declared_attributes(tree: ast.AST) -> set[str]:
    """Private names a class of this module owns: set on ``self``/``cls``, declared in a class body or slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(stmt.name)
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                            names.add(sub.id)
                        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                            names.add(sub.value)  # __slots__
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if isinstance(node.value, ast.Name) and node.value.id in _SELF:
                names.add(node.attr)
    return {n for n in names if _is_private_part(n)}


def _imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _class_like(func: ast.AST) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name[:1].isupper()  # EpochSampler(...) builds an object; copy.copy(self) does not


def _foreign_bindings(func: ast.AST, imported: set[str]) -> set[str]:
    """Local names of ``func`` bound to, annotated as or isinstance-tested against an imported class."""
    def foreign(expr: ast.AST | None) -> bool:
        if isinstance(expr, ast.Tuple):
            return any(foreign(e) for e in expr.elts)
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id in imported

    out = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and foreign(node.value.func) \
                and _class_like(node.value.func):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = node.annotation
            if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                annotation = ast.parse(annotation.value, mode="eval").body
            if foreign(annotation):
                out.add(node.target.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and foreign(node.args[1])):
            out.add(node.args[0].id)
    return out


def _private_uses(tree: ast.AST):
    """(node, receiver, attribute) for every ``obj._x`` and ``getattr/setattr/hasattr(obj, "_x")``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private_part(node.attr):
            yield node, node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private_part(node.args[1].value)):
            yield node, node.args[0], node.args[1].value


def private_attribute_uses() -> list[str]:
    """``module: receiver._attr`` for each private attribute used from outside its class's module."""
    modules = package_modules()
    trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in modules.items()}
    declared = {m: _declared_attributes(t) for m, t in trees.items()}
    out = set()
    for module, tree in trees.items():
        imported = _imported_names(tree)
        elsewhere = set().union(*(d for m, d in declared.items() if m != module))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        foreign_in = {id(f): _foreign_bindings(f, imported) for f in functions}
        owner_of: dict[int, ast.AST] = {}
        for func in functions:  # innermost function wins: walk order visits outer ones first
            for sub in ast.walk(func):
                owner_of[id(sub)] = func
        for node, receiver, attr in _private_uses(tree):
            if isinstance(receiver, ast.Name) and receiver.id in _SELF:
                continue
            if (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name)
                    and receiver.func.id == "super"):
                continue
            if attr in declared[module]:
                if isinstance(receiver, ast.Name):
                    func = owner_of.get(id(node))
                    bound = foreign_in.get(id(func), set()) if func is not None else set()
                    if receiver.id not in imported and receiver.id not in bound:
                        continue
                elif attr not in elsewhere:
                    continue
            out.add(f"{module}: {ast.unparse(receiver)}.{attr}")
    return sorted(out)


# ------------------------------------------------------------------ lazy tables
def _lazy_modules(package: str, tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """Modules a package's ``_LAZY`` table or ``__getattr__`` promises to load on first use."""
    out = set()
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target = node.target.id
        if target == "_LAZY" and isinstance(node.value, ast.Dict):
            for value in node.value.values:
                for sub in ast.walk(value):
                    if isinstance(sub, ast.Constant) and sub.value in modules:
                        out.add(sub.value)
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    for name in (sub.value, f"{package}.{sub.value}"):
                        if name in modules and name != package:
                            out.add(name)
    return out


def _module_level_imports(tree: ast.Module):
    """Imports that run when the module is imported (not in functions, not under TYPE_CHECKING)."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        stack.extend(ast.iter_child_nodes(node))


def _eager_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules importing it runs at once (parents included, lazy names resolved)."""
    trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in modules.items()}
    tables: dict[str, dict[str, str]] = {}
    for module, tree in trees.items():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "_LAZY" and isinstance(node.value, ast.Dict)):
                table = {}
                for key, value in zip(node.value.keys, node.value.values):
                    first = value.elts[0] if isinstance(value, ast.Tuple) else value
                    if isinstance(key, ast.Constant) and isinstance(first, ast.Constant):
                        table[key.value] = first.value
                tables[module] = table
    graph: dict[str, set[str]] = {}
    for module, tree in trees.items():
        path = modules[module]
        deps = set()
        parts = module.split(".")
        deps.update(".".join(parts[:i]) for i in range(1, len(parts)))  # parents run first
        for node in _module_level_imports(tree):
            if isinstance(node, ast.Import):
                names = [(a.name, None) for a in node.names]
            else:
                target = _resolve(module, node, path.name == "__init__.py")
                names = [(target, a.name) for a in node.names]
            for target, name in names:
                if target not in modules:
                    continue
                deps.add(target)
                if name is not None:
                    if f"{target}.{name}" in modules:
                        deps.add(f"{target}.{name}")
                    elif name in tables.get(target, {}):
                        deps.add(tables[target][name])  # `from pkg import lazy_name` runs the table
        deps = {d for d in deps if d in modules and d != module}
        graph[module] = deps
    return graph


def eager_imports_of_lazy_modules() -> list[str]:
    """``package: loads lazy.module at import (via a -> b -> ...)`` for each broken lazy promise."""
    modules = package_modules()
    graph = _eager_graph(modules)
    out = []
    for package, path in modules.items():
        if path.name != "__init__.py":
            continue
        lazy = _lazy_modules(package, ast.parse(path.read_text()), modules)
        if not lazy:
            continue
        # Breadth-first from the package, remembering one path to each module it loads.
        via = {package: [package]}
        queue = [package]
        while queue:
            current = queue.pop(0)
            for dep in sorted(graph[current]):
                if dep not in via:
                    via[dep] = via[current] + [dep]
                    queue.append(dep)
        for module in sorted(lazy & set(via)):
            out.append(f"{package}: loads {module} at import (via {' -> '.join(via[module])})")
    return out


# ------------------------------------------------------------------ validators
_VALIDATION = "validation"
_INTEGER_TYPES = {"int", "Integral", "integer", "signedinteger", "Real", "float", "floating", "Number"}


def _validator_names() -> set[str]:
    tree = ast.parse((PACKAGE_ROOT / f"{_VALIDATION}.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def _isinstance_of(node: ast.AST) -> tuple[str, set[str]] | None:
    """(unparsed subject, type names) of an ``isinstance(subject, types)`` call, possibly under ``not``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2):
        return None
    types = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
    names = set()
    for t in types:
        if isinstance(t, ast.Attribute):
            names.add(t.attr)
        elif isinstance(t, ast.Name):
            names.add(t.id)
    return ast.unparse(node.args[0]), names


def redefined_validators() -> list[str]:
    """Definitions or inline spellings, outside ``validation.py``, of what ``validation`` defines once."""
    names = _validator_names()
    out = []
    for module, path in package_modules().items():
        if module == f"{PACKAGE_ROOT.name}.{_VALIDATION}":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_") in names:
                out.append(f"{module}:{node.lineno} defines {node.name} (validation.{node.name.lstrip('_')} exists)")
            elif isinstance(node, ast.BoolOp):
                # `isinstance(v, Integral) and not isinstance(v, bool)` or
                # `isinstance(v, bool) or not isinstance(v, Integral)`: the number test is
                # negated exactly when the operator is `or`, the bool test the other way round.
                negated_number = isinstance(node.op, ast.Or)
                checks = [(c, isinstance(v, ast.UnaryOp)) for v in node.values
                          if (c := _isinstance_of(v)) is not None]
                bools = {c[0] for c, neg in checks if c[1] & {"bool", "bool_"} and neg != negated_number}
                numbers_ = {c[0] for c, neg in checks if c[1] & _INTEGER_TYPES and neg == negated_number}
                for subject in sorted(bools & numbers_):
                    out.append(f"{module}:{node.lineno} spells is_int/is_real inline for {subject}")
    return sorted(set(out))


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


# Private attributes of other libraries that audiotree has to use, each with the reason.
# Keyed by the finding's text (line numbers left out); the test fails once an entry no longer matches.
KNOWN_PRIVATE_ATTRIBUTES = {
    "audiotree.parallel.executors: executor._max_workers":
        "concurrent.futures executors have no public size; a caller's executor is sized from it",
    "audiotree.io.ranged_get: fs._call_s3":
        "s3fs has no public ranged GET that returns the answer's status and Content-Range, to check them",
    "audiotree.io.ranged_get: fs._request":
        "gcsfs has no public ranged GET that returns the answer's status and Content-Range, to check them",
    "audiotree.io.storage: fs._strip_protocol":
        "fsspec's public strip_protocol(url) looks the class up again; the filesystem in hand must strip",
    "audiotree.io.loop_shutdown: loop._thread_id":
        "asyncio cannot mark a loop a forked child inherited (it ran in a parent thread) as not running; s3fs's "
        "finalizers pick how to close a session by loop.is_running()",
    "audiotree.parallel.parent_death: os._exit":
        "a documented stdlib function (exit without cleanup, from a forked child)",
    "audiotree.sources.workers.grain_shm_deletes: SharedMemoryArray._del_thread_pool":
        "Grain has no public way to drain its shared-memory unlink pool at exit or to give it a safe task",
    "audiotree.sources.workers.grain_shm_deletes: SharedMemoryArray._outstanding_del_requests":
        "Grain's unlink pool counts its queued requests in it; the task that replaces Grain's must release it",
    "audiotree.sources.workers.grain_shm_deletes: SharedMemoryArray._lock":
        "Grain creates its unlink pool under this lock; the executor takes the pool's place under it too",
    "audiotree.sources.workers.lifecycle: array._unlink_on_del":
        "Grain's SharedMemoryArray has no public switch for unlink-on-delete",
    "audiotree.sources.workers.lifecycle: leaf._unlink_on_del":
        "Grain's SharedMemoryArray has no public switch for unlink-on-delete",
    "audiotree.torch.loader: iterator._shutdown_workers":
        "torch's DataLoader iterator has no public way to stop persistent workers (needed to resume mid-epoch)",
}
# Named-tuple methods and fields carry an underscore only to stay clear of field names; they are public API.
NAMEDTUPLE_API = {"_fields", "_asdict", "_replace", "_make", "_field_defaults"}

# Lazy promises broken for now, each with the reason. The test fails once one is kept.
KNOWN_EAGER_LAZY: dict[str, str] = {}

# Inline spellings of is_int kept for now, each with the reason. The test fails once one is gone.
KNOWN_REDEFINED_VALIDATORS = {
    "audiotree.parallel.chunks: spells is_int/is_real inline for value":
        "parallel/ is being reworked on another branch (issue #26 corpus-job layer): use validation.is_int there",
    "audiotree.parallel.chunks: spells is_int/is_real inline for num_items":
        "parallel/ is being reworked on another branch (issue #26 corpus-job layer): use validation.is_int there",
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


def _unlined(finding: str) -> str:
    """A finding without its line number, so an edit above it does not unlist an exception."""
    return re.sub(r"^([\w.]+):\d+ ", r"\1: ", finding)


def _check_known(found: list[str], known: dict[str, str], what: str) -> None:
    found = [_unlined(f) for f in found]
    assert [f for f in found if f not in known] == [], f"new {what}: make it public, or list it with its reason"
    stale = sorted(set(known) - set(found))
    assert stale == [], f"listed {what} no longer found: drop them from the table"


def test_no_private_modules_imported_across_packages():
    assert private_module_imports() == []


def test_no_private_attributes_used_across_modules():
    found = [f for f in private_attribute_uses() if f.rpartition(".")[2] not in NAMEDTUPLE_API]
    _check_known(found, KNOWN_PRIVATE_ATTRIBUTES, "private attributes used across modules")


def test_lazy_tables_are_not_defeated_by_eager_imports():
    _check_known(eager_imports_of_lazy_modules(), KNOWN_EAGER_LAZY, "eager imports of lazy modules")


def test_validators_are_defined_once():
    _check_known(redefined_validators(), KNOWN_REDEFINED_VALIDATORS, "redefined validators")


# ------------------------------------------------------------------ layers
# The layer order, bottom to top. A unit is a package (``audiotree.io``, its subpackages included) or a
# root module (``audiotree.commands``); units on one line share a layer. An import may go down or sideways,
# never up: a unit imports only units of its own layer or of the layers below. Every unit of the package
# is placed (a new one fails until it is), except ``audiotree`` itself, the public face that re-exports all.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "validation", "version", "fs", "lazy_exports", "leaves", "provenance", "tree_fields",
     "synth", "quality_synth"),                 # plain helpers that import nothing of the package
    ("limits", "seeds", "lengths"),             # numbers: sane ranges, seeds, lengths
    ("parallel",),                              # executors, chunks
    ("process_local",),                         # per-process state that travels to workers
    ("dsp",),                                   # metering, resampling, edits
    ("io",),                                    # bytes and decoding
    ("commands",),                              # command lines in messages
    ("formats",),                               # on-disk layouts we write or import (no container class)
    ("discovery",),                             # files, container members and their labels; host shares
    ("index",),                                 # the corpus index
    ("excerpts",),                              # choosing excerpts (the loudest plan reads the index)
    ("tree_io",),                               # the reading behind AudioTree's file methods (takes the class)
    ("core",),                                  # the container, AudioTree: nothing below it knows of it
    ("transforms",),
    ("writers",),
    ("sources",),                               # the builders: datasets for Grain
    ("torch", "jax"),                           # adapters
    ("plots",),
    ("tuning", "preview", "scan"),              # reports
    ("cli",),
]

# Imports from a lower layer to a higher one kept for now, each with its reason (module -> module).
# The test fails once one is gone, so no entry outlives its reason.
KNOWN_UPWARD: dict[str, str] = {}

# Import edges between units that close a cycle of units, kept for now, each with its reason ("unit -> unit").
# Without them the graph of units has no cycle; the test fails once one no longer closes a cycle.
KNOWN_UNIT_CYCLE_EDGES: dict[str, str] = {}


def unit_of(module: str) -> str | None:
    """The layer unit of a module: ``audiotree.io.storage`` -> ``io``; ``audiotree`` itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def unit_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """Unit -> unit it imports -> the module imports that make the edge (function-level ones included)."""
    units: dict[str, dict[str, list[str]]] = {}
    for module, deps in graph.items():
        a = unit_of(module)
        if a is None:
            continue
        units.setdefault(a, {})
        for dep in deps:
            b = unit_of(dep)
            if b is not None and b != a:
                units[a].setdefault(b, []).append(f"{module} -> {dep}")
    return units


def unplaced_units(graph: dict[str, set[str]]) -> list[str]:
    """Units not in ``LAYERS``, units placed twice, and placed names that are no unit of the package."""
    placed = [u for layer in LAYERS for u in layer]
    units = set(unit_graph(graph))
    gone = {f"{u} (placed, but no such package or module)" for u in placed if u not in units}
    return sorted((units - set(placed)) | {u for u in placed if placed.count(u) > 1} | gone)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``module -> module`` for every import from a lower layer to a higher one (see ``LAYERS``)."""
    rank = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    out = []
    for a, targets in unit_graph(graph).items():
        for b, edges in targets.items():
            if a in rank and b in rank and rank[a] < rank[b]:
                out += edges
    return sorted(out)


def unit_cycles(graph: dict[str, set[str]], known: dict[str, str]) -> tuple[list[list[str]], list[str]]:
    """(cycles of units left once the listed edges are dropped, listed edges that close no cycle)."""
    units = unit_graph(graph)
    plain = {a: set(targets) for a, targets in units.items()}
    listed = [tuple(edge.split(" -> ")) for edge in known]
    for a, b in listed:
        plain.get(a, set()).discard(b)
    cycles = find_cycles(plain)
    stale = []
    for a, b in listed:
        if b not in units.get(a, {}):
            stale.append(f"{a} -> {b}")
            continue
        # The edge closes a cycle when b reaches a through the graph with every listed edge in place.
        full = {u: set(t) for u, t in units.items()}
        seen, todo = {b}, [b]
        while todo:
            for nxt in full.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if a not in seen:
            stale.append(f"{a} -> {b}")
    return cycles, sorted(stale)


def test_every_unit_has_a_layer():
    graph, _ = import_graph()
    assert unplaced_units(graph) == [], "place each package and root module once in LAYERS"


def test_lower_layers_do_not_import_upper_ones():
    graph, _ = import_graph()
    found = upward_imports(graph)
    assert [f for f in found if f not in KNOWN_UPWARD] == [], "an import goes up a layer: move the code down"
    assert sorted(set(KNOWN_UPWARD) - set(found)) == [], "a listed upward import is gone: drop it from KNOWN_UPWARD"
    assert len(KNOWN_UPWARD) <= 1
    graph["audiotree.io.excerpt"].add("audiotree.excerpts.config")  # what io/excerpt.py did before #26
    assert "audiotree.io.excerpt -> audiotree.excerpts.config" in upward_imports(graph)


def test_no_cycles_between_packages():
    graph, _ = import_graph()
    cycles, stale = unit_cycles(graph, KNOWN_UNIT_CYCLE_EDGES)
    assert cycles == [], "packages import each other: move the code to the layer it belongs to"
    assert stale == [], "a listed edge no longer closes a cycle: drop it from KNOWN_UNIT_CYCLE_EDGES"


def test_the_layer_checks_can_fail(tmp_path, monkeypatch):
    # A package made up for the test: low.a imports high.b at the top, high.b imports low.a inside a
    # function (a cycle of units held by a function-level import), and a new unit is left unplaced.
    pkg = tmp_path / "audiotree"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from audiotree.high.b import g\n")
    (pkg / "high" / "b.py").write_text("def g():\n    from audiotree.low import a\n    return a\n")
    (pkg / "stray.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_ROOT", pkg)
    monkeypatch.setattr(sys.modules[__name__], "LAYERS", [("low",), ("high", "gone")])
    graph, _ = import_graph()
    assert unplaced_units(graph) == ["gone (placed, but no such package or module)", "stray"]
    assert upward_imports(graph) == ["audiotree.low.a -> audiotree.high.b"]
    assert unit_cycles(graph, {}) == ([["high", "low"]], [])
    assert unit_cycles(graph, {"low -> high": "planted"}) == ([], [])
    assert unit_cycles(graph, {"high -> stray": "planted"}) == ([["high", "low"]], ["high -> stray"])


def test_the_widened_counts_can_fail(tmp_path, monkeypatch):
    # Each count sees the pattern it is written for, in a package made up for the test.
    pkg = tmp_path / "audiotree"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "_LAZY = {'Heavy': 'audiotree.heavy'}\n"
        "from audiotree.light import f\n"
        "def __getattr__(name):\n    import importlib\n    return importlib.import_module(_LAZY[name])\n"
    )
    (pkg / "light.py").write_text("import audiotree.heavy\ndef f():\n    pass\n")
    (pkg / "heavy.py").write_text("class Thing:\n    def __init__(self):\n        self._state = 1\n")
    (pkg / "_helpers.py").write_text("X = 1\n")
    (pkg / "validation.py").write_text("def is_int(v):\n    return True\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "user.py").write_text(
        "import numbers\n"
        "from audiotree import _helpers\n"
        "from audiotree.heavy import Thing\n"
        "def g(v):\n    t = Thing()\n    return t._state, isinstance(v, numbers.Integral) and not isinstance(v, bool)\n"
        "def _is_int(v):\n    return False\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_ROOT", pkg)
    assert private_module_imports() == ["audiotree.sub.user:2 imports the private module audiotree._helpers"]
    assert private_attribute_uses() == ["audiotree.sub.user: t._state"]
    assert eager_imports_of_lazy_modules() == [
        "audiotree: loads audiotree.heavy at import (via audiotree -> audiotree.light -> audiotree.heavy)"]
    assert redefined_validators() == [
        "audiotree.sub.user:6 spells is_int/is_real inline for v",
        "audiotree.sub.user:7 defines _is_int (validation.is_int exists)",
    ]


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
    counts = [
        ("private modules imported across packages", private_module_imports(), {}),
        ("private attributes used across modules",
         [f for f in private_attribute_uses() if f.rpartition(".")[2] not in NAMEDTUPLE_API], KNOWN_PRIVATE_ATTRIBUTES),
        ("eager imports that defeat a lazy table", eager_imports_of_lazy_modules(), KNOWN_EAGER_LAZY),
        ("validators written twice", redefined_validators(), KNOWN_REDEFINED_VALIDATORS),
    ]
    for title, found, known in counts:
        new_ = [f for f in found if _unlined(f) not in known]
        print(f"{title}: {len(new_)} (+ {len(found) - len(new_)} listed exceptions)")
        for f in new_:
            print("  ", f)
        for f in sorted(set(known) - {_unlined(f) for f in found}):
            print("   listed but no longer found:", f)
    upward = upward_imports(graph)
    print(f"imports from a lower layer to a higher one: {len(upward)} (listed: {len(KNOWN_UPWARD)})")
    for u in upward:
        print("  ", u, "(listed)" if u in KNOWN_UPWARD else "")
    unit_cycles_left, unit_stale = unit_cycles(graph, KNOWN_UNIT_CYCLE_EDGES)
    print(f"cycles between packages once the listed edges are dropped: {len(unit_cycles_left)}")
    for c in unit_cycles_left:
        print("  cycle:", " <-> ".join(c))
    for edge in unit_stale:
        print("   listed but no longer closing a cycle:", edge)
    for u in unplaced_units(graph):
        print("   not placed in LAYERS:", u)
    longs = long_modules()
    print(f"modules over {MAX_LINES} lines: {len(longs)}")
    for m in longs:
        print("  ", m)
