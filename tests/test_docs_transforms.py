"""Every ```python block of docs/transforms.md runs as written, each in a fresh namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


DOC = Path(__file__).resolve().parent.parent / "docs" / "transforms.md"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _FENCE.finditer(text)]


BLOCKS = python_blocks(DOC.read_text())


def test_page_has_an_example_per_group():
    headings = re.findall(r"^## (.+)$", DOC.read_text(), re.M)
    assert len(BLOCKS) >= 7
    assert len(headings) >= 7
    text = DOC.read_text()
    # every section after the catalogue carries at least one example
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    for section in sections:
        if not section.startswith("Catalogue"):
            assert "```python" in section, section.splitlines()[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs(index):
    code = BLOCKS[index]
    namespace = {"__name__": f"docs_transforms_block_{index}"}
    exec(compile(code, f"{DOC}:block{index}", "exec"), namespace)
