"""Smoke test of the benchmark harness: `benchmarks/run.py --quick` runs end to end.

Timings are never asserted (the machine is shared and noisy); only that the
harness exits 0 and writes a report with every row, and that ours and the floor
produced numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROWS = (
    "random 3 s @44.1k, 0 workers",
    "random 3 s @44.1k, 2 workers",
    "balanced loudest 3 s @48k, 0 workers",
    "balanced loudest 3 s @48k, 2 workers",
    "our torch DataLoader, balanced loudest, 2 workers",
    "random: 2-worker rate / 0-worker rate",
    "balanced loudest: 2-worker rate / 0-worker rate",
    "peak RSS of the process tree, loudest 2 workers",
    "interpreter start → first batch, loudest 2 workers",
    "first run in a fresh venv → first batch, loudest 0 workers",
)


def _row(report: str, label: str) -> list[str]:
    for line in report.splitlines():
        if line.startswith(f"| {label}"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError(f"row {label!r} missing from the report:\n{report}")


@pytest.mark.slow
def test_quick_benchmark_runs_and_reports_every_row(tmp_path):
    pytest.importorskip("psutil")
    out = tmp_path / "BENCH.md"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--out", str(out),
         "--corpus-dir", str(tmp_path / "corpus")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = out.read_text()
    assert "| config | ours | reference 1.0.0 | floor | ours/reference | ours/floor |" in report
    for label in ROWS:
        _row(report, label)
    # Ours and the floor produced a rate in every throughput row (values not checked).
    number = re.compile(r"^\d+(\.\d+)?$")
    for label in ROWS[:4]:
        cells = _row(report, label)
        assert number.match(cells[1]) and number.match(cells[3]), cells
        assert cells[2] == "skipped", cells  # no reference venv in quick mode
    torch_cell = _row(report, ROWS[4])[1]
    assert number.match(torch_cell) or torch_cell.startswith("n/a"), torch_cell
    assert "## Targets" in report and "## Machine and versions" in report
    assert not (REPO / "BENCHMARKS.md").exists() or "quick (smoke) run" not in (REPO / "BENCHMARKS.md").read_text()
