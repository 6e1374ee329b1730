"""Smoke test of ``benchmarks/remote.py`` (issue 39): the rig runs end to end and stops what it started.

A tiny corpus (8 files), one timed batch per cell. Speeds are never asserted: the
report must hold the ceiling rows and every cell, the remote cells must have
been counted at the proxies (requests and bytes per item above zero), and after
the run nothing listens on any port it printed (nginx, moto, both proxies).
"""

from __future__ import annotations

import os
import re
import shutil
import socket

import pytest
from helpers import run_benchmark


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") is None and not os.environ.get("CI"),
                    reason="nginx is not installed (apt-get install -y nginx-light); under CI=true this fails instead")
def test_remote_benchmark_quick(tmp_path):
    pytest.importorskip("moto.server")
    proc = run_benchmark("remote.py", "--quick", "--files", "8", "--batches", "1", "--min-window", "0.5", "--delays",
                         "0", "--s3-delays", "0", "--ceiling-seconds", "0.3", "--corpus-dir", str(tmp_path / "corpus"),
                         timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for label in ("server", "proxy +0 ms", "moto S3"):
        assert re.search(rf"^\| {re.escape(label)} \| \d+ \| \d+ \|$", out, re.M), out
    cells = {m[0]: m for m in re.findall(r"^\| ((?:tar |parquet )?local|(?:tar |parquet )?http \+\d+ ms"
                                        r"|s3 \(moto\) \+\d+ ms) \|(.*)$", out, re.M)}
    assert set(cells) == {"local", "http +0 ms", "s3 (moto) +0 ms", "tar local", "tar http +50 ms",
                          "parquet local", "parquet http +50 ms"}, out
    for label, (_, rest) in cells.items():
        fields = [f.strip() for f in rest.split("|")]
        assert float(fields[0]) > 0 and float(fields[2]) > 0  # items/s, items per CPU-s
        if not label.endswith("local"):
            # requests and KB per item counted at the proxy, and those bytes against the excerpts' own
            assert float(fields[5]) > 0 and float(fields[6]) > 0 and float(fields[7]) > 0, (label, fields)
            # the loader's own counts in the timed window (zero when 8 files' blocks are all held by then)
            window = [float(x) for x in fields[8].split(",")]
            assert len(window) == 2 and min(window) >= 0 and float(fields[9]) >= 0, (label, fields)
    ports = [int(p) for p in re.findall(r"(?:127\.0\.0\.1:|proxy on :)(\d+)", out)]
    assert len(ports) == 4, out
    assert [p for p in ports if _listening(p)] == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") is None and not os.environ.get("CI"),
                    reason="nginx is not installed (apt-get install -y nginx-light); under CI=true this fails instead")
def test_remote_benchmark_render_cells(tmp_path):
    """``--render ITEMS --render-only``: a small render, read locally and over HTTP in both orders; every cell in
    the report, the HTTP ones counted at their proxy; nothing left listening."""
    proc = run_benchmark("remote.py", "--quick", "--render", "40", "--render-only", "--render-workers", "0",
                         "--batches", "1", "--min-window", "0.5", "--ceiling-seconds", "0.3", "--render-dir",
                         str(tmp_path / "render"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    cells = re.findall(r"^\| (local|http \+50 ms) \| (item order|shuffled) \| 0 \|(.*)$", out, re.M)
    assert sorted((label, order) for label, order, _ in cells) == [
        ("http +50 ms", "item order"), ("http +50 ms", "shuffled"), ("local", "item order"), ("local", "shuffled")], out
    for label, _, rest in cells:
        fields = [f.strip() for f in rest.split("|")]
        assert float(fields[0]) > 0 and float(fields[3]) > 0  # items/s, items per CPU-s
        if label != "local":
            assert float(fields[6]) > 0 and float(fields[7].split()[0]) > 0, fields  # requests, KB per item
    ports = [int(p) for p in re.findall(r"(?:127\.0\.0\.1:|proxy on :)(\d+)", out)]
    assert len(ports) == 2, out
    assert [p for p in ports if _listening(p)] == []
