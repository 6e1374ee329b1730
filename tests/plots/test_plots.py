"""The scan and bench plots: what they mark, their size, and how they look in headless Chromium."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

FLAGGED = (0xC0, 0x39, 0x2B)  # the colour of bars of files below --duration / the cutoff


def _pixels(path):
    from PIL import Image

    with Image.open(path) as img:
        img.load()
        return img.size, np.asarray(img.convert("RGB"))


def _count(rgb: np.ndarray, colour: tuple[int, int, int]) -> int:
    return int((np.abs(rgb.astype(int) - colour).sum(axis=-1) < 12).sum())


def test_scan_plot_marks_short_and_quiet_files(tmp_path):
    from audiotree.plots import plot_scan
    from audiotree.plots.scan import HEIGHT, WIDTH

    durations = [0.1, 0.2, 3.0, 4.0, 5.0, 60.0]
    lufs = [-float("inf"), -60.0, -20.0, -18.0, -15.0, -22.0]
    marked = tmp_path / "marked.png"
    plot_scan(marked, durations=durations, lufs=lufs, min_duration=1.0, lufs_cutoff=-30.0, title="scan",
              caption="corpus: test")
    clean = tmp_path / "clean.png"
    plot_scan(clean, durations=durations, lufs=lufs, min_duration=0.05, lufs_cutoff=-70.0, title="scan")
    size, rgb = _pixels(marked)
    assert size == (WIDTH, HEIGHT)
    left, right = rgb[:, : WIDTH // 2], rgb[:, WIDTH // 2 :]
    # Red bars in both panels when files fall below the limits, none when nothing does.
    assert _count(left, FLAGGED) > 300 and _count(right, FLAGGED) > 150
    _, rgb_clean = _pixels(clean)
    assert _count(rgb_clean, FLAGGED) < 20


def test_scan_plot_without_loudness_and_bad_input(tmp_path, monkeypatch):
    from audiotree.plots import plot_scan

    path = tmp_path / "d.png"
    plot_scan(path, durations=[1.0, 1.0, 1.0])  # one value: a single bar, no loudness panel
    assert _pixels(path)[0] == (960, 400)
    with pytest.raises(ValueError, match="at least one"):
        plot_scan(path, durations=[])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(RuntimeError, match=r"needs matplotlib, a dependency of audiotree"):
        plot_scan(path, durations=[1.0])


def _bench_result():
    from audiotree.tuning import Measurement, Setting, TuneResult, select_knee

    def m(workers, threads, buffer, rate, rss_mb):
        return Measurement(Setting(workers, threads, buffer, 2 * threads), rate, 1.0, int(rss_mb * 2**20), 64, 1.0)

    # Memory of buffer 1 and buffer 4 lines is nearly equal: they must not hide each other.
    ms = [m(0, 0, 1, 50, 300), m(0, 2, 1, 55, 310), m(1, 0, 1, 90, 600), m(1, 0, 4, 92, 602),
          m(1, 2, 1, 91, 620), m(1, 2, 4, 91, 621), m(2, 0, 1, 97, 900), m(2, 0, 4, 99, 901),
          m(2, 2, 1, 98, 930), m(2, 2, 4, 100, 931)]
    best, knee, fits = select_knee(ms, tolerance=0.05, ram_budget_bytes=2000 * 2**20)
    return TuneResult(measurements=ms, best=best, knee=knee, tolerance=0.05, batch_size=32, item_bytes=10_000,
                      batch_bytes=320_000, baseline_rss_bytes=250 * 2**20, ram_budget_bytes=1200 * 2**20,
                      fits_budget=fits)


def test_bench_plot_has_caption_knee_in_both_panels_and_apart_lines(tmp_path):
    from audiotree.tuning import PLOT_HEIGHT, PLOT_WIDTH

    result = _bench_result()
    fig = result.plot(tmp_path / "bench.png", corpus="speech=data/speech", pipeline="1 s excerpts at 16000 Hz")
    assert _pixels(tmp_path / "bench.png")[0] == (PLOT_WIDTH, PLOT_HEIGHT)
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "audiotree bench" in texts and "corpus: speech=data/speech" in texts
    assert "pipeline: 1 s excerpts at 16000 Hz" in texts and "cores" in texts
    rate_ax, rss_ax = fig.axes[:2]
    for ax in (rate_ax, rss_ax):
        stars = [line for line in ax.lines if line.get_marker() == "*"]
        assert len(stars) == 1, "the knee is starred in both panels"
    knee_rss = [line for line in rss_ax.lines if line.get_marker() == "*"][0].get_ydata()[0]
    assert knee_rss == pytest.approx(result.knee.peak_rss_mb)
    # Lines whose values coincide differ in marker and in x (the small sideways offset).
    memory = [line for line in rss_ax.lines if line.get_marker() not in ("*", "None", None) and len(line.get_xdata()) > 1]
    assert len({line.get_marker() for line in memory}) == len(memory) == 4
    firsts = [float(line.get_xdata()[1]) for line in memory]
    assert len(set(firsts)) == 4 and max(firsts) - min(firsts) < 0.5


@pytest.mark.slow
def test_both_plots_decode_in_headless_chromium(tmp_path):
    from browser import assert_decoded, chromium_or_skip, image_page, page_status, screenshot

    from audiotree.plots import plot_scan
    from audiotree.plots.scan import HEIGHT, WIDTH
    from audiotree.tuning import PLOT_HEIGHT, PLOT_WIDTH

    chromium = chromium_or_skip()
    _bench_result().plot(tmp_path / "bench.png", corpus="test corpus", pipeline="test pipeline")
    plot_scan(tmp_path / "scan.png", durations=[0.1, 2.0, 3.0, 30.0], lufs=[-50.0, -20.0, -float("inf"), -10.0],
              min_duration=1.0, lufs_cutoff=-40.0, title="scan", caption="test")
    for name, size in (("bench.png", (PLOT_WIDTH, PLOT_HEIGHT)), ("scan.png", (WIDTH, HEIGHT))):
        page = image_page(tmp_path, [tmp_path / name], title=name.removesuffix(".png"))
        status = page_status(chromium, page, tmp_path / f"profile-{name}")
        assert_decoded(status, {name: size})
        screenshot(chromium, page, tmp_path / f"shot-{name}", tmp_path / f"{name.removesuffix('.png')}-plot-screenshot.png",
                   width=size[0], height=size[1])
    # A broken file is reported as such (the check can fail).
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    status = page_status(chromium, image_page(tmp_path, [tmp_path / "bad.png"], title="bad"), tmp_path / "profile-bad")
    assert status["broken"] == 1 and status["decoded"] == 0


def test_mix_plot_draws_each_group_served_and_asked(tmp_path):
    import grain

    from audiotree.plots.mix import MIX_PLOT_HEIGHT, MIX_PLOT_WIDTH, plot_mix_proportions
    from audiotree.sources import WeightSchedule, realised_proportions
    from audiotree.sources.mixing import mix_shuffled

    schedule = WeightSchedule({0: {"a": 0.9, "b": 0.1}, 1000: {"a": 0.1, "b": 0.9}})
    endless = grain.MapDataset.range(10).repeat()
    report = realised_proportions(mix_shuffled([endless, endless], schedule, seed=0, names=["a", "b"]), 2000)
    fig = plot_mix_proportions(report, tmp_path / "mix.png", unit="item")
    size, rgb = _pixels(tmp_path / "mix.png")
    assert size == (MIX_PLOT_WIDTH, MIX_PLOT_HEIGHT)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    lines = ax.get_lines()  # per group: the weights (dashed), then what was served (solid)
    assert [line.get_linestyle() for line in lines] == ["--", "-", "--", "-"]
    np.testing.assert_allclose(lines[3].get_ydata(), report.realised[:, 1])
    np.testing.assert_allclose(lines[2].get_ydata(), report.expected[:, 1])
    for colour in ((0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)):
        assert _count(rgb, colour) > 200
    empty = report._replace(starts=[], realised=report.realised[:0], expected=report.expected[:0])
    with pytest.raises(ValueError, match="no window"):
        plot_mix_proportions(empty, tmp_path / "empty.png")
