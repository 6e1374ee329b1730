"""The stored profile (issue 22): int16 centi-decibels, at most 2 bytes per 100 ms, within 0.005 dB per block;
format 1.0 indexes (float32 mean squares) still open, read the same, update and resume."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.index import build_index, file_profile, open_index, window_loudness
from audiotree.index.profile import ZERO_BLOCK, decode_profile, encode_profile, profile_of_path
from audiotree.index.quality import QUALITY_COLUMNS
from audiotree.io import AudioFile
from audiotree.synth import synthesize
from helpers import index_as_format_1_0
from audiotree.sources import Corpus

RATE = 8000
# Quantisation (0.005 dB) plus float32's rounding of the decoded mean square (~3e-7 dB).
DB_BOUND = 0.005 + 1e-5


def _db(ms):
    return 10.0 * np.log10(np.asarray(ms, dtype=np.float64))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Speech, music and effects (with near-silent gaps) at 8 kHz, 30 to 50 s each, and an index of them."""
    root = tmp_path_factory.mktemp("profcorpus")
    rng = np.random.default_rng(22)
    for i in range(20):
        group = ("speech", "music", "effects")[i % 3]
        data = synthesize(group, float(rng.uniform(30, 50)), RATE, 1 + i % 2, rng)
        soundfile.write(root / f"{group}{i:02d}.flac", data, RATE, format="FLAC")
    out = tmp_path_factory.mktemp("profout") / "corpus.parquet"
    build_index(str(root), out, executor="serial", show_progress=False)
    return root, out


# ------------------------------------------------------------------ the codec
def test_the_encoding_round_trips_within_half_a_hundredth_of_a_db():
    rng = np.random.default_rng(0)
    ms = (10.0 ** rng.uniform(-32.7, 32.7, 200_000)).astype(np.float32)  # the whole int16 range
    stored = encode_profile(ms)
    assert stored.dtype == np.int16 and stored.shape == ms.shape
    back = decode_profile(stored)
    assert back.dtype == np.float32 and back.shape == ms.shape
    assert np.max(np.abs(_db(back) - _db(ms))) <= DB_BOUND
    # Round to the nearest hundredth of a dB: values a step apart stay a step apart.
    assert encode_profile([1.0, 10 ** 0.0004, 10 ** 0.0006, 10 ** -0.0006]).tolist() == [0, 0, 1, -1]
    # Decoding is a pure function of the stored value: lists of Python ints (Arrow's to_pylist) decode alike.
    np.testing.assert_array_equal(decode_profile(stored.tolist()), back)
    np.testing.assert_array_equal(encode_profile(back), stored)


def test_zero_and_out_of_range_mean_squares():
    # Zero, and anything below -327.67 dB (hundreds of dB under any gate), is the sentinel, and reads as 0.
    stored = encode_profile([0.0, 1e-40, 1e-34, 10 ** -32.767, 1e40, 10 ** 32.767])
    assert stored.tolist() == [ZERO_BLOCK, ZERO_BLOCK, ZERO_BLOCK, -32767, 32767, 32767]
    assert decode_profile(stored)[:3].tolist() == [0.0, 0.0, 0.0]
    assert window_loudness(decode_profile(encode_profile(np.zeros(40))), 30).tolist() == [-np.inf] * 11
    assert encode_profile(np.zeros(0)).shape == (0,) and decode_profile(np.zeros(0, np.int16)).shape == (0,)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e-3])
def test_encoding_refuses_what_is_not_a_mean_square(bad):
    with pytest.raises(ValueError, match="non-negative, finite mean squares"):
        encode_profile([0.5, bad, 0.5])


def test_decoding_refuses_integers_outside_int16():
    with pytest.raises(ValueError, match=r"outside \[-32768, 32767\].*Rebuild"):
        decode_profile([0, 40_000])
    with pytest.raises(ValueError, match="outside"):
        decode_profile(np.array([-32769], dtype=np.int64))


