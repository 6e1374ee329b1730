"""Smoke test of ``benchmarks/bucketing_segments.py``: ours and lhotse side by side on a small segments corpus.

Needs lhotse in the benchmark's own venv (``benchmarks/.venv-lhotse``); skipped where it
has not been created. Speeds are never asserted: the report must hold both loaders'
rows, sane efficiencies, and our shapes within the configured bucket count.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import run_benchmark

REPO = Path(__file__).resolve().parent.parent
LHOTSE = REPO / "benchmarks" / ".venv-lhotse" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not LHOTSE.exists(), reason="benchmarks/.venv-lhotse not created (python benchmarks/bucketing.py)")
def test_segments_benchmark_quick(tmp_path):
    out = tmp_path / "report.md"
    out.write_text("# Benchmarks\n")
    proc = run_benchmark("bucketing_segments.py", "--quick", "--format", "wav", "--items", "100",
                         "--lhotse-python", str(LHOTSE), "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|") for line in out.read_text().splitlines() if re.match(r"\| WAV \| 8 ", line)]
    assert [r[4].strip() for r in rows] == ["ours", "lhotse"]
    for row in rows:
        assert 0.5 < float(row[7]) <= 1.0
    assert int(rows[0][8]) <= 8
