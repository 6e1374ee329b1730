"""Smoke test of the benchmark harness: `benchmarks/run.py --quick` runs end to end.

Timings are never asserted (the machine is shared and noisy); only that the
harness exits 0 and writes a report with every configuration row and every goal,
that ours, the plain loop and the plain torch Dataset produced numbers, and that
peers the quick run skips say so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIGS = (
    "random 3 s @44.1k, sync reads, 0 workers",
    "random 3 s @44.1k, sync reads, 2 workers",
    "random 3 s @44.1k, default ReadOptions, 0 workers",
    "balanced loudest 3 s @48k, sync reads, 0 workers",
    "balanced loudest 3 s @48k, sync reads, 2 workers",
)
GOALS = (
    "synthetic: random ≥ 1.0× the plain loop (sync, 0 workers)",
    "synthetic: loudest without an index ≥ 1.0× the plain loop with libloudness and up to 5 tries (sync, 0 workers)",
    "synthetic: random ≥ 2× lhotse (0 workers)",
    "synthetic: random, 2 workers ≥ 0.95× the 0-worker items per CPU-second",
    "synthetic: peak RSS of the process tree, random 2 workers ≤ 0.6× audiotree 1.0",
    "synthetic: loudest with a corpus index ≥ 0.9× our random",
    "synthetic: loudest, 2 workers ≥ 0.95× the 0-worker items per CPU-second",
    "synthetic: loudest, 2 workers: start → first batch ≤ 0.5× audiotree 1.0",
)
RATE = re.compile(r"^\d+(\.\d+)? \(\d+(\.\d+)?–\d+(\.\d+)?\)$")  # "median (min–max)"


def _row(report: str, label: str) -> list[str]:
    for line in report.splitlines():
        if line.startswith(f"| {label}"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError(f"row {label!r} missing from the report:\n{report}")


@pytest.mark.slow
def test_quick_benchmark_runs_and_reports_every_row(tmp_path):
    pytest.importorskip("psutil")
    pytest.importorskip("torch")
    out = tmp_path / "BENCH.md"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--out", str(out),
         "--corpus-dir", str(tmp_path / "corpus")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = out.read_text()
    header = _row(report, "configuration")
    assert header[:3] == ["configuration", "ours", "plain loop"], header
    assert "plain torch Dataset" in header, header
    assert "items per CPU-second" in report
    cells = {label: dict(zip(header, _row(report, label))) for label in CONFIGS}
    for label in CONFIGS:
        assert RATE.match(cells[label]["ours"]), cells[label]
    for label in CONFIGS[:1] + CONFIGS[3:4]:  # the plain loop runs the 0-worker rows
        assert RATE.match(cells[label]["plain loop"]), cells[label]
    for label in CONFIGS[:2]:  # the plain torch Dataset runs both random sync rows
        assert RATE.match(cells[label]["plain torch Dataset"]), cells[label]
    for goal in GOALS:
        _row(report, goal)
    # Peers the quick run skips are reported as n/a, not as numbers; the plain loop's floors are numbers.
    assert _row(report, GOALS[4])[2] == "n/a" and _row(report, GOALS[7])[2] == "n/a"
    assert _row(report, GOALS[1])[2] in ("HOLDS", "MISSES"), _row(report, GOALS[1])
    # Measured by its own harness, side by side in one process: the row points at that section.
    assert "benchmarks/loudest.py" in _row(report, GOALS[5])[2], _row(report, GOALS[5])
    assert "## Method" in report and "## Machine and versions" in report
    assert not (REPO / "BENCHMARKS.md").exists() or "quick (smoke) run" not in (REPO / "BENCHMARKS.md").read_text()
