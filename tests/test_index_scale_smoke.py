"""Smoke test of ``benchmarks/index_scale.py --quick``: it runs end to end and reports every row.

Timings are never asserted (the machine is shared); only that the harness exits 0
and writes its section with both indexes (100 and 10,000 rows, each pointing at
hard links or repeated paths), a measured row for every strategy and worker count,
two worker RSS figures for each 2-worker row, and the goals table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NUMBER = r"\d[\d,]*(\.\d+)?"


def _cells(report: str, prefix: str) -> list[str]:
    for line in report.splitlines():
        if line.startswith(prefix):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError(f"no row starting {prefix!r} in:\n{report}")


@pytest.mark.slow
def test_quick_index_scale_reports_every_row(tmp_path):
    pytest.importorskip("psutil")
    out = tmp_path / "BENCH.md"
    out.write_text("# Benchmarks\n\n<!-- section:other -->\nkept\n<!-- /section:other -->\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO / "src")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "index_scale.py"), "--quick", "--work", str(tmp_path / "work"),
         "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = out.read_text()
    assert "kept" in report and "<!-- section:index-scale -->" in report and "## Index scale" in report
    for rows in ("100", "10,000"):
        index = _cells(report, f"| {rows} | hard links") if f"| {rows} | hard links" in report else \
            _cells(report, f"| {rows} | repeated paths")
        assert re.fullmatch(NUMBER, index[2]), index
        for strategy in ("random", "loudest"):
            for workers in ("0", "2"):
                cells = _cells(report, f"| {rows} | `{strategy}` | {workers} |")
                assert len(cells) == 10, cells
                wall, cpu, _build, peak, each, per_cpu, ratio = cells[3:]
                assert re.fullmatch(NUMBER, wall) and re.fullmatch(f"{NUMBER} / {NUMBER}", cpu), cells
                assert re.fullmatch(NUMBER, peak) and re.fullmatch(NUMBER, per_cpu), cells
                assert re.fullmatch(r"\d+\.\d\d×", ratio), cells
                if workers == "2":
                    assert re.fullmatch(f"{NUMBER} / {NUMBER}, {NUMBER} / {NUMBER}", each), cells
                else:
                    assert each == "—", cells
    # Sizes a quick run skips are named as not measured, never given a verdict.
    goal = _cells(report, "| 10,000,000 rows, `random`, 2 workers: start → first batch")
    assert goal[1:] == ["not measured", "not measured"], goal
    assert "index of 1,000,000 rows" in report
    assert "**smoke run.**" in report  # the quick run labels itself, and never lands in BENCHMARKS.md:
    assert not (REPO / "BENCHMARKS.md").exists() or "**smoke run.**" not in (REPO / "BENCHMARKS.md").read_text()
