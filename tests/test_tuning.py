"""The tuner behind ``audiotree bench``: measurements, the knee, the RAM budget, process-tree memory."""

from __future__ import annotations

import builtins
import subprocess
import sys
import time

import grain
import pytest

from audiotree.tuning import (
    Measurement,
    Setting,
    TuneResult,
    default_workers,
    process_tree_rss,
    select_knee,
    tune,
)


def _m(workers, threads, buffer, rate, rss_mb=500):
    setting = Setting(workers, threads, buffer, 2 * threads)
    return Measurement(setting, rate, 1.0, int(rss_mb * 2**20), 64, 1.0)


def test_knee_is_the_cheapest_setting_within_tolerance():
    ms = [_m(0, 0, 1, 50), _m(1, 0, 1, 90), _m(2, 0, 1, 97), _m(4, 0, 1, 100), _m(2, 2, 1, 99), _m(8, 0, 1, 98)]
    best, knee, fits = select_knee(ms, tolerance=0.05)
    assert best is ms[3] and knee is ms[2] and fits is None
    # A zero tolerance picks the best itself; a generous one the cheapest that is close.
    assert select_knee(ms, tolerance=0.0)[1] is ms[3]
    assert select_knee(ms, tolerance=0.2)[1] is ms[1]


def test_ram_budget_limits_the_candidates():
    ms = [_m(0, 0, 1, 50, 300), _m(1, 0, 1, 90, 600), _m(2, 0, 1, 97, 900), _m(4, 0, 1, 100, 1500)]
    best, knee, fits = select_knee(ms, tolerance=0.05, ram_budget_bytes=1000 * 2**20)
    assert fits is True and best is ms[2] and knee is ms[2]
    best, knee, fits = select_knee(ms, tolerance=0.05, ram_budget_bytes=100 * 2**20)
    assert fits is False and best is ms[3]  # nothing fits: judged without the budget, and said so
    with pytest.raises(ValueError):
        select_knee([])


def test_default_workers_follow_the_core_count():
    assert default_workers(1) == [0, 1]
    assert default_workers(2) == [0, 1, 2]
    assert default_workers(6) == [0, 1, 2, 4, 6]
    assert default_workers(8) == [0, 1, 2, 4, 8]


def test_buffered_bytes_match_the_memory_arithmetic():
    # memory.py: workers x (read buffer + per-worker buffer x element) + the parent's queue.
    s = Setting(num_workers=4, num_threads=2, per_worker_buffer_size=3, prefetch_buffer_size=4)
    item, batch = 1000, 32_000
    assert s.buffered_bytes(item, batch) == 4 * ((4 + 2) * item + 3 * batch) + 4 * 3 * batch
    assert Setting(0, 2, 1, 4).buffered_bytes(item, batch) == 6 * item


def test_process_tree_rss_counts_children_with_and_without_psutil(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(80 * 2**20); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        alone = None
        while time.monotonic() < deadline:
            # Our own RSS plus a child holding >= 80 MB.
            alone = process_tree_rss(child.pid)
            if alone and alone > 80 * 2**20:
                break
            time.sleep(0.05)
        assert alone and alone > 80 * 2**20
        with_psutil = process_tree_rss()
        real_import = builtins.__import__

        def no_psutil(name, *args, **kwargs):
            if name == "psutil":
                raise ImportError("no psutil here")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_psutil)
        from_proc = process_tree_rss()
        child_from_proc = process_tree_rss(child.pid)
    finally:
        child.kill()
        child.wait()
    assert with_psutil > alone and from_proc > alone
    assert abs(from_proc - with_psutil) < 0.2 * with_psutil
    assert abs(child_from_proc - alone) < 0.2 * alone


@pytest.mark.slow
def test_tune_in_process_settings(corpus):
    from audiotree.sources import create_audio_dataset

    ds = create_audio_dataset(str(corpus["music"]), duration=0.2, sample_rate=8000, num_epochs=None)
    seen = []
    result = tune(ds, workers=[0], threads=[0, 2], buffers=[1], batch_size=4, batches=2, ram_budget_mb=100_000,
                  on_measurement=seen.append)
    assert isinstance(result, TuneResult)
    assert [m.setting for m in result.measurements] == [Setting(0, 0, 1, 0), Setting(0, 2, 1, 4)] and len(seen) == 2
    for m in result.measurements:
        # Every setting produced a measurement (values, not speeds, are checked).
        measured = (m.items_per_second, m.first_batch_seconds, m.peak_rss_bytes)
        assert m.items == 8 and min(measured) > 0
    assert isinstance(result.read_options, grain.ReadOptions)
    assert isinstance(result.multiprocessing_options, grain.MultiprocessingOptions)
    assert result.multiprocessing_options.num_workers == 0
    assert result.batch_bytes >= 4 * 1600 * 4  # the waveforms at least
    assert result.fits_budget is True
    text = result.summary()
    assert "Knee:" in text and "items/s" in text
    payload = result.to_dict()
    assert payload["knee"] in payload["measurements"] and len(payload["measurements"]) == 2
    # The options work as documented.
    it = ds.to_iter_dataset(result.read_options)
    assert next(iter(it)).waveform.shape == (1, 1, 1600)


def test_tune_checks_its_arguments(corpus):
    from audiotree.sources import create_audio_dataset

    ds = create_audio_dataset(str(corpus["music"]), duration=0.2, sample_rate=8000, num_epochs=None)
    with pytest.raises(ValueError, match="workers"):
        tune(ds, workers=[-1])
    with pytest.raises(ValueError, match="buffers"):
        tune(ds, workers=[0], buffers=[0])
    with pytest.raises(ValueError, match="tolerance"):
        tune(ds, workers=[0], tolerance=1.5)
    with pytest.raises(TypeError, match="MapDataset"):
        tune([1, 2, 3], workers=[0])


def test_plot_and_summary_of_a_grid(tmp_path):
    pytest.importorskip("matplotlib")
    ms = [_m(0, 0, 1, 50, 300), _m(0, 2, 1, 55, 310), _m(1, 0, 1, 90, 600), _m(1, 0, 4, 92, 650),
          _m(1, 2, 1, 91, 620), _m(2, 0, 1, 97, 900), _m(2, 0, 4, 99, 960), _m(2, 2, 4, 100, 990)]
    best, knee, fits = select_knee(ms, tolerance=0.05, ram_budget_bytes=2000 * 2**20)
    result = TuneResult(measurements=ms, best=best, knee=knee, tolerance=0.05, batch_size=32, item_bytes=10_000,
                        batch_bytes=320_000, baseline_rss_bytes=250 * 2**20, ram_budget_bytes=2000 * 2**20,
                        fits_budget=fits, max_per_worker_buffer_size=12)
    assert knee.setting == Setting(2, 0, 1, 0)
    assert result.multiprocessing_options.num_workers == 2
    assert result.multiprocessing_options.per_worker_buffer_size == 1
    assert "per_worker_buffer_size <= 12" in result.recommendation()
    lines = result.summary().splitlines()
    assert len(lines) == 1 + len(ms) + 1 and lines[6].endswith("<- knee") and lines[8].endswith("<- best")
    path = tmp_path / "grid.png"
    result.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
