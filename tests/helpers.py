"""Helpers shared by test modules (import as ``from helpers import ...``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def run_script(code: str, tmp_path: Path, *, timeout: float = 300, env: dict | None = None):
    """Runs ``code`` as ``python script.py`` in a fresh interpreter; returns the CompletedProcess."""
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(code)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def run_code(code: str, *, timeout: float = 120) -> str:
    """Runs ``python -c code`` in a fresh interpreter; asserts it succeeds and returns its stdout."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout
