"""Every ```python block in docs/*.md runs as a plain script (transforms.md has its own test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from helpers import run_script

DOCS = sorted(p for p in (REPO_ROOT / "docs").glob("*.md") if p.name != "transforms.md")
BLOCKS = [
    (doc.name, i, block)
    for doc in DOCS
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S))
]


def test_docs_have_examples():
    assert {name for name, _, _ in BLOCKS} >= {"datasets.md", "excerpts.md"}


@pytest.mark.parametrize("name,index,code", BLOCKS, ids=[f"{n}-{i}" for n, i, _ in BLOCKS])
def test_doc_example_runs(name, index, code, tmp_path):
    result = run_script(code, tmp_path, timeout=240)
    assert result.returncode == 0, f"{name} block {index} failed:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), "every example prints something to check"
