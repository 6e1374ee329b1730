"""``audiotree scan INDEX``: each quality column as a histogram with its worst files, and the plot (issue 41)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from audiotree.dsp.quality import QUALITY_COLUMNS
from audiotree.index import build_index
from audiotree.quality_synth import RATE, quality_cases
from audiotree.scan import REPORT_KEYS, index_scan_report, scan_report
from audiotree.scan.quality import QUALITY_ENTRY_KEYS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("qscan")
    (root / "audio").mkdir()
    for case in quality_cases(3.0):
        soundfile.write(root / "audio" / f"{case.name}.wav", case.samples, RATE, subtype="PCM_16")
    stereo = np.random.default_rng(0).standard_normal((RATE, 1)) * 0.1
    soundfile.write(root / "audio" / "fake-stereo.wav", np.repeat(stereo, 2, axis=1), RATE, subtype="PCM_16")
    build_index(root / "audio", root / "c.parquet", executor="serial", show_progress=False)
    return root


def _stem(path: str) -> str:
    return Path(path).stem


def test_the_report_has_a_histogram_and_the_worst_files_per_column(corpus):
    report = index_scan_report(corpus / "c.parquet", worst=3)
    assert set(report) == REPORT_KEYS and list(report["quality"]) == list(QUALITY_COLUMNS)
    for column, entry in report["quality"].items():
        assert set(entry) == QUALITY_ENTRY_KEYS
        assert sum(b["count"] for b in entry["histogram"]) == entry["measured"], column
        assert len(entry["worst"]) <= 3
    quality = report["quality"]
    assert quality["bandwidth_hz"]["measured"] == 19
    assert [_stem(w["path"]) for w in quality["bandwidth_hz"]["worst"]] == ["upsampled-8k", "upsampled-16k",
                                                                             "upsampled-22k"]
    assert quality["bandwidth_hz"]["worst"][0]["nyquist_hz"] == RATE / 2
    assert [_stem(w["path"]) for w in quality["clip_share"]["worst"]] == ["clipped-0.3", "clipped-0.5", "clipped-0.7"]
    assert _stem(quality["silence_share"]["worst"][0]["path"]) == "silent-80"
    assert _stem(quality["dc_offset"]["worst"][0]["path"]) == "dc"
    assert quality["channel_corr"]["measured"] == 1  # the one stereo file
    assert _stem(quality["channel_corr"]["worst"][0]["path"]) == "fake-stereo"
    assert quality["channel_corr"]["worst"][0]["value"] == pytest.approx(1.0)
    # Of the noisy speech-like files, the 0 dB ones come first among the worst SNRs of their kind.
    snr = [_stem(w["path"]) for w in index_scan_report(corpus / "c.parquet", worst=None)["quality"]["snr_db"]["worst"]]
    assert snr.index("white-0") < snr.index("white-10") < snr.index("white-20") < snr.index("white-30")
    assert scan_report(str(corpus / "audio"))["quality"] is None  # a folder scan measures none


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_cli_scan_prints_the_quality_tables_and_plots_them(corpus, tmp_path):
    result = _cli("scan", corpus / "c.parquet", "--plot", tmp_path / "scan.png")
    assert result.returncode == 0, result.stderr
    assert "worst by bandwidth_hz:" in result.stdout and "upsampled-8k.wav" in result.stdout
    assert "Quality plot:" in result.stdout
    png = tmp_path / "scan-quality.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_json = json.loads(_cli("scan", corpus / "c.parquet", "--json").stdout)
    assert len(as_json["quality"]["dc_offset"]["worst"]) == 19  # --json lists every file


@pytest.mark.slow
def test_cli_preview_sort_by_shows_the_worst_files_in_order(corpus, tmp_path):
    import re

    out = tmp_path / "p"
    result = _cli("preview", corpus / "c.parquet", "--sort-by", "bandwidth_hz", "-n", "3", "--out", out,
                  "--image-format", "svg", "--duration", "1")
    assert result.returncode == 0, result.stderr
    html = (out / "index.html").read_text()
    shown = [float(v) for v in re.findall(r"bandwidth_hz</b> ([0-9.e+-]+)", html)]
    assert len(shown) == 3 and shown == sorted(shown) and shown[0] == pytest.approx(4000, rel=0.1)
    assert [name for name in ("upsampled-8k", "upsampled-16k", "upsampled-22k") if name in html] == \
        ["upsampled-8k", "upsampled-16k", "upsampled-22k"]
    out2 = tmp_path / "p2"
    result = _cli("preview", corpus / "c.parquet", "--sort-by=-clip_share", "-n", "2", "--out", out2,
                  "--image-format", "svg", "--duration", "1", "--where", "clip_share < 0.05")
    assert result.returncode == 0, result.stderr
    shown = [float(v) for v in re.findall(r"clip_share</b> ([0-9.e+-]+)", (out2 / "index.html").read_text())]
    assert len(shown) == 2 and shown == sorted(shown, reverse=True) and max(shown) < 0.05
    refused = _cli("preview", corpus / "audio", "--sort-by", "snr_db", "--out", tmp_path / "p3")
    assert refused.returncode != 0 and "--sort-by needs a corpus index" in refused.stderr
