"""CONTRIBUTING's package map names every package and every root module of ``src/audiotree`` (issue 38;
this replaces the check of ``tests/test_docs.py`` that found package names anywhere in the page).

A name counts when it stands, in backquotes, in the first column of a table
under "## The package map": a mention in prose is not a row.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = REPO / "src" / "audiotree"


def packages_and_root_modules(root: Path = PACKAGE_ROOT) -> set[str]:
    """``audiotree`` and its subpackages (folders with ``__init__.py``), and the modules at its root."""
    names = {"audiotree." + ".".join(p.parent.relative_to(root).parts) for p in root.rglob("__init__.py")}
    names = {n.rstrip(".") for n in names}
    names |= {f"audiotree.{p.stem}" for p in root.glob("*.py") if p.stem != "__init__"}
    return names


def mapped(contributing: str) -> set[str]:
    """The names in backquotes in the first column of the tables of the package map section."""
    section = contributing.split("## The package map", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            names |= set(re.findall(r"`(audiotree(?:\.\w+)*)`", first))
    return names


def missing(contributing: str, root: Path = PACKAGE_ROOT) -> list[str]:
    return sorted(packages_and_root_modules(root) - mapped(contributing))


def test_every_package_and_root_module_has_a_row():
    assert missing((REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")) == []


def test_the_check_fails_when_one_is_missing(tmp_path):
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `audiotree.fs` |"))
    assert missing(text.replace(row + "\n", "")) == ["audiotree.fs"]
    # A name said in prose only is not a row.
    assert missing(text.replace(row + "\n", "").replace("## Tests", "`audiotree.fs` is mentioned.\n\n## Tests")) == [
        "audiotree.fs"]
    # A new module or package needs its row.
    (tmp_path / "audiotree" / "newpkg").mkdir(parents=True)
    (tmp_path / "audiotree" / "newpkg" / "__init__.py").write_text("")
    (tmp_path / "audiotree" / "__init__.py").write_text("")
    (tmp_path / "audiotree" / "fs.py").write_text("")
    assert missing(text, tmp_path / "audiotree") == ["audiotree.newpkg"]
