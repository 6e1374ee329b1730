"""The README's examples reproduce from the README's own install (``pip install -e .``).

Every ``$ audiotree ...`` command of a ``console`` block runs against the demo
corpus (``$C``), in a fresh folder, and every ``python`` block runs as a plain
script (``/data/...`` folders become the demo corpus' folders). What counts as
the README's install is read from ``pyproject.toml``: packages that only the
extras bring (torch, av, psutil, ...) are hidden from these subprocesses, so an
example that silently needs an extra fails here.

Outputs are compared with the README's sample output:

* ``scan`` and the one-line errors are deterministic: every line must match;
* the others print timings and throughput, so numbers are masked, table rows
  are compared by their labels, and wrapped lines are compared joined.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
SAMPLE_CACHE = "/root/.cache/audiotree"  # where the README's sample output found the demo corpus
_TABLE = set("│┃┏┡└┗┳╇┴━─┓┩┘┛")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?%?")
_MEASURED = ("Knee: ", "Use: ")  # bench lines worded after the winning setting


# ------------------------------------------------------------------ the README, parsed
def _blocks(kind: str) -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(rf"^```{kind}\n(.*?)^```", text, flags=re.S | re.M)]


def _commands(block: str) -> list[dict]:
    """``{"command", "expected"}`` for each ``$ `` line (joined over ``\\`` continuations)."""
    out: list[dict] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            out[-1]["expected"].append(line)
            i += 1
            continue
        command, first = line[2:], i
        while command.endswith("\\"):
            i += 1
            command = command[:-1].rstrip() + " " + lines[i].strip()
        out.append({"command": command, "expected": [], "offset": first + 1})
        i += 1
    return out


CONSOLE = [(line + c["offset"], c) for line, block in _blocks("console") for c in _commands(block)]
PYTHON = _blocks("python")


def test_the_readme_has_the_examples_this_test_runs():
    names = [shlex.split(c["command"])[1] for _, c in CONSOLE if c["command"].startswith("audiotree ")]
    assert {"demo", "scan", "preview", "bench", "render"} <= set(names)
    assert len(PYTHON) >= 3
    assert all(c["command"].startswith("audiotree ") for _, c in CONSOLE), [c["command"] for _, c in CONSOLE]


# ------------------------------------------------------------------ the README's install
def _requirement_names(requirements: list[str] | None, *, with_extras: bool = False) -> set[str]:
    from packaging.requirements import Requirement

    names = set()
    for text in requirements or ():
        req = Requirement(text)
        if req.marker is not None and not with_extras and "extra" in str(req.marker):
            continue
        if req.marker is not None and "extra" not in str(req.marker) and not req.marker.evaluate():
            continue
        names.add(req.name.lower().replace("_", "-"))
    return names


def _base_closure(base: set[str]) -> set[str]:
    """Every installed distribution the base dependencies pull in."""
    seen, todo = set(), list(base)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirement_names(metadata.requires(name)))
        except metadata.PackageNotFoundError:
            pass
    return seen


def _hidden_modules() -> list[str]:
    """Top-level modules of the distributions only the extras install."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    base = _base_closure(_requirement_names(project["dependencies"]))
    extras = set()
    for requirements in project.get("optional-dependencies", {}).values():
        extras |= _requirement_names(requirements)
    extras -= base
    modules = set()
    for module, dists in metadata.packages_distributions().items():
        if any(d.lower().replace("_", "-") in extras for d in dists):
            modules.add(module)
    return sorted(modules)


_HIDE = textwrap.dedent('''\
    # Written by tests/test_readme.py: hides packages that only audiotree's extras install.
    import importlib.abc
    import os
    import sys

    _HIDDEN = frozenset(os.environ.get("AUDIOTREE_TEST_HIDDEN_MODULES", "").split(","))


    class _NotInTheBaseInstall(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in _HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r} (not in the base install)", name=name)
            return None


    sys.meta_path.insert(0, _NotInTheBaseInstall())
''')


