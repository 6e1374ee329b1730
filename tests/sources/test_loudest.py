"""``loudest`` on sparse long files: with a corpus index (profile plan) and without (probe search).

Every file is room tone at -60 dBFS with one noise event at -20 dBFS, so each
holds 3 s windows near -20 LUFS and nothing else above -55 LUFS. Files are
8 kHz mono (MP3 at 8 kHz is MPEG-2.5) so that an hour encodes in about a minute;
each format's files are written once per session, the 60-minute ones in a pool.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest
import soundfile

from audiotree.dsp.loudness import integrated_loudness, measure
from audiotree import AudioTree
from audiotree.excerpts.config import ExcerptConfig
from audiotree.excerpts.plan import EXCERPT_METHODS, build_plan
from audiotree.excerpts.search import probe_layout
from audiotree.index import build_index
from audiotree.sources import Corpus, Output, create_audio_dataset, create_balanced_audio_dataset

RATE = 8000
DURATION = 3.0
CUTOFF = ExcerptConfig().lufs_cutoff
FORMATS = ("wav", "flac", "ogg", "mp3")
SHORT = (40, 180, 600)  # seconds
ITEMS = 24
LOUDEST = ExcerptConfig(strategy="loudest")  # the default settings


def write_sparse(path: Path, seconds: float, event: float, seed: int) -> float:
    """Room tone with one event of ``event`` s at a random place; returns the event's start."""
    rng = np.random.default_rng(seed)
    start = int(rng.uniform(1.0, seconds - event - 1.0) * RATE)
    n = int(event * RATE)
    with soundfile.SoundFile(path, "w", RATE, 1) as f:
        for first in range(0, int(seconds * RATE), RATE * 20):  # chunked: libvorbis crashes on huge writes
            count = min(RATE * 20, int(seconds * RATE) - first)
            x = (0.001 * rng.standard_normal(count)).astype(np.float32)
            lo, hi = max(start, first), min(start + n, first + count)
            if lo < hi:
                x[lo - first:hi - first] = (0.1 * rng.standard_normal(hi - lo)).astype(np.float32)
            f.write(x)
    return start / RATE


def _write_format(root: Path, ext: str, lengths: tuple[int, ...]) -> Path:
    folder = root / ext
    folder.mkdir(parents=True, exist_ok=True)
    for seconds in lengths:
        write_sparse(folder / f"s{seconds}.{ext}", seconds, DURATION - 0.5, seed=seconds)
        write_sparse(folder / f"e2_{seconds}.{ext}", seconds, 2.0, seed=seconds + 1) if seconds == 40 else None
    return folder


@pytest.fixture(scope="session")
def sparse_short(tmp_path_factory) -> dict[str, Path]:
    """Per format: sparse 40 s, 3 min and 10 min files, plus a 40 s file with a 2 s event."""
    root = tmp_path_factory.mktemp("sparse")
    return {ext: _write_format(root, ext, SHORT) for ext in FORMATS}


@pytest.fixture(scope="session")
def sparse_hour(tmp_path_factory) -> dict[str, Path]:
    """Per format: one 60-minute sparse file (written in 2 worker processes)."""
    root = tmp_path_factory.mktemp("sparse_hour")
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        futures = {ext: pool.submit(_write_format, root, ext, (3600,)) for ext in ("mp3", "ogg", "flac", "wav")}
        return {ext: f.result() for ext, f in futures.items()}


def _index(folder: Path) -> Path:
    out = folder.parent / f"{folder.name}.parquet"
    if not out.exists():
        build_index(folder, out, executor="serial", show_progress=False)
    return out


def _shares(ds, n_files: int) -> dict[str, list[float]]:
    """``{file name: [lufs of each item]}`` over ``ITEMS`` epochs."""
    out: dict[str, list[float]] = {}
    for i in range(ITEMS * n_files):
        tree = ds[i]
        assert tree is not None
        name = Path(tree.filepath[0]).name
        out.setdefault(name, []).append(float(tree.lufs[0]))
    return out


