"""The index's quality columns against synthetic files with known degradations (issue 41)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.dsp.quality import QUALITY_COLUMNS, QualityMeter
from audiotree.index import build_index, open_index
from audiotree.index.quality import require_quality
from audiotree.quality_synth import RATE, quality_cases


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality") / "audio"
    root.mkdir()
    cases = quality_cases(10.0)
    for case in cases:
        soundfile.write(root / f"{case.name}.wav", case.samples, RATE, subtype="PCM_16")
    out = root.parent / "q.parquet"
    build_index(str(root), out, executor="serial", show_progress=False)
    table = pq.read_table(out)
    names = [p.rsplit("/", 1)[-1][:-4] for p in table.column("path").to_pylist()]
    rows = {name: {c: table.column(c)[i].as_py() for c in QUALITY_COLUMNS + ("sample_rate",)}
            for i, name in enumerate(names)}
    return {case.name: (case.truth, rows[case.name]) for case in cases}, out


@pytest.mark.slow
def test_bandwidth_of_upsampled_files_is_their_original_nyquist_and_native_files_are_full_band(measured):
    cases, _ = measured
    for name, nyquist in (("upsampled-8k", 4000), ("upsampled-16k", 8000), ("upsampled-22k", 11025)):
        truth, row = cases[name]
        assert row["bandwidth_hz"] == pytest.approx(nyquist, rel=0.10), name
        assert row["sample_rate"] / 2 == RATE / 2  # the file's own Nyquist is its rate's half
    for name in ("noise", "music"):
        assert cases[name][1]["bandwidth_hz"] >= 0.9 * RATE / 2, name


@pytest.mark.slow
def test_clip_share_dc_offset_and_silence_share_are_within_their_bounds(measured):
    cases, _ = measured
    for level in (0.3, 0.5, 0.7):
        truth, row = cases[f"clipped-{level}"]
        assert row["clip_share"] == pytest.approx(truth["clip_share"], rel=0.10), level
        assert row["clip_longest"] >= 3
    assert cases["music"][1]["clip_share"] == 0 and cases["music"][1]["clip_longest"] == 0
    assert abs(cases["dc"][1]["dc_offset"] - 0.01) <= 0.002
    assert abs(cases["music"][1]["dc_offset"]) <= 0.002
    assert abs(cases["silent-80"][1]["silence_share"] - 0.8) <= 0.05
    assert cases["noise"][1]["silence_share"] == 0
    # Mono files have no channel correlation: null in the index.
    assert cases["music"][1]["channel_corr"] is None


@pytest.mark.slow
def test_snr_estimates_rank_correctly_and_are_within_4_db(measured):
    cases, _ = measured
    for kind in ("white", "pink"):
        estimates = [cases[f"{kind}-{snr}"][1]["snr_db"] for snr in (0, 10, 20, 30)]
        assert estimates == sorted(estimates), kind
        for snr, got in zip((0, 10, 20, 30), estimates):
            assert abs(got - snr) <= 4.0, (kind, snr, got)


def test_stereo_correlation_and_longest_clipped_run(tmp_path):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(RATE * 2), rng.standard_normal(RATE * 2)
    left, right = 0.2 * a, 0.2 * (0.6 * a + 0.8 * b)  # correlation 0.6
    x = np.stack([left, right], axis=1)
    x[1000:1050, 0] = 1.0  # a held full-scale run of 50 samples in one channel
    x[5000:5002, 1] = -1.0  # two samples at full scale are no clipped run
    soundfile.write(tmp_path / "st.wav", x, RATE, subtype="FLOAT")
    build_index(str(tmp_path), tmp_path / "i.parquet", executor="serial", show_progress=False)
    row = {c: v[0] for c, v in pq.read_table(tmp_path / "i.parquet").to_pydict().items()}
    assert row["channel_corr"] == pytest.approx(0.6, abs=0.02)
    assert row["clip_longest"] == 50
    assert row["clip_share"] == pytest.approx(50 / x.size)


def test_a_clipped_run_across_chunks_counts_as_when_pushed_whole():
    x = np.zeros((3000, 2), np.float32)
    x[:, 0] = 0.1 * np.sin(np.arange(3000) / 5)
    x[990:1010, 0] = 0.9  # the ceiling: a run of 20 across the first boundary
    x[1999:2001, 1] = -0.9  # a run of 2 across the second: not clipped
    x[2500:2502, 1] = -0.9
    whole = QualityMeter(RATE, channels=2)
    whole.push(x)
    split = QualityMeter(RATE, channels=2)
    for lo in (0, 1000, 2000):
        split.push(x[lo:lo + 1000])
    for meter in (whole, split):
        q = meter.result()
        assert (q["clip_longest"], q["clip_share"]) == (20, 20 / x.size)


def test_header_only_indexes_have_null_quality_and_features_say_how_to_get_it(tmp_path):
    soundfile.write(tmp_path / "a.wav", np.zeros(RATE, np.float32), RATE)
    out = tmp_path / "h.parquet"
    build_index(str(tmp_path), out, loudness=False, executor="serial", show_progress=False)
    ix = open_index(out, columns="all")
    assert all(ix.table.column(c).null_count == 1 for c in QUALITY_COLUMNS)
    with pytest.raises(ValueError, match=r"where= needs the index's quality columns .* built without loudness"):
        require_quality(ix.path, ix.meta, "where=")


def test_an_index_from_before_quality_opens_and_an_update_measures_its_rows(tmp_path):
    root = tmp_path / "audio"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.wav", "b.wav"):
        soundfile.write(root / name, (0.1 * rng.standard_normal(RATE)).astype(np.float32), RATE)
    fresh = tmp_path / "fresh.parquet"
    build_index(str(root), fresh, executor="serial", show_progress=False)
    table = pq.read_table(fresh)
    meta = json.loads(table.schema.metadata[b"audiotree"])
    meta["format_version"] = [1, 2]
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(list(QUALITY_COLUMNS)).replace_schema_metadata(
        {b"audiotree": json.dumps(meta).encode()}), old)
    ix = open_index(old, columns="all")  # opens: the quality columns read as null
    assert ix.table.column("snr_db").null_count == 2
    with pytest.raises(ValueError, match=r"written before the quality columns existed .* Rebuild it"):
        require_quality(ix.path, ix.meta, "where=")
    report = build_index(str(root), old, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (2, 0)  # read again, to measure them
    assert pq.read_table(old).equals(pq.read_table(fresh))


@pytest.mark.slow
def test_quality_columns_are_labels_items_carry(measured):
    from pathlib import Path

    from audiotree.sources import Corpus, create_audio_dataset

    cases, out = measured
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["snr_db", "bandwidth_hz", "channel_corr"]),
                              num_epochs=1, shuffle=False, sample_rate=16_000, duration=0.5)
    for i in range(len(ds)):
        item = ds[i]
        truth, row = cases[Path(item.filepath[0]).stem]
        assert item.extras["bandwidth_hz"].shape == (1,)
        assert float(item.extras["bandwidth_hz"][0]) == pytest.approx(row["bandwidth_hz"])
        assert float(item.extras["snr_db"][0]) == pytest.approx(row["snr_db"])
        assert np.isnan(item.extras["channel_corr"][0])  # mono: null in the index, NaN in an item


def test_quality_labels_of_an_index_without_them_say_how_to_get_them(tmp_path):
    from audiotree.sources import Corpus, create_audio_dataset

    soundfile.write(tmp_path / "a.wav", np.zeros(RATE, np.float32), RATE)
    out = tmp_path / "h.parquet"
    build_index(str(tmp_path), out, loudness=False, executor="serial", show_progress=False)
    with pytest.raises(ValueError, match=r"Corpus\(labels=\['snr_db'\]\) needs the index's quality columns"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["snr_db"]), sample_rate=RATE, duration=0.5)
    with pytest.raises(ValueError, match=r"has no label column 'snr'"):
        create_audio_dataset(corpus=Corpus(index=out, labels=["snr"]), sample_rate=RATE, duration=0.5)
