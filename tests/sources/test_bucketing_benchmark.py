"""Smoke test of ``benchmarks/bucketing.py``: ours and lhotse side by side, end to end.

Needs the benchmark's own lhotse venv (``benchmarks/.venv-lhotse``; lhotse never enters
the dev venv), so it is skipped where that venv has not been created. Speeds are never
asserted; the report must hold both samplers' rows with sane efficiencies.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import run_benchmark

REPO = Path(__file__).resolve().parents[2]
LHOTSE = REPO / "benchmarks" / ".venv-lhotse" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not LHOTSE.exists(), reason="benchmarks/.venv-lhotse not created (python benchmarks/bucketing.py)")
def test_bucketing_benchmark_quick(tmp_path):
    out = tmp_path / "report.md"
    out.write_text("# Benchmarks\n\nkept\n")
    proc = run_benchmark("bucketing.py", "--quick", "--items", "600", "--buckets", "8", "--out", str(out),
                         timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = out.read_text()
    assert report.startswith("# Benchmarks\n\nkept\n")  # the rest of the file is left alone
    rows = [line for line in report.splitlines() if re.match(r"\| (uniform|speech-like) ", line)]
    assert len(rows) == 4 and {r.split("|")[3].strip() for r in rows} == {"ours", "lhotse"}
    for row in rows:
        efficiency = float(row.split("|")[4].strip().rstrip("%")) / 100
        assert 0.5 < efficiency <= 1.0, row
    ours = [r for r in rows if r.split("|")[3].strip() == "ours"]
    assert all(int(r.split("|")[7].strip()) <= 8 for r in ours)  # at most one shape per bucket