def test_floats_pass_through_as_format_1_0_stored_them():
    ms = np.array([0.5, 1e-9, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(decode_profile(ms), ms)
    np.testing.assert_array_equal(decode_profile(ms.tolist()), ms)


@pytest.mark.parametrize("group", ["speech", "music", "effects"])
def test_window_loudness_from_the_stored_profile_is_within_0_005_lu_of_the_float32_one(tmp_path, group):
    # Scaling every block by at most 0.005 dB scales every gated mean by as much; the gates see the same blocks.
    path = tmp_path / "x.wav"
    soundfile.write(path, synthesize(group, 30.0, 16_000, 1, np.random.default_rng(5)), 16_000, subtype="FLOAT")
    profile = profile_of_path(path)
    stored = decode_profile(encode_profile(profile))
    for blocks in (1, 4, 30):
        want, got = window_loudness(profile, blocks), window_loudness(stored, blocks)
        assert np.array_equal(np.isfinite(want), np.isfinite(got))
        finite = np.isfinite(want)
        assert finite.mean() > 0.5 and np.max(np.abs(got[finite] - want[finite])) <= 0.005 + 1e-6


# ------------------------------------------------------------------ the index
def _profile_bytes(path) -> tuple[int, int, int]:
    """(stored bytes of the profile column, of its dictionary pages, blocks), from the Parquet footer."""
    md = pq.ParquetFile(path).metadata
    column = [md.row_group(0).column(j).path_in_schema for j in range(md.num_columns)].index("profile.list.element")
    stored = dictionary = blocks = 0
    for r in range(md.num_row_groups):
        chunk = md.row_group(r).column(column)
        stored += chunk.total_compressed_size
        blocks += chunk.num_values
        if chunk.has_dictionary_page:
            dictionary += chunk.data_page_offset - chunk.dictionary_page_offset
    return stored, dictionary, blocks


def test_the_index_stores_at_most_two_bytes_a_block_and_half_of_float32(corpus, tmp_path):
    _, out = corpus
    old = index_as_format_1_0(out, tmp_path / "old.parquet")
    (new_bytes, new_dictionary, blocks), (old_bytes, _, old_blocks) = _profile_bytes(out), _profile_bytes(old)
    assert blocks == old_blocks > 7000
    # The values: dictionary ids of at most 16 bits (int16 has 65,536 values, so the dictionary never
    # overflows into plain 4-byte values), compressed. The dictionary page is a fixed cost per row group
    # (at most 65,536 values), which a small index like this one feels and a large one does not.
    assert (new_bytes - new_dictionary) / blocks <= 2.0
    assert new_bytes / blocks <= 2.25, new_bytes / blocks  # (2.08 here: the dictionary page of ~8,000 blocks)
    assert new_bytes <= 0.5 * old_bytes, (new_bytes / blocks, old_bytes / blocks)
    # The whole file, footer and other columns included (less format 1.2's seek points and 1.3's quality
    # columns, which 1.0 did not have).
    without = tmp_path / "without-seek-points.parquet"
    table = pq.read_table(out)
    pq.write_table(table.drop_columns(["seek_points", *QUALITY_COLUMNS]), without, compression="zstd")
    assert os.path.getsize(without) <= 0.5 * os.path.getsize(old)


def test_every_reader_sees_the_stored_profile_within_the_bound(corpus):
    root, out = corpus
    ix = open_index(out, columns="all")
    assert ix.table.schema.field("profile").type.value_type.bit_width == 16
    for i, path in enumerate(ix.paths()):
        with AudioFile(path) as f:
            measured = file_profile(f)
        got = ix.profile(i)
        assert got.dtype == np.float32 and got.shape == measured.shape
        assert np.max(np.abs(_db(got) - _db(measured))) <= DB_BOUND
    # The window-LUFS view reads the column on its own (Arrow lists of Python ints) and decodes it the same.
    from audiotree.sources import load_window_lufs

    cache = load_window_lufs(out, lufs_window_sec=0.4)
    first = ix.paths()[0]
    np.testing.assert_array_equal(cache.lufs[first], window_loudness(ix.profile(0), 4, hop_blocks=4).astype(np.float32))


# ------------------------------------------------------------------ format 1.0 indexes
def test_a_1_0_reader_is_told_to_upgrade_and_a_1_1_reader_reads_both(corpus, tmp_path):
    from audiotree.formats import header

    _, out = corpus
    meta = json.loads(pq.read_metadata(out).metadata[b"audiotree"])
    # A reader of 1.0 (expecting float32 profiles) refuses the index by its header, before any column.
    with pytest.raises(ValueError, match=r"needs a reader of version >= 1\.1, but this reader is 1\.0; upgrade"):
        header.check(meta, header.INDEX, out, reader_version=(1, 0))
    info = header.check(meta, header.INDEX, out, reader_version=(1, 1))  # (1.2-1.4 added what 1.1 never reads)
    assert info.version == (1, 4) and not info.strict  # a newer minor: its unknown metadata keys are tolerated
    assert not header.check(meta, header.INDEX, out, reader_version=(1, 3)).strict  # (1.4 is newer still)
    assert header.check(meta, header.INDEX, out, reader_version=(1, 4)).strict
    old = json.loads(pq.read_metadata(index_as_format_1_0(out, tmp_path / "old.parquet")).metadata[b"audiotree"])
    assert header.check(old, header.INDEX, "old", reader_version=(1, 1)).strict
    # The other formats did not move.
    assert header.header(header.TREE)["format_version"] == [1, 0]


def test_a_format_1_0_index_opens_and_reads_exactly_as_before(corpus, tmp_path):
    _, out = corpus
    old = index_as_format_1_0(out, tmp_path / "old.parquet")
    assert json.loads(pq.read_metadata(old).metadata[b"audiotree"])["format_version"] == [1, 0]
    ix = open_index(old, columns="all")
    assert ix.table.schema.field("profile").type.value_type.bit_width == 32
    for i, path in enumerate(ix.paths()):
        got = ix.profile(i)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, profile_of_path(path))  # the float32 mean squares, untouched
    from audiotree.sources import ExcerptConfig, create_audio_dataset, load_window_lufs

    cache = load_window_lufs(old, lufs_window_sec=0.4)
    np.testing.assert_array_equal(cache.lufs[ix.paths()[1]],
                                  window_loudness(ix.profile(1), 4, hop_blocks=4).astype(np.float32))
    ds = create_audio_dataset(corpus=Corpus(index=old), sample_rate=RATE, duration=2.0, shuffle_seed=0,
                              excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-40))
    assert all(float(ds[i].lufs[0]) > -40 for i in range(6))


