"""The index keeps each Parquet row's audio cell range, so a reader never reads a row group to find its rows.

``build_index`` over Parquet with embedded audio reads each row group's audio
chunk once, in the building process, and stores every row it could locate as
``parquet://audio?row_group=G&row=R&offset=O&size=N::FILE``. A dataset built
from that index reads an item as one ranged read of the cell (counted at a
local HTTP server and in the process's byte counters). Compressed chunks and
null cells keep the plain form; plain URLs (indexes written before) still
read, and an update gives them their ranges; a file rewritten after indexing
is stale, as a tar shard is.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.index import StaleFileError, build_index, freshness, open_index
from audiotree.io import parquet_audio
from audiotree.io.byte_counters import byte_counters, reset_byte_counters
from audiotree.io.item_bytes import read_item_bytes
from audiotree.io.members import open_member, parse, recorded_span, with_format, without_cell
from audiotree.sources import Corpus, create_audio_dataset
from container_factories import RATE, add_member, flac_bytes
from test_storage import http_server  # noqa: F401 (the HTTP server of the storage tests)

HF_FIXTURE = Path(__file__).resolve().parent.parent / "data" / "hf_parquet" / "train-00000-of-00001.parquet"
STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF_LAYOUT = dict(compression={"audio.bytes": "none", "audio.path": "none", "speaker": "snappy"},
                 use_dictionary=["speaker"], write_page_index=True)


@pytest.fixture(autouse=True)
def _fresh():
    parquet_audio.forget()
    freshness.clear()
    yield
    parquet_audio.forget()
    freshness.clear()


def _write(path: Path, clips: list, *, row_group_size: int, **layout) -> Path:
    cells = [None if c is None else {"bytes": c, "path": f"u{i}.flac"} for i, c in enumerate(clips)]
    table = pa.table({"audio": pa.array(cells, type=STRUCT), "speaker": [f"spk{i % 3}" for i in range(len(clips))]})
    pq.write_table(table, path, row_group_size=row_group_size, **(layout or HF_LAYOUT))
    return path


def _index(sources, out: Path) -> tuple[list[str], object]:
    report = build_index(sources, out, executor="serial", show_progress=False, loudness=False)
    return open_index(out).paths(), report


def _decoded(data: bytes) -> np.ndarray:
    return soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)[0].mean(axis=1)


def _dataset(out: Path, **corpus):
    return create_audio_dataset(corpus=Corpus(index=str(out), **corpus), sample_rate=RATE, duration=None,
                                shuffle=False)


def test_hf_fixture_rows_record_their_cells_and_read_pyarrows_values(tmp_path):
    paths, report = _index(str(HF_FIXTURE), tmp_path / "hf.parquet")
    values = pq.read_table(HF_FIXTURE, columns=["audio"]).column(0).to_pylist()
    assert report.rows == len(values) == 4
    for path, value in zip(paths, values):
        ref = parse(path)
        assert ref.cell is not None and "&offset=" in path, path
        assert recorded_span(path) == (str(HF_FIXTURE), *ref.cell)
        assert read_item_bytes(path, 0, None) == value["bytes"]
        with open_member(path) as f:
            assert f.read() == value["bytes"]
    # The labels still join by row, and the fourth cell (not audio) is an unreadable row naming its row.
    ix = open_index(tmp_path / "hf.parquet", columns="all")
    assert ix.table.column("speaker").to_pylist() == ["spk1", "spk2", "spk1", "spk3"]
    assert "row=3" in ix.table.column("error").to_pylist()[3]


def test_written_corpus_rows_carry_ranges_and_items_equal_the_clips(tmp_path):
    clips = [flac_bytes(0.4 + 0.1 * (i % 4), seed=i) for i in range(7)]
    path = _write(tmp_path / "a.parquet", clips, row_group_size=3)
    out = tmp_path / "a-index.parquet"
    paths, _ = _index(str(path), out)
    assert [parse(p).cell is not None for p in paths] == [True] * 7
    assert [read_item_bytes(p, 0, None) for p in paths] == clips
    ds = _dataset(out)
    for i in range(7):
        np.testing.assert_allclose(np.asarray(ds[i].waveform)[0, 0], _decoded(clips[i]), atol=1e-6)
    assert open_index(out, columns="all").table.column("speaker").to_pylist() == [f"spk{i % 3}" for i in range(7)]


def test_a_dataset_from_the_index_reads_each_item_as_its_own_bytes(http_server, tmp_path):  # noqa: F811
    """No process reads a row group to find its rows: an item costs what the same clip as a tar member costs.

    Before the index kept the ranges, the first item of each row group cost that group's whole audio chunk
    (20 cells here) in every process.
    """
    clips = [flac_bytes(2.0, seed=i) for i in range(40)]
    path = _write(tmp_path / "h.parquet", clips, row_group_size=20)
    with tarfile.open(tmp_path / "h.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, clip in enumerate(clips):
            add_member(tar, f"u{i:02d}.flac", clip)
    http_server.objects["/h.parquet"] = path.read_bytes()
    http_server.objects["/h.tar"] = (tmp_path / "h.tar").read_bytes()
    paths, _ = _index(http_server.base + "/h.parquet", tmp_path / "h-index.parquet")
    assert all(parse(p).cell is not None for p in paths)
    _index(http_server.base + "/h.tar", tmp_path / "t-index.parquet")
    parquet_audio.forget()  # a reading process: no footer, no cell map
    cells, members = _dataset(tmp_path / "h-index.parquet"), _dataset(tmp_path / "t-index.parquet")
    group_bytes = sum(len(c) for c in clips[:20])

    def cost(ds, i: int) -> tuple[int, int, dict]:
        http_server.reset_counters()
        reset_byte_counters()
        np.testing.assert_allclose(np.asarray(ds[i].waveform)[0, 0], _decoded(clips[i]), atol=1e-6)
        return http_server.requests, http_server.bytes_sent, byte_counters()

    for i in (0, 20, 7, 33, 12, 25, 3, 39):
        requests, sent, counts = cost(cells, i)
        assert (requests, sent) == cost(members, i)[:2], i
        # Bytes of the cell only (the member reader fetches the head and tail first, then decodes): never the group.
        assert counts["bytes_fetched"] == sent <= 2 * len(clips[i]) + 16384, (i, sent, len(clips[i]))
        assert sent < group_bytes / 5
        # Nothing located the row, and no footer was read.
        assert "parquet_cell_maps" not in counts["by_cache"] and "parquet_footers" not in counts["by_cache"], counts


def test_a_compressed_chunk_and_null_cells_keep_the_plain_form_and_read_right(tmp_path):
    clips = [flac_bytes(0.3 + 0.05 * i, seed=i) for i in range(5)]
    snappy = _write(tmp_path / "snappy.parquet", clips, row_group_size=2, compression="snappy")
    with_null = list(clips)
    with_null[2] = None
    verbatim = _write(tmp_path / "nulls.parquet", with_null, row_group_size=2)
    out = tmp_path / "mixed-index.parquet"
    paths, report = _index([str(snappy), str(verbatim)], out)
    by_file = {name: [p for p in paths if p.endswith(name)] for name in ("snappy.parquet", "nulls.parquet")}
    assert [parse(p).cell for p in by_file["snappy.parquet"]] == [None] * 5
    assert [parse(p).cell is None for p in by_file["nulls.parquet"]] == [False, False, True, False, False]
    assert [read_item_bytes(p, 0, None) for p in by_file["snappy.parquet"]] == clips
    with pytest.raises(AudioReadError, match=r"row_group=1&row=0::.*nulls\.parquet.*null"):
        read_item_bytes(by_file["nulls.parquet"][2], 0, None)
    assert report.unreadable == 1
    with pytest.warns(UserWarning, match="1 unreadable row"):
        ds = _dataset(out)
    assert len(ds) == 9  # the null row is left out as unreadable
    got = sorted(len(np.asarray(ds[i].waveform)[0, 0]) for i in range(9))
    assert got == sorted([len(_decoded(c)) for c in clips] + [len(_decoded(c)) for c in with_null if c is not None])


def test_plain_urls_of_an_older_index_still_read_and_an_update_gives_them_ranges(tmp_path):
    clips = [flac_bytes(0.4, seed=i) for i in range(4)]
    path = _write(tmp_path / "old.parquet", clips, row_group_size=2)
    out = tmp_path / "old-index.parquet"
    paths, _ = _index(str(path), out)
    # The index as written before ranges were kept: the same rows, plain URLs.
    table = pq.read_table(out)
    at = table.column_names.index("path")
    plain = [without_cell(p) for p in table.column("path").to_pylist()]
    assert plain != paths and all(parse(p).cell is None for p in plain)
    pq.write_table(table.set_column(at, table.field(at), pa.array(plain, type=pa.string())), out)
    assert open_index(out).paths() == plain
    ds = _dataset(out)
    for i in range(4):
        np.testing.assert_allclose(np.asarray(ds[i].waveform)[0, 0], _decoded(clips[i]), atol=1e-6)
    assert read_item_bytes(plain[1], 0, None) == clips[1]  # located in this process, as before
    # An update re-reads no file: the rows are kept, and get their ranges (not their format, which a read sniffs:
    # a header-only row keeps its form, tests/io/test_parquet_cell_seek.py).
    _, report = _index(str(path), out)
    assert (report.reused, report.read) == (4, 0)
    assert all("&format=flac::" in p for p in paths)
    assert open_index(out).paths() == [with_format(p, "") for p in paths]
    # A row named by its recorded URL is an item as itself, reused as itself.
    named = tmp_path / "named.parquet"
    assert _index([paths[1]], named)[0] == [paths[1]]
    assert _index([paths[1]], named)[1].reused == 1


def test_a_parquet_file_changed_after_indexing_is_stale_like_a_shard(tmp_path):
    """As ``test_staleness_policies`` (tests/index/test_index.py) for files and shards: the file's version decides."""
    clips = [flac_bytes(0.5, seed=i) for i in range(4)]
    path = _write(tmp_path / "s.parquet", clips, row_group_size=2)
    out = tmp_path / "s-index.parquet"
    paths, _ = _index(str(path), out)
    other = [flac_bytes(0.7, seed=10 + i) for i in range(4)]
    _write(path, other, row_group_size=2)  # rewritten: other sizes and offsets
    with pytest.raises(StaleFileError) as info:
        _dataset(out)[0]
    assert "s.parquet" in str(info.value) and "size changed" in str(info.value)
    skipping = _dataset(out, on_stale="skip")
    assert [skipping[i] for i in range(4)] == [None] * 4
    # Reprobed: the row is read as the file is now, not at the range the index recorded.
    reprobing = _dataset(out, on_stale="reprobe")
    for i in range(4):
        np.testing.assert_allclose(np.asarray(reprobing[i].waveform)[0, 0], _decoded(other[i]), atol=1e-6)
    # A rebuild records the new ranges; the rows read the new audio.
    new_paths, report = _index(str(path), out)
    assert report.read == 4 and new_paths != paths
    ds = _dataset(out)
    for i in range(4):
        np.testing.assert_allclose(np.asarray(ds[i].waveform)[0, 0], _decoded(other[i]), atol=1e-6)