@pytest.fixture(scope="module")
def base_env(tmp_path_factory) -> dict:
    hook = tmp_path_factory.mktemp("base-install")
    (hook / "sitecustomize.py").write_text(_HIDE)
    env = {k: v for k, v in os.environ.items() if k != "AUDIOTREE_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH")) if p)
    env["AUDIOTREE_TEST_HIDDEN_MODULES"] = ",".join(_hidden_modules())
    env["AUDIOTREE_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # a fresh cache, as in the README's demo
    env["COLUMNS"] = "80"  # rich lays tables out for this width
    return env


def test_the_base_install_really_hides_the_extras(base_env, tmp_path):
    result = subprocess.run([sys.executable, "-c", "import torch"], env=base_env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "not in the base install" in result.stderr
    assert "torch" in base_env["AUDIOTREE_TEST_HIDDEN_MODULES"].split(",")


# ------------------------------------------------------------------ running the examples
def _argv(command: str, corpus: Path) -> list[str]:
    args = shlex.split(command.replace("$C", str(corpus)))
    script = Path(sys.executable).with_name("audiotree")  # what `pip install -e .` puts on the path
    head = [str(script)] if script.exists() else [sys.executable, "-m", "audiotree.cli"]
    return head + args[1:]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme")


@pytest.fixture(scope="module")
def demo(base_env, workdir) -> subprocess.CompletedProcess:
    """``$ audiotree demo`` from a fresh cache; it also generates ``$C`` for the other examples."""
    (command,) = [c["command"] for _, c in CONSOLE if c["command"] == "audiotree demo"]
    return subprocess.run(_argv(command, Path()), cwd=workdir, env=base_env, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def demo_corpus(demo, base_env, workdir) -> Path:
    assert demo.returncode == 0, demo.stderr[-3000:]
    folder = Path(base_env["AUDIOTREE_CACHE"]) / "demo-corpus-v2"
    (workdir / "data").mkdir(exist_ok=True)  # the error examples name a relative data/speech
    if not (workdir / "data" / "speech").exists():
        os.symlink(folder / "speech", workdir / "data" / "speech")
    return folder


def _masked(text: str) -> str:
    return " ".join(_NUMBER.sub("N", text).split())


def _is_table(line: str) -> bool:
    return bool(set(line) & _TABLE)


def _compare_loosely(expected: list[str], actual: str) -> list[str]:
    """Problems, comparing with numbers masked: prose as text, tables by their headers and row labels."""
    problems = []
    actual_lines = actual.splitlines()
    prose = _masked(" ".join(line for line in actual_lines if not _is_table(line)))
    cells = [[_masked(c) for c in re.split("[│┃]", line)[1:-1]] for line in actual_lines if line[:1] in "│┃"]
    run: list[str] = []
    for line in [*expected, "│"]:
        if line.startswith(_MEASURED):  # its wording depends on which setting won: compare the start
            if not any(row.startswith(line.split(":")[0] + ":") for row in actual_lines):
                problems.append(f"missing line: {line!r}")
            line = "│"  # ends the run of text before it
        if not _is_table(line):
            run.append(line)
            continue
        if run and _masked(" ".join(run)) not in prose:
            problems.append(f"missing text: {' '.join(run)!r}")
        run = []
        if line[:1] not in "│┃" or line == "│":
            continue
        want = [_masked(c) for c in re.split("[│┃]", line)[1:-1]]
        if line[0] == "┃":  # a header: every cell
            ok = want in cells
        elif want and want[0] != "N":  # a row: its label
            ok = any(row and row[0] == want[0] for row in cells)
        else:  # a row of measurements only
            ok = any(len(row) == len(want) for row in cells)
        if not ok:
            problems.append(f"missing table line: {line!r}")
    return problems


def _expected_lines(expected: list[str], corpus: Path) -> list[str]:
    return [line.replace(f"{SAMPLE_CACHE}/demo-corpus-v2", str(corpus)).rstrip() for line in expected]


def _run_until_interrupted(argv, *, cwd, env, record: Path, parts: int) -> subprocess.CompletedProcess:
    """Runs ``argv`` and sends SIGTERM once ``record`` lists ``parts`` finished parts."""
    import json

    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if len(json.loads(record.read_text())["parts"]) >= parts:
                    proc.send_signal(signal.SIGTERM)
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


_INTERRUPTED = re.compile(r"^\(interrupted with SIGTERM after (\w+) of the \w+ parts\)$")
_WORDS = {"one": 1, "two": 2, "three": 3}


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(CONSOLE)), ids=[f"line{line}" for line, _ in CONSOLE])
def test_readme_command_reproduces(index, demo, demo_corpus, base_env, workdir):
    corpus = demo_corpus
    line, example = CONSOLE[index]
    command = example["command"]
    if command.endswith(" ...same arguments..."):  # the README's "run it again"
        command = CONSOLE[index - 1][1]["command"]
        assert command.startswith(example["command"].split(" ...")[0]), (line, command)
    expected = _expected_lines(example["expected"], corpus)
    argv = _argv(command, corpus)
    where = f"README.md line {line}: $ {command}"
    interrupted = _INTERRUPTED.match(expected[0]) if expected else None
    if command == "audiotree demo":
        result = demo
    elif interrupted:
        out = shlex.split(command)[shlex.split(command).index("--out") + 1]
        result = _run_until_interrupted(argv, cwd=workdir, env=base_env, record=workdir / out / "render.json",
                                        parts=_WORDS[interrupted.group(1)])
        assert result.returncode == 128 + signal.SIGTERM, (where, result.returncode, result.stderr[-3000:])
        return
    else:
        result = subprocess.run(argv, cwd=workdir, env=base_env, capture_output=True, text=True, timeout=900)

    if expected and expected[0].startswith("Error: "):  # a bad argument: one line, exit code 2
        assert result.returncode == 2, (where, result.returncode, result.stderr)
        assert result.stderr.splitlines() == expected, where
        return
    assert result.returncode == 0, (where, result.stderr[-3000:])
    actual = [row.rstrip() for row in result.stdout.splitlines()]
    if command.startswith("audiotree scan") and expected:  # deterministic: the sample is the output, line by line
        assert actual == expected, where + "\n" + "\n".join(actual)
    else:
        problems = _compare_loosely(expected, result.stdout)
        assert not problems, (where, problems, result.stdout)
    if "--plot" in command:
        plot = shlex.split(command)[shlex.split(command).index("--plot") + 1]
        assert (workdir / plot).read_bytes().startswith(b"\x89PNG"), where


def _bound_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _free_names(tree: ast.AST) -> set[str]:
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - _bound_names(tree) - set(dir(builtins))


def _prelude(index: int) -> str:
    """The imports and assignments of earlier blocks that this block needs (a README fragment
    continues the examples above it), with what those need in turn, in page order."""
    needed = _free_names(ast.parse(PYTHON[index][1]))
    candidates = [
        (block, node) for block, (_, source) in enumerate(PYTHON[:index]) for node in ast.parse(source).body
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign))
    ]
    chosen: list[int] = []
    grew = True
    while grew:
        grew = False
        for k, (_, node) in enumerate(candidates):
            if k not in chosen and _bound_names(node) & needed:
                chosen.append(k)
                needed |= _free_names(node)
                grew = True
    lines = [ast.get_source_segment(PYTHON[candidates[k][0]][1], candidates[k][1]) for k in sorted(chosen)]
    return "\n".join(lines) + "\n" if lines else ""


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON)), ids=[f"line{line}" for line, _ in PYTHON])
def test_readme_python_example_runs(index, demo_corpus, base_env, workdir):
    corpus = demo_corpus
    line, code = PYTHON[index]
    if "open_render(" in code and not (workdir / "rendered" / "render.json").exists():
        pytest.fail(f"README.md line {line} reads the render made by the README's render example, which did not run")
    for group in ("speech", "music", "effects"):
        code = code.replace(f'"/data/{group}"', repr(str(corpus / group)))
    script = _prelude(index) + code
    for group in ("speech", "music", "effects"):
        script = script.replace(f'"/data/{group}"', repr(str(corpus / group)))
    assert "/data/" not in script, script
    path = workdir / f"readme_{line}.py"
    path.write_text(script)
    result = subprocess.run([sys.executable, str(path)], cwd=workdir, env=base_env, capture_output=True, text=True,
                            timeout=900)
    where = f"README.md line {line}"
    assert result.returncode == 0, (where, script, result.stderr[-3000:])
    assert result.stdout.strip(), (where, "every README example prints something")
    for printed in re.findall(r"^\s*print\(.*\)\s+#\s*(.+)$", code, flags=re.M):  # print(...)  # what it shows
        assert printed.strip() in result.stdout, (where, printed, result.stdout)
