"""Without the shared seed pages, the seed-example tests skip with one reason (and never fail)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT


def test_missing_seed_pages_skip_the_module_with_one_reason(tmp_path):
    env = {**os.environ, "AUDIOTREE_SEEDS_DIR": str(tmp_path / "no-seeds")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_seed_examples.py"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    out = result.stdout
    assert result.returncode in (0, 5), out + result.stderr  # 5: pytest ran no test, as intended
    assert "1 skipped" in out and "failed" not in out and "error" not in out.lower(), out
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 1, out
    assert str(tmp_path / "no-seeds" / "000_9aba4dc486df387b.txt") in skips[0]
    assert "../shared/seeds/" in skips[0] and "AUDIOTREE_SEEDS_DIR" in skips[0]
    assert "empty parameter set" not in out
