"""Every ```python block of docs/*.md runs as written: one harness for every page.

Pages whose examples start pipelines (worker processes, files on disk) run each
block as a plain ``python script.py`` in a fresh interpreter, the way a reader
runs them. ``transforms.md`` holds only in-memory array examples; its blocks run
in this process, each in a fresh namespace, which keeps the suite fast.
"""

from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT
from helpers import run_script

DOCS_DIR = REPO_ROOT / "docs"
IN_PROCESS = {"transforms.md"}
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _FENCE.finditer(text)]


BLOCKS = [
    (doc.name, i, block)
    for doc in sorted(DOCS_DIR.glob("*.md"))
    for i, block in enumerate(python_blocks(doc.read_text()))
]


# Words that announce a feature as still to come. A page that says so about a feature that exists has
# drifted; one that is truly still to come belongs in an issue, not in the docs.
_NOT_YET = re.compile(r"landing separately|will land|lands later|coming soon|not yet (?:implemented|supported|available)|\bTODO\b|\bTBD\b", re.I)


def test_no_page_announces_a_feature_as_still_to_come():
    pages = [*sorted(DOCS_DIR.glob("*.md")), REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md"]
    found = [
        f"{page.name}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if _NOT_YET.search(line)
    ]
    assert not found, "docs mention features as still to come:\n" + "\n".join(found)


def test_every_page_has_examples():
    assert {name for name, _, _ in BLOCKS} == {p.name for p in DOCS_DIR.glob("*.md")}


def test_transforms_page_has_an_example_per_section():
    text = (DOCS_DIR / "transforms.md").read_text()
    assert len(python_blocks(text)) >= 7
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if not section.startswith("Catalogue"):
            assert "```python" in section, section.splitlines()[0]


@pytest.mark.parametrize("name,index,code", BLOCKS, ids=[f"{n}-{i}" for n, i, _ in BLOCKS])
@pytest.mark.slow
def test_doc_example_runs(name, index, code, tmp_path):
    if name in IN_PROCESS:
        import audiotree.sources  # noqa: F401  (the page imports it too)

        exec(compile(code, f"{DOCS_DIR / name}:block{index}", "exec"), {"__name__": f"docs_{name}_{index}"})
        return
    result = run_script(code, tmp_path, timeout=240)
    assert result.returncode == 0, f"{name} block {index} failed:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), "every example prints something to check"