def test_updating_a_format_1_0_index_reuses_its_rows_and_writes_what_a_fresh_build_writes(corpus, tmp_path):
    root, out = corpus
    old = index_as_format_1_0(out, tmp_path / "corpus.parquet")
    report = build_index(str(root), old, executor="serial", show_progress=False)
    # Every file is FLAC: read again for its seek points (format 1.2), so the index is a fresh build's.
    assert report.read == report.rows == len(open_index(out)) and report.reused == 0
    meta = json.loads(pq.read_metadata(old).metadata[b"audiotree"])
    assert meta["format_version"] == [1, 4] and meta["min_reader_version"] == [1, 1]
    assert pq.read_table(old).equals(pq.read_table(out))  # the same int16 profiles as a fresh build


def test_a_build_resumes_from_format_1_0_part_files(corpus, tmp_path):
    root, out = corpus
    target = tmp_path / "corpus.parquet"
    parts = tmp_path / ".corpus.parquet.parts"
    parts.mkdir()
    (parts / "settings.json").write_text(json.dumps({"loudness": True, "mono": True, "root": None, "block_sec": 0.1}))
    old = pq.read_table(index_as_format_1_0(out, tmp_path / "old.parquet"))
    pq.write_table(old.slice(0, 7).replace_schema_metadata(None), parts / "part-00000000.parquet")
    report = build_index(str(root), target, executor="serial", show_progress=False)
    assert report.resumed == 0 and report.read == report.rows  # FLAC rows without seek points: read again
    assert pq.read_table(target).equals(pq.read_table(out))


def test_an_update_of_a_1_1_index_keeps_its_other_rows_and_reads_flac_ones_again(tmp_path):
    """Before format 1.2 no row had seek points: FLAC rows are read again for theirs, WAV rows are kept."""
    root = tmp_path / "audio"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.wav", "b.flac", "c.wav"):
        soundfile.write(root / name, rng.standard_normal(RATE * 2).astype(np.float32) * 0.1, RATE)
    fresh = tmp_path / "fresh.parquet"
    build_index(str(root), fresh, executor="serial", show_progress=False)
    table = pq.read_table(fresh)
    meta = json.loads(table.schema.metadata[b"audiotree"])
    meta["format_version"] = [1, 1]
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["seek_points"]).replace_schema_metadata(
        {b"audiotree": json.dumps(meta).encode()}), old)
    assert open_index(old, columns="all").table.column("seek_points").null_count == 3
    report = build_index(str(root), old, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (1, 2)
    # The kept WAV rows stay without the table a fresh build gives them (where their samples are, for planning
    # remote reads; without it a plan estimates as it did): all else equals a fresh build.
    updated, fresh_table = pq.read_table(old), pq.read_table(fresh)
    wav = [p.endswith(".wav") for p in fresh_table.column("path").to_pylist()]
    assert [p is None for p in updated.column("seek_points").to_pylist()] == wav
    column = fresh_table.schema.get_field_index("seek_points")
    kept = [None if w else p for w, p in zip(wav, fresh_table.column("seek_points").to_pylist())]
    assert updated.equals(fresh_table.set_column(column, fresh_table.schema.field(column),
                                                 pa.array(kept, fresh_table.schema.field(column).type)))
    again = build_index(str(root), old, executor="serial", show_progress=False)  # now 1.2: nothing to read
    assert (again.read, again.reused) == (0, 3)


def test_a_file_whose_loudness_overflows_is_an_unreadable_row_naming_it(tmp_path):
    # Float samples of 1e25 are finite, but their mean square is not a float32: the row says so, and the index
    # opens (before, the infinite profile was stored and the whole index refused).
    corpus = tmp_path / "c"
    corpus.mkdir()
    good = 0.1 * np.random.default_rng(1).standard_normal(RATE * 2)
    soundfile.write(corpus / "good.wav", good, RATE, subtype="FLOAT")
    soundfile.write(corpus / "huge.wav", 1e25 * good, RATE, subtype="FLOAT")
    build_index(str(corpus), tmp_path / "ix.parquet", executor="serial", show_progress=False)
    ix = open_index(tmp_path / "ix.parquet", columns="all")
    rows = {os.path.basename(p): i for i, p in enumerate(ix.paths())}
    readable, errors = ix.column("readable"), ix.table.column("error").to_pylist()
    assert readable[rows["good.wav"]] and ix.profile(rows["good.wav"]).shape == (20,)
    assert not readable[rows["huge.wav"]] and ix.profile(rows["huge.wav"]) is None
    assert "huge.wav" in errors[rows["huge.wav"]] and "not finite" in errors[rows["huge.wav"]]
