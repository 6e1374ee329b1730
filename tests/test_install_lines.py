"""Every ``pip install`` line in the README and docs/*.md resolves (``pip install --dry-run``, fresh venv).

``audiotree`` in a line means this checkout (``audiotree[s3] @ file://...``);
``-e .`` and ``'.[test,...]'`` too. One venv serves every line; each line runs
``--dry-run --quiet`` with a timeout, three lines at a time, and a resolver error
fails the test with pip's message. Skipped when PyPI cannot be reached.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PER_LINE_TIMEOUT = 900


def install_lines() -> list[tuple[str, str]]:
    """(where, the pip arguments after ``install``) of every install command in the docs."""
    found = []
    for doc in DOCS:
        # Inline code may wrap over a line break in the Markdown source: join the text first.
        text = doc.read_text(encoding="utf-8")
        for match in re.finditer(r"pip install ([^`\n&|;]+(?:\n[^`\n&|;]+)?)", text):
            args = " ".join(match.group(1).split())
            args = args.split(" && ")[0].strip().rstrip(")").strip()
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{doc.relative_to(REPO)}:{line}", args))
    return found


def _local(arg: str) -> str:
    """An argument naming audiotree (or the checkout) as a requirement on this checkout."""
    match = re.fullmatch(r"(?:audiotree|\.)(\[[\w,]+\])?", arg)
    if match:
        return f"audiotree{match.group(1) or ''} @ {REPO.as_uri()}"
    return arg


def _pip_args(args: str) -> list[str]:
    out = []
    for arg in shlex.split(args):
        if arg in ("-q", "--quiet", "-e", "--editable", "-U", "--upgrade"):
            continue
        out.append(_local(arg))
    return out


def test_the_docs_have_install_lines():
    lines = dict(install_lines())
    assert any("audiotree[s3]" in args and "moto" in args for args in lines.values()), lines
    assert any("audiotree[torch]" in args for args in lines.values()), lines
    assert _pip_args("'moto[server]' 'audiotree[s3]'") == ["moto[server]", f"audiotree[s3] @ {REPO.as_uri()}"]
    assert _pip_args("-q 'torch==2.13.0' -e '.[test,torch]'")[1] == f"audiotree[test,torch] @ {REPO.as_uri()}"


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_every_install_line_resolves(tmp_path):
    if not _pypi_reachable():
        pytest.skip("PyPI (pypi.org:443) is not reachable from here; the install lines cannot be resolved")
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    pip = [str(tmp_path / "venv" / ("Scripts" if sys.platform == "win32" else "bin") / "python"), "-m", "pip"]
    unique: dict[str, str] = {}  # the same line in several pages is resolved once, under its first place
    for where, args in install_lines():
        unique.setdefault(" ".join(_pip_args(args)), where)

    def resolve(where: str, args: str) -> tuple[str | None, str | None]:
        """(pip's failure, why the line was not resolved here) of one line; both None when it resolves."""
        argv = _pip_args(args)
        if any(a.startswith("--index-url") or a.startswith("http") for a in argv):
            index = next(a for a in argv if a.startswith("http"))
            host = re.sub(r"^https?://([^/]+).*", r"\1", index)
            try:
                socket.create_connection((host, 443), timeout=5).close()
            except OSError:
                return None, f"{host} not reachable"
        try:
            result = subprocess.run([*pip, "install", "--dry-run", "--quiet", *argv], capture_output=True,
                                    text=True, timeout=PER_LINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"pip install {args}: no resolution within {PER_LINE_TIMEOUT} s", None
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if "ERROR" in line or "conflict" in line.lower()]
            return f"pip install {args}: " + " | ".join(errors[-6:] or result.stderr.splitlines()[-6:]), None
        return None, None

    lines = [(w, a) for w, a in install_lines() if unique.get(" ".join(_pip_args(a))) == w]
    # Three resolutions at a time: each mostly waits on the network (index pages, metadata, downloads).
    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda line: resolve(*line), lines))
    failures = {where: failure for (where, _), (failure, _) in zip(lines, outcomes) if failure}
    skipped = [(where, why) for (where, _), (_, why) in zip(lines, outcomes) if why]
    assert not failures, failures
    if skipped:
        print("not resolved here:", skipped)