def test_a_row_on_a_page_failing_its_crc_keeps_the_plain_form_and_is_refused(tmp_path):
    from test_container_integrity import _checksummed, _wav_bytes

    cells = [_wav_bytes(0.4 + 0.1 * i, 20 + i) for i in range(4)]  # PCM: a flipped byte is a wrong sample, no error
    path = tmp_path / "crc.parquet"
    _checksummed(path, cells, flip_row=2, layout="verbatim")  # a page per cell, a byte of row 2's flipped
    out = tmp_path / "crc-index.parquet"
    paths, report = _index(str(path), out)
    assert [parse(p).cell is None for p in paths] == [False, False, True, False]
    assert report.unreadable == 1
    error = open_index(out, columns="all").table.column("error").to_pylist()[2]
    assert "row=2::" in error and "CRC32" in error
    assert [read_item_bytes(paths[r], 0, None) for r in (0, 1, 3)] == [cells[0], cells[1], cells[3]]


@pytest.mark.slow
def test_two_workers_with_read_threads_read_no_row_group(http_server, tmp_path):  # noqa: F811
    """The issue's case: with 2 Grain workers of 4 read threads each, every process and thread once read a
    row group's whole audio column to locate its rows. From the index, the epoch costs its items' bytes
    only: read on demand, exactly what the same clips cost as tar members."""
    import grain

    clips = [flac_bytes(1.0 + 0.1 * (i % 3), seed=50 + i) for i in range(24)]
    path = _write(tmp_path / "w.parquet", clips, row_group_size=12)
    with tarfile.open(tmp_path / "w.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, clip in enumerate(clips):
            add_member(tar, f"u{i:02d}.flac", clip)
    http_server.objects["/w.parquet"] = path.read_bytes()
    http_server.objects["/w.tar"] = (tmp_path / "w.tar").read_bytes()
    _index(http_server.base + "/w.parquet", tmp_path / "wp.parquet")
    _index(http_server.base + "/w.tar", tmp_path / "wt.parquet")
    parquet_audio.forget()

    def epoch(out: Path, **corpus) -> tuple[list, int]:
        ds = create_audio_dataset(corpus=Corpus(index=str(out), **corpus), sample_rate=RATE, duration=None,
                                  shuffle=True, shuffle_seed=3, num_epochs=1)
        http_server.reset_counters()
        it = ds.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)).mp_prefetch(
            grain.MultiprocessingOptions(num_workers=2))
        waves = [np.asarray(x.waveform)[0, 0] for x in it]
        return waves, http_server.bytes_sent

    # Read on demand, the byte count is a pure function of the reads; with read-ahead (the default) it also
    # depends on whether a reader got to a range before its fetch returned, so that run is bounded, not equal.
    waves, sent = epoch(tmp_path / "wp.parquet", read_ahead=None)
    members, member_sent = epoch(tmp_path / "wt.parquet", read_ahead=None)
    assert len(waves) == len(clips)
    for a, b in zip(waves, members):
        np.testing.assert_array_equal(a, b)
    assert sent == member_sent
    ahead, sent = epoch(tmp_path / "wp.parquet")
    for a, b in zip(ahead, members):
        np.testing.assert_array_equal(a, b)
    assert sent <= sum(2 * len(c) + 16384 for c in clips)  # one group read per process or thread would pass it


