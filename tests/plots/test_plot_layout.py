"""Text layout of the scan and bench plots: every text inside the figure, none over another or over a bar.

The boxes are the renderer's own (``get_window_extent``), in pixels of the PNG.
"""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

LONG_CORPUS = "corpus: " + ", ".join(f"group{i}=/data/a/rather/long/path/to/corpus/folder/{i}" for i in range(6))
LONG_PIPELINE = "create_balanced_audio_dataset, 3 s excerpts at 48000 Hz, strategy loudest, lufs_cutoff=-40, " \
                "num_tries=5, weights speech=0.5,music=0.3,effects=0.2"


def _texts(fig):
    """(artist, box) of every visible, non-empty text in the figure; each axis's drawn tick labels as one box.

    Tick labels are left to the axis: matplotlib keeps labels of ticks outside
    the view, which it does not draw, and ``Axis.get_tightbbox`` counts only
    those it draws (and the axis label).
    """
    renderer = fig.canvas.get_renderer()
    ticks = set()
    found = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
            box = axis.get_tightbbox(renderer)
            if box is not None and box.width > 0:
                found.append((axis.label, box))
            ticks.add(id(axis.label))
    for artist in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent")):
        if id(artist) in ticks or not artist.get_visible() or not artist.get_text().strip():
            continue
        found.append((artist, artist.get_window_extent(renderer)))
    return found


def _inside(box, fig) -> bool:
    return box.x0 >= -0.5 and box.y0 >= -0.5 and box.x1 <= fig.bbox.width + 0.5 and box.y1 <= fig.bbox.height + 0.5


def _assert_inside(fig):
    outside = [(a.get_text()[:60], tuple(round(v) for v in b.extents)) for a, b in _texts(fig) if not _inside(b, fig)]
    assert not outside, f"text cut at the figure's edge: {outside}"


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5


def _bench(knee_workers: int):
    from audiotree.tuning import Measurement, Setting, TuneResult

    def m(workers, threads, rate, rss_mb):
        return Measurement(Setting(workers, threads, 1, 2 * threads), rate, 1.0, int(rss_mb * 2**20), 64, 1.0)

    ms = [m(w, t, 40 + 25 * w + t, 300 + 311 * w + t) for w in (0, 1, 2, 4) for t in (0, 2)]
    knee = next(x for x in ms if x.setting.num_workers == knee_workers and x.setting.num_threads == 0)
    best = max(ms, key=lambda x: x.items_per_second)
    return TuneResult(measurements=ms, best=best, knee=knee, tolerance=0.05, batch_size=32, item_bytes=10_000,
                      batch_bytes=320_000, baseline_rss_bytes=250 * 2**20, ram_budget_bytes=None, fits_budget=True)


@pytest.mark.parametrize("knee_workers", [0, 4])  # the knee at the left and at the right edge
def test_bench_plot_text_fits_and_the_knee_label_covers_no_axis_text(tmp_path, knee_workers):
    result = _bench(knee_workers)
    fig = result.plot(tmp_path / "bench.png", corpus=LONG_CORPUS[8:], pipeline=LONG_PIPELINE)
    _assert_inside(fig)
    texts = _texts(fig)
    caption = " ".join(a.get_text() for a, _ in texts if "machine:" in a.get_text())
    assert "machine:" in caption and "cores" in caption.split("machine:")[1], caption  # the caption is whole
    knees = [(a, b) for a, b in texts if a.get_text().startswith("knee") and a.axes is not None]
    assert len(knees) == 2, [a.get_text() for a, _ in knees]
    for knee, box in knees:
        ax = knee.axes
        renderer = fig.canvas.get_renderer()
        for other in (ax.yaxis.get_tightbbox(renderer), ax.xaxis.get_tightbbox(renderer),
                      ax.title.get_window_extent(renderer)):
            assert not _overlaps(box, other), (knee.get_text(), box.extents, other.extents)
        # Inside its panel: not over the y tick labels and axis label, not cut at the figure's left edge.
        assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1, (knee.get_text(), box.extents, ax.bbox.extents)


@pytest.mark.parametrize("cutoff", [-60.0, -20.0, -12.0])  # the cutoff near either edge and among the bars
def test_scan_plot_cutoff_label_covers_no_bar_and_fits(tmp_path, cutoff):
    from audiotree.plots import plot_scan

    durations = [0.1, 0.2, 3.0, 4.0, 5.0, 60.0, 7.0, 8.0]
    lufs = [-58.0, -40.0, -30.0, -22.0, -21.0, -20.5, -18.0, -13.0]
    fig = plot_scan(tmp_path / "scan.png", durations=durations, lufs=lufs, min_duration=1.0, lufs_cutoff=cutoff,
                    title="audiotree scan", caption=LONG_CORPUS + "\n" + LONG_PIPELINE)
    _assert_inside(fig)
    renderer = fig.canvas.get_renderer()
    labels = [(a, b) for a, b in _texts(fig) if a.get_text().startswith("cutoff")]
    assert len(labels) == 1
    label, box = labels[0]
    ax = label.axes
    for bar in ax.patches:
        bar_box = bar.get_window_extent(renderer)
        if bar_box.width > 0 and bar_box.height > 0:
            assert not _overlaps(box, bar_box), (cutoff, box.extents, bar_box.extents)
    legend = ax.get_legend()
    if legend is not None:
        assert not _overlaps(box, legend.get_window_extent(renderer)), (cutoff, box.extents)
    assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and box.y1 <= ax.bbox.y1
    texts = [b for a, b in _texts(fig) if a.get_text().startswith(("corpus:", "create_balanced", "  "))]
    assert texts, "the caption is drawn"