def _check_items(ds, n_files: int, method: str, share: float) -> dict:
    lufs = _shares(ds, n_files)
    assert len(lufs) == n_files and all(len(v) == ITEMS for v in lufs.values())
    got = {name: float(np.mean(np.asarray(v) > CUTOFF)) for name, v in lufs.items()}
    assert all(s >= share for s in got.values()), got
    tree = ds[0]
    assert EXCERPT_METHODS[int(tree.extras["excerpt_method"][0])] == method
    # The item's lufs is the loudness of the samples it carries (native rate, no resampling): the meter's
    # reading by search; by index the profile's, within 0.1 LU of the meter on program material.
    measured = integrated_loudness(tree.waveform[0], RATE)
    assert abs(float(tree.lufs[0]) - measured) < (0.1 if method == "index" else 0.01)
    windows = tree.lufs_windows[0]
    reference = measure(tree.waveform[0], RATE)[1]
    loud = reference > -50
    np.testing.assert_allclose(windows[loud], reference[loud], atol=0.15)
    return got


def _dataset(n_files: int, **kwargs):
    return create_audio_dataset(num_epochs=ITEMS, shuffle=False, sample_rate=RATE, duration=DURATION,
                                excerpt=LOUDEST, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("ext", FORMATS)
def test_sparse_files_with_index_always_hit(sparse_short, ext):
    folder = sparse_short[ext]
    files = sorted(folder.iterdir())
    _check_items(_dataset(len(files), corpus=Corpus(index=_index(folder))), len(files), "index", 0.99)


@pytest.mark.slow
@pytest.mark.parametrize("ext", FORMATS)
def test_sparse_files_without_index_search_hits(sparse_short, ext):
    folder = sparse_short[ext]
    files = sorted(folder.iterdir())
    _check_items(_dataset(len(files), filepaths=files), len(files), "search", 0.95)


@pytest.mark.slow
@pytest.mark.parametrize("ext", FORMATS)
def test_hour_long_files(sparse_hour, ext):
    folder = sparse_hour[ext]
    _check_items(_dataset(1, corpus=Corpus(index=_index(folder))), 1, "index", 0.99)
    # Without an index: 2400 probes (duration / 2 apart) always hit a 2.5 s event.
    _check_items(_dataset(1, filepaths=sorted(folder.iterdir())), 1, "search", 0.95)


def test_two_second_event_is_found_and_well_above_cutoff(sparse_short):
    path = sparse_short["flac"] / "e2_40.flac"
    for seed in range(ITEMS):
        tree = AudioTree.loudest_excerpt(path, np.random.default_rng(seed), LOUDEST, duration=DURATION, sample_rate=RATE)
        assert float(tree.lufs[0]) > CUTOFF + 15  # the 2 s event dominates the gated loudness of its window


def test_items_are_deterministic_with_index(sparse_short):
    folder = sparse_short["wav"]
    a, b = _dataset(1, corpus=Corpus(index=_index(folder))), _dataset(1, corpus=Corpus(index=_index(folder)))
    for i in (0, 5, 17):
        assert float(a[i].offset[0]) == float(b[i].offset[0])
        np.testing.assert_array_equal(a[i].waveform, b[i].waveform)
    offsets = {round(float(a[i].offset[0]), 1) for i in range(12)}
    assert len(offsets) > 1  # draws spread over the qualifying starts
    # Spawned workers get the dataset pickled (plan and profiles included) and draw the same items.
    import pickle

    c = pickle.loads(pickle.dumps(a))
    assert c[5].offset[0] == a[5].offset[0] and c[5].lufs[0] == a[5].lufs[0]


def test_probe_layout_covers_the_file_at_half_duration():
    rng = np.random.default_rng(3)
    starts, length = probe_layout(RATE * 600, RATE, DURATION, rng)
    gaps = np.diff(starts) / RATE
    assert gaps.max() <= DURATION / 2 + 1e-3 and starts[0] / RATE <= DURATION / 2
    assert length / RATE >= 0.01 and starts.size * length <= max(2 * DURATION, starts.size * 0.01) * RATE + starts.size


def test_plan_margin_and_short_files():
    quiet, loud = 1e-9, 1e-2
    edge = 10 ** ((CUTOFF + 0.2 + 0.691) / 10)  # 0.2 LU above the cutoff: inside the margin
    plan = build_plan([np.full(50, edge), np.r_[np.full(5, loud), np.full(5, quiet)], np.full(50, quiet)],
                      duration=DURATION, cutoff=CUTOFF)
    assert plan.qualifying().tolist() == [1]  # the short loud file has one window: the whole file
    assert plan.row(0).best_lufs == pytest.approx(CUTOFF + 0.2, abs=1e-6)
    sub = plan.take(np.array([2, 1]))
    assert sub.qualifying().tolist() == [1] and sub.row(1).draw(np.random.default_rng(0)) == 0


# ---------------------------------------------------------------- silent files
@pytest.fixture(scope="module")
def with_silent(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("silent")
    for group in ("a", "b"):
        (root / group).mkdir()
        write_sparse(root / group / "loud.flac", 20, 2.5, seed=1)
    rng = np.random.default_rng(2)
    soundfile.write(root / "a" / "silent.flac", (0.001 * rng.standard_normal(RATE * 20)).astype(np.float32), RATE)
    build_index({"a": root / "a", "b": root / "b"}, root / "ix.parquet", executor="serial", show_progress=False)
    return root


def test_skip_silent_leaves_files_out_without_bending_weights(with_silent):
    ds = create_balanced_audio_dataset(corpus=Corpus(index=with_silent / "ix.parquet", group_by="group"), sample_rate=RATE,
                                       duration=DURATION, excerpt=ExcerptConfig(strategy="loudest", skip_silent=True))
    items = [ds[i] for i in range(40)]
    assert all(Path(t.filepath[0]).name == "loud.flac" and float(t.lufs[0]) > CUTOFF for t in items)
    sources = [t.source[0] for t in items]
    assert 16 <= sources.count("a") <= 24  # weights 1:1, as before the silent file left group "a"
    plain = create_balanced_audio_dataset(corpus=Corpus(index=with_silent / "ix.parquet", group_by="group"), sample_rate=RATE,
                                          duration=DURATION, excerpt=ExcerptConfig(strategy="loudest"))
    assert [plain[i].source[0] for i in range(40)] == sources  # the same group sequence


def test_silent_file_on_failure_is_decided_from_the_index(with_silent):
    ix = with_silent / "ix.parquet"

    def items(on_failure):
        ds = create_audio_dataset(corpus=Corpus(index=ix), shuffle=False, sample_rate=RATE, duration=DURATION,
                                  excerpt=ExcerptConfig(strategy="loudest", on_failure=on_failure))
        return {Path(ds[i].filepath[0]).name if ds[i] is not None else None: ds[i] for i in range(len(ds))}

    kept = items("keep")
    assert float(kept["silent.flac"].lufs[0]) < CUTOFF < float(kept["loud.flac"].lufs[0])
    assert set(items("skip")) == {"loud.flac", None}
    with pytest.raises(RuntimeError, match=r"silent\.flac.*corpus index"):
        items("raise")


def test_skip_silent_errors(with_silent, tmp_path):
    with pytest.raises(ValueError, match=r"needs Corpus\(index="):
        create_audio_dataset(filepaths=[with_silent / "a" / "silent.flac"], sample_rate=RATE,
                             excerpt=ExcerptConfig(strategy="loudest", skip_silent=True))
    with pytest.raises(ValueError, match="skip_silent only applies"):
        ExcerptConfig(skip_silent=True)
    with pytest.raises(ValueError, match="True or False"):
        ExcerptConfig(strategy="loudest", skip_silent=1)
    build_index(with_silent / "a", tmp_path / "a.parquet", executor="serial", show_progress=False)
    with pytest.raises(RuntimeError, match="leaves nothing to sample"):
        create_audio_dataset(corpus=Corpus(index=tmp_path / "a.parquet"), sample_rate=RATE, duration=DURATION,
                             excerpt=ExcerptConfig(strategy="loudest", skip_silent=True, lufs_cutoff=-10.0))


def test_profile_loudness_of_one_window_matches_window_loudness():
    from audiotree.index.profile import window_loudness

    rng = np.random.default_rng(5)
    profile = (10 ** rng.uniform(-9, -1, 400)).astype(np.float32)
    profile[100:160] = 0  # digital silence is gated away
    # cutoff -90: the blocks below are qualifying starts (looked up) but for 120 (all silence); -30: few
    # qualify, the rest are gated from the stored 400 ms blocks.
    for cutoff in (-90.0, -30.0):
        plan = build_plan([profile], duration=DURATION, cutoff=cutoff, keep_profiles=True).row(0)
        reference = window_loudness(profile, plan.window_blocks)
        assert 0 < int(plan.ends[-1]) < reference.size
        for block in (0, 90, 120, 200, 370, *np.flatnonzero(reference > cutoff + 0.5)[:3]):
            lufs, windows = plan.loudness(int(block))
            # float32 readings: within 1e-5 LU of the float64 reference
            assert lufs == pytest.approx(reference[block], abs=1e-5) or lufs == reference[block] == -np.inf
            quads = profile[block:block + 28].astype(np.float64).reshape(7, 4).mean(axis=1)
            with np.errstate(divide="ignore"):
                np.testing.assert_allclose(windows, -0.691 + 10 * np.log10(quads), atol=1e-4)


def test_index_mix_differs_from_dataset_meters_the_winner(sparse_short):
    # A mono index read by a mono=False dataset: the profile does not describe the item's mix, so the
    # winner is metered (its lufs is the meter's exactly) and a draw the meter rejects is redrawn.
    folder = sparse_short["flac"]
    ds = create_audio_dataset(corpus=Corpus(index=_index(folder)), output=Output(mono=False), num_epochs=2, shuffle=False, sample_rate=RATE,
                              duration=DURATION, excerpt=LOUDEST)
    for i in range(len(ds)):
        tree = ds[i]
        assert EXCERPT_METHODS[int(tree.extras["excerpt_method"][0])] == "index"
        assert float(tree.lufs[0]) > CUTOFF
        assert abs(float(tree.lufs[0]) - integrated_loudness(tree.waveform[0], RATE)) < 0.01


def test_plan_draws_are_uniform_over_every_run_of_every_row():
    # Two rows with several runs each; after take() (reordered) every qualifying start is drawn, evenly.
    quiet, loud = 1e-9, 1e-2
    a = np.r_[np.full(40, quiet), np.full(35, loud), np.full(60, quiet), np.full(32, loud), np.full(40, quiet)]
    b = np.r_[np.full(33, loud), np.full(70, quiet), np.full(45, loud)]
    plan = build_plan([a, b], duration=DURATION, cutoff=CUTOFF).take(np.array([1, 0]))
    for row, profile in ((0, b), (1, a)):
        from audiotree.index.profile import window_loudness

        expected = set(np.flatnonzero(window_loudness(profile, 30) > CUTOFF + 0.5).tolist())
        rp = plan.row(row)
        assert rp.count.size == 2 and int(rp.ends[-1]) == len(expected)
        rng = np.random.default_rng(row)
        draws = np.array([rp.draw(rng) for _ in range(200 * len(expected))])
        assert set(draws.tolist()) == expected
        counts = np.unique(draws, return_counts=True)[1]
        assert counts.min() > 100 and counts.max() < 300  # ~200 each
