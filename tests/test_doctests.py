"""The ``>>>`` examples in the package's docstrings run, and keep running.

Every module of ``src/audiotree`` is imported and its docstrings are run with
:mod:`doctest`. A module whose optional extra is not installed (torch, PyAV,
matplotlib) is skipped with the reason, never failed.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

from test_architecture import package_modules

OPTIONAL = {"torch", "av", "matplotlib"}
MODULES = sorted(m for m in package_modules() if not m.endswith("__main__"))


def _load(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs the optional {exc.name!r}")
        raise


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = _load(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        if test.examples and test.name.startswith(name):  # only what this module defines
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see the output above)"


def test_the_public_modules_carry_examples():
    counted = {}
    for name in ("audiotree.core", "audiotree.validation", "audiotree.seeds", "audiotree.tree_fields",
                 "audiotree.excerpts.config", "audiotree.excerpts.strategies", "audiotree.io.excerpt",
                 "audiotree.dsp.edits", "audiotree.sources.slots"):
        tests = doctest.DocTestFinder().find(importlib.import_module(name))
        counted[name] = sum(len(t.examples) for t in tests)
    assert all(counted.values()), counted