def test_hf_mixed_fixture_path_only_rows_keep_the_plain_form_and_read_their_files(tmp_path):
    """``datasets``' own file (tests/data/hf_pathonly/mixed.parquet): one embedded row, two naming files."""
    import shutil

    folder = tmp_path / "hf"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "hf_pathonly", folder)
    out = tmp_path / "mixed-index.parquet"
    paths, report = _index(str(folder / "mixed.parquet"), out)
    assert [parse(p).cell is None for p in paths] == [False, True, True] and report.unreadable == 0
    cells = pq.read_table(folder / "mixed.parquet").column("audio").to_pylist()
    assert read_item_bytes(paths[0], 0, None) == cells[0]["bytes"]
    ds = _dataset(out)
    expected = [soundfile.read(str(folder / "audio" / n), dtype="float32")[0]
                for n in ("tone.flac", "noise.wav", "chirp.ogg")]
    for i in range(3):
        np.testing.assert_allclose(np.asarray(ds[i].waveform)[0, 0], expected[i], atol=1e-6)


def test_a_malformed_range_is_refused_naming_the_url():
    bad = "parquet://audio?row_group=0&row=1&offset=x&size=9::/data/d.parquet"
    with pytest.raises(ValueError, match=r"Malformed Parquet row URL .*offset=x.*&offset=O&size=N::FILE"):
        parse(bad)
    with pytest.raises(AudioReadError, match="offset=x"):
        open_member(bad)


def test_a_rewritten_shard_is_reprobed_at_its_new_member_ranges(tmp_path):
    """``on_stale="reprobe"`` reads a changed shard as it is now: its members are found by listing it again, not at
    the ranges the index recorded for the old shard (the same holds for Parquet rows, above)."""
    clips = [flac_bytes(0.5, seed=i) for i in range(2)]
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i, clip in enumerate(clips):
            add_member(tar, f"u{i}.flac", clip)
    out = tmp_path / "tar-index.parquet"
    paths, _ = _index(str(shard), out)
    assert all(recorded_span(p) is not None for p in paths)
    other = [flac_bytes(0.8, seed=20 + i) for i in range(2)]
    with tarfile.open(shard, "w") as tar:  # a new first member moves the others
        add_member(tar, "intro.flac", flac_bytes(0.3, seed=99))
        for i, clip in enumerate(other):
            add_member(tar, f"u{i}.flac", clip)
    reprobing = _dataset(out, on_stale="reprobe")
    for i in range(2):
        np.testing.assert_allclose(np.asarray(reprobing[i].waveform)[0, 0], _decoded(other[i]), atol=1e-6)
