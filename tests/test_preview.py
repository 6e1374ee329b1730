"""The HTML preview: the renderer's files, and the page loaded in real headless Chromium."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO_ROOT / "artifacts"


def run_cli(*args, cwd=None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def chromium_or_skip() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("Chromium is required in CI (.ci/run installs the Debian package 'chromium').")
    pytest.skip("Chromium is not installed; `apt-get install -y chromium` to run the browser test.")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serves ``directory`` on 127.0.0.1 (a free port) from a thread; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def headless(chromium: str, profile: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        "--mute-audio", f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def media_status(dom: str) -> dict:
    match = re.search(r'<pre id="media-status"[^>]*>(.*?)</pre>', dom, re.S)
    assert match, dom[-2000:]
    return json.loads(match.group(1))


# ------------------------------------------------------------------ the renderer (Python API)
def _dataset(corpus, **kwargs):
    from audiotree.excerpt import ExcerptConfig
    from audiotree.sources import create_balanced_audio_dataset

    return create_balanced_audio_dataset(
        {k: [str(v)] for k, v in corpus.items()}, duration=0.3, sample_rate=8000,
        excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-35), **kwargs)


def test_render_preview_files_and_manifest(corpus, tmp_path):
    import soundfile

    from audiotree.preview import render_preview

    ds = _dataset(corpus)
    result = render_preview(ds, tmp_path / "p", n=5, lufs_cutoff=-35, image_format="svg")
    assert len(result) == 5 and result.image_format == "svg"
    page = result.index.read_text()
    assert page.count("<audio controls") == 5 and 'id="media-status"' in page
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert sorted(r["index"] for r in manifest["excerpts"]) == list(range(5))
    by_index = {r["index"]: r for r in manifest["excerpts"]}
    for i in range(5):
        record, item = by_index[i], ds[i]
        assert record["source"] == item.source[0] and record["filepath"] == item.filepath[0]
        # Relative links, and the WAV is the pipeline's excerpt (16-bit).
        assert not os.path.isabs(record["wav"]) and f'src="{record["wav"]}"' in page
        audio, rate = soundfile.read(tmp_path / "p" / record["wav"], dtype="float32", always_2d=True)
        assert rate == 8000 and audio.shape == (2400, 1)
        np.testing.assert_allclose(audio.T, np.asarray(item.waveform)[0], atol=1 / 2**15 + 1e-6)
        svg = (tmp_path / "p" / record["image"]).read_text()
        assert svg.startswith("<svg") and "cutoff -35 LUFS" in svg and "<polyline" in svg
        assert record["lufs"] == pytest.approx(float(item.lufs[0]), abs=1e-3)
        assert record["excerpt_method"] == "search" and "(search)" in svg  # how loudest chose it
    # Sections are grouped by source.
    sections = re.findall(r'<section data-source="([^"]+)"', page)
    assert len(sections) == len(set(sections)) == len({r["source"] for r in manifest["excerpts"]})


def test_render_preview_png_replaces_an_earlier_preview(corpus, tmp_path):
    pytest.importorskip("matplotlib")
    from audiotree.preview import render_preview

    out = tmp_path / "p"
    render_preview(_dataset(corpus), out, n=4, image_format="svg")
    result = render_preview(_dataset(corpus, shuffle_seed=3), out, n=2, lufs_cutoff=-35)
    assert result.image_format == "png"
    for record in result.excerpts:
        assert (out / record["image"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.rglob("*.svg"))  # the earlier preview's files are gone
    assert len(list(out.rglob("*.wav"))) == 2


def test_render_preview_takes_iterables_and_checks_arguments(corpus, tmp_path):
    import grain

    from audiotree import AudioTree
    from audiotree.preview import render_preview

    batches = _dataset(corpus).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).batch(
        2, batch_fn=AudioTree.batch)
    result = render_preview(batches, tmp_path / "it", n=3, image_format="svg")
    assert len(result) == 3
    with pytest.raises(ValueError, match="n must be"):
        render_preview(_dataset(corpus), tmp_path / "x", n=0)
    with pytest.raises(ValueError, match="image_format"):
        render_preview(_dataset(corpus), tmp_path / "x", image_format="gif")


# ------------------------------------------------------------------ the page in a real browser
@pytest.mark.slow
def test_preview_command_loads_in_headless_chromium(corpus, tmp_path):
    chromium = chromium_or_skip()
    out = tmp_path / "preview"
    n = 6
    result = run_cli("preview", *[f"{k}={v}" for k, v in corpus.items()], "--out", out, "-n", n,
                     "--duration", "0.5", "--sample-rate", "16000", "--strategy", "loudest", "--num-tries", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Wrote {n} excerpts" in result.stdout
    assert len(list(out.rglob("*.png"))) == n and len(list(out.rglob("*.wav"))) == n

    with serve(out) as url:
        dump = headless(chromium, tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", url + "index.html")
        assert dump.returncode == 0, dump.stderr[-3000:]
        status = media_status(dump.stdout)
        assert status["players"] == n, status
        assert status["loaded"] == n and status["errors"] == 0, status
        assert all(d == pytest.approx(0.5, abs=0.01) for d in status["durations"]), status
        assert 'data-complete="true"' in dump.stdout

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "preview.png"
        shot.unlink(missing_ok=True)
        snap = headless(chromium, tmp_path / "profile2", "--virtual-time-budget=5000", "--hide-scrollbars",
                        "--window-size=1400,1000", f"--screenshot={shot}", url + "index.html")
        assert snap.returncode == 0, snap.stderr[-3000:]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_render_preview_of_items_whose_file_is_gone(tmp_path):
    from audiotree import AudioTree
    from audiotree.preview import render_preview

    t = np.arange(8000, dtype=np.float32) / 8000
    tree = AudioTree.create((0.3 * np.sin(2 * np.pi * 440 * t))[None], 8000, filepath=str(tmp_path / "gone.wav"),
                            source="tones", offset=2.0)
    result = render_preview([tree], tmp_path / "p", n=1, image_format="svg")
    [record] = result.excerpts
    assert record["file_duration"] is None and record["offset"] == 2.0 and record["duration"] == 1.0
    assert "<polyline" in (tmp_path / "p" / record["image"]).read_text()  # the excerpt's own loudness curve


def test_render_preview_gives_up_on_a_dataset_of_dropped_items(tmp_path):
    import grain

    from audiotree.preview import render_preview

    nothing = grain.MapDataset.range(10**9).map(lambda i: None)
    with pytest.raises(RuntimeError, match="no excerpts"):
        render_preview(nothing, tmp_path / "p", n=2)


def test_auto_format_falls_back_to_svg_without_matplotlib(corpus, tmp_path, monkeypatch):
    from audiotree.preview import render_preview

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails, as after `pip install .`
    result = render_preview(_dataset(corpus), tmp_path / "p", n=1)
    assert result.image_format == "svg" and result.excerpts[0]["image"].endswith(".svg")
    with pytest.raises(RuntimeError, match=r"audiotree\[plot\]"):
        render_preview(_dataset(corpus), tmp_path / "q", n=1, image_format="png")
