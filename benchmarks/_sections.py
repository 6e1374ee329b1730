"""Named sections of ``BENCHMARKS.md``, so each harness rewrites only its own.

A section is ``<!-- section:NAME -->`` ... ``<!-- /section:NAME -->``. The main
harness (``run.py``) writes the head of the file and keeps every section; the
other harnesses (index start-up, bucketing, ...) replace theirs in place.
"""

from __future__ import annotations

import re
from pathlib import Path


def begin(name: str) -> str:
    return f"<!-- section:{name} -->"


def end(name: str) -> str:
    return f"<!-- /section:{name} -->"


def wrap(name: str, body: str) -> str:
    """``body`` between the section markers of ``name``."""
    return f"{begin(name)}\n{body.strip(chr(10))}\n{end(name)}\n"


def replace_section(path: Path, name: str, text: str) -> None:
    """Write ``text`` (already wrapped) as section ``name`` of ``path``: in place, else appended."""
    old = path.read_text() if path.exists() else ""
    if begin(name) in old and end(name) in old:
        head, rest = old.split(begin(name), 1)
        tail = rest.split(end(name), 1)[1].lstrip("\n")
        new = head + text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)


def keep_sections(path: Path, report: str) -> str:
    """``report`` followed by every section the old ``path`` held (a rerun must not erase them)."""
    old = path.read_text() if path.exists() else ""
    kept = [m.group(0) for m in re.finditer(r"<!-- section:(\S+) -->.*?<!-- /section:\1 -->", old, flags=re.S)]
    if not kept:
        return report
    return report.rstrip("\n") + "\n\n" + "\n\n".join(kept) + "\n"
