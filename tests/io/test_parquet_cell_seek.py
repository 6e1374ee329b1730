"""A Parquet row's audio cell read from a bucket by its seek table, like a tar member (issue 39).

The index build sniffs each recorded cell's format from its bytes and names it
in the cell's URL (``...&size=N&format=flac::FILE``), so a FLAC (``flac``), MP3
(``lame``, MPEG-1) or Ogg Vorbis (``oggenc``) cell gets a seek table checked
against the cell's own byte count, is read remotely by it (one ranged GET an
excerpt once the header is kept) and is planned exactly by the read-ahead. The
samples equal the same cell read locally, as before. An index written before
(no ``format=``) reads as it always did; a Parquet file rewritten after
indexing and read under ``on_stale="trust"`` is an error naming it, never other
audio.
"""

from __future__ import annotations

import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.index import build_index, freshness, open_index
from audiotree.index.seek_build import is_flac, is_mp3, is_ogg, sniff_format
from audiotree.io import AudioFile, parquet_audio
from audiotree.io.flac_indexed import clear_header_cache, hinted, seek_hint, uses_seek_points
from audiotree.io.item_bytes import read_item_bytes
from audiotree.io.members import (absolute, format_name, order_key, parse, recorded_span, unrecorded, with_format,
                                  without_cell)
from audiotree.sources import Corpus, ReadAhead, create_audio_dataset
from counted_http import CountedHttp
from helpers import read_ahead_counts

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("flac", "lame", "oggenc")),
                                reason="needs flac, lame and oggenc")

RATE = 44100
KINDS = ("flac", "mp3", "ogg")
STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF_LAYOUT = dict(compression={"audio.bytes": "none", "audio.path": "none", "speaker": "snappy"},
                 use_dictionary=["speaker"], write_page_index=True)


def _music(seconds: float, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    tone = 0.25 * np.sin(2 * np.pi * (220 + 90 * np.sin(2 * np.pi * 0.3 * t)) * t)
    x = tone[:, None] + 0.06 * rng.standard_normal((t.size, channels))
    return (x * np.linspace(0.7, 1.0, channels)).astype(np.float32)


def _encode(folder: Path, kind: str, seconds: float, channels: int, seed: int) -> bytes:
    wav, out = folder / f"c{seed}.wav", folder / f"c{seed}.{kind}"
    soundfile.write(wav, _music(seconds, channels, seed), RATE, subtype="PCM_16")
    if kind == "flac":
        cmd = ["flac", "--silent", "-f", "-o", str(out), str(wav)]
    elif kind == "mp3":
        cmd = ["lame", "--quiet", "-V2", str(wav), str(out)]
    else:
        cmd = ["oggenc", "-Q", "-q", "4", "-o", str(out), str(wav)]
    subprocess.run(cmd, check=True)
    wav.unlink()
    return out.read_bytes()


def _write(path: Path, clips: list[bytes]) -> Path:
    # The cells' names carry no extension: the format is sniffed from the bytes.
    cells = [{"bytes": c, "path": f"clip{i}"} for i, c in enumerate(clips)]
    table = pa.table({"audio": pa.array(cells, type=STRUCT), "speaker": [f"spk{i % 2}" for i in range(len(clips))]})
    pq.write_table(table, path, row_group_size=4, **HF_LAYOUT)
    return path


def _index(sources, out: Path, **kwargs) -> Path:
    build_index(sources, out, executor="serial", show_progress=False, **kwargs)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cells")
    kinds = [KINDS[i % 3] for i in range(9)]
    clips = [_encode(folder, k, 9.0 + (i % 4), 1 + (i % 2), seed=i) for i, k in enumerate(kinds)]
    local = _write(folder / "train.parquet", clips)
    server = CountedHttp({"/d/train.parquet": local.read_bytes()})
    try:
        remote_index = _index(f"{server.base}/d/train.parquet", folder / "remote-index.parquet")
        local_index = _index(str(local), folder / "local-index.parquet")
        yield types.SimpleNamespace(folder=folder, kinds=kinds, clips=clips, local=local, server=server,
                                    remote_index=remote_index, local_index=local_index)
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh():
    parquet_audio.forget()
    freshness.clear()
    clear_header_cache()
    yield
    parquet_audio.forget()
    freshness.clear()


def _rows(index: Path) -> list[dict]:
    return open_index(index, columns=["path", "size", "mtime_ns", "seek_points", "container"]).table.to_pylist()


def _points(row: dict) -> np.ndarray:
    return np.asarray(row["seek_points"], dtype=np.int64).reshape(-1, 2)


def test_the_build_names_each_cells_format_and_keeps_its_seek_table(corpus):
    for index in (corpus.remote_index, corpus.local_index):
        rows = _rows(index)
        assert [parse(r["path"]).format for r in rows] == corpus.kinds
        for row, kind, clip in zip(rows, corpus.kinds, corpus.clips):
            path = row["path"]
            assert row["seek_points"] is not None, path
            assert format_name(path) == f"audio.{kind}"
            assert [is_flac(path), is_mp3(path), is_ogg(path)] == [kind == k for k in KINDS]
            # The range is the cell's; the row's size is its Parquet file's (freshness goes by the file).
            container, offset, size = recorded_span(path)
            assert size == len(clip) and row["size"] == len(corpus.local.read_bytes())
            assert read_item_bytes(path, 0, None) == clip
            assert sniff_format(clip) == kind
            plain = with_format(path, "")
            assert "format=" not in plain and parse(plain).cell == parse(path).cell
            assert without_cell(path) == without_cell(plain) and unrecorded(path) == unrecorded(plain)
            assert "offset=" not in without_cell(path) and "format=" not in without_cell(path)
            assert order_key(path) == order_key(plain) and absolute(path) == path
            assert parse(path).container == container
        assert [uses_seek_points(r["path"]) for r in rows] == [index == corpus.remote_index] * len(rows)


def test_an_index_with_typed_cells_needs_a_1_4_reader_and_one_without_stays_readable_by_1_1(corpus, tmp_path):
    """A reader before format 1.4 refuses a cell URL naming its format, so it is told by the header to upgrade,
    before any row; an index without such cells keeps ``min_reader_version`` 1.1."""
    import json

    from audiotree.formats import header

    meta = json.loads(pq.read_metadata(corpus.remote_index).metadata[b"audiotree"])
    assert meta["format_version"] == [1, 4] and meta["min_reader_version"] == [1, 4]
    with pytest.raises(ValueError, match=r"needs a reader of version >= 1\.4, but this reader is 1\.3; upgrade"):
        header.check(meta, header.INDEX, corpus.remote_index, reader_version=(1, 3))
    wav = tmp_path / "a.wav"
    soundfile.write(wav, _music(1.0, 1, seed=3), 16000)
    plain = json.loads(pq.read_metadata(_index(str(wav), tmp_path / "plain.parquet")).metadata[b"audiotree"])
    assert plain["format_version"] == [1, 4] and plain["min_reader_version"] == [1, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_remote_cell_excerpt_is_one_read_by_its_table_and_equals_the_local_cell(corpus, kind):
    """The hard gate: start, middle and end of each format's cell, equal to the local cell read as before."""
    rows, local_rows = _rows(corpus.remote_index), _rows(corpus.local_index)
    r = corpus.kinds.index(kind)
    url, points = rows[r]["path"], _points(rows[r])
    local = with_format(local_rows[r]["path"], "")  # the local cell, named as before: libsndfile seeks in it
    size = recorded_span(url)[2]
    server = corpus.server
    with seek_hint(url, points, size, rows[r]["mtime_ns"]):
        seek = hinted(url)
    assert seek is not None and type(seek).__name__ == {"flac": "FlacSeekFile", "mp3": "MpegSeekFile",
                                                         "ogg": "VorbisSeekFile"}[kind]
    with AudioFile(local) as f:
        info = f.info
    assert (seek.info.frames, seek.info.channels, seek.info.sample_rate) == (info.frames, info.channels, RATE)
    frames = 2 * RATE
    seek.read(0, 10)  # the header, once
    gap = int(np.max(np.diff(points[:, 1])))
    for start in (0, info.frames // 2 + 577, info.frames - frames // 3):
        server.reset()
        got = seek.read(start, frames)
        with AudioFile(local) as f:
            expected = f.read(start, frames)
        assert np.array_equal(got, expected), (kind, start)
        requests, sent = server.counts()
        share = size * min(frames, info.frames - start) / info.frames
        # One GET: the excerpt's share, a table step at each end and the decoder's pre-roll, never the cell.
        assert requests == 1 and sent <= share + 3 * gap + 64 * 1024, (kind, start, sent, share, gap)
        assert sent < size


def _dataset(index: Path, *, read_ahead=None, strategy="random", on_stale="trust", **kwargs):
    return create_audio_dataset(corpus=Corpus(index=str(index), on_stale=on_stale, read_ahead=read_ahead),
                                duration=2.0, sample_rate=16000, excerpt_seed=2,
                                excerpt=ExcerptConfig(strategy=strategy), **kwargs)


def test_items_equal_the_local_items_and_an_index_without_formats_reads_as_before(corpus, tmp_path):
    server = corpus.server
    remote, here = _dataset(corpus.remote_index, num_epochs=1, shuffle_seed=1), \
        _dataset(corpus.local_index, num_epochs=1, shuffle_seed=1)
    server.reset()
    items = [remote[i] for i in range(len(remote))]
    with_table = server.counts()[0]
    for a, b in zip(items, (here[i] for i in range(len(here)))):
        assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    # The path a batch reports is the index row's URL (its format included).
    assert all("&format=" in a.filepath[0] for a in items)
    # An index written before cells were typed: plain ranged URLs, no tables. The same items, read as before.
    old = tmp_path / "old.parquet"
    _untyped(corpus.remote_index, old)
    assert not any(uses_seek_points(p) for p in open_index(old).paths())
    before = _dataset(old, num_epochs=1, shuffle_seed=1)
    server.reset()
    old_items = [before[i] for i in range(len(before))]
    without = server.counts()[0]
    for a, b in zip(items, old_items):
        assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
        assert a.filepath[0].replace("&format=" + parse(a.filepath[0]).format, "") == b.filepath[0]
    assert with_table < without, (with_table, without)


def _untyped(index: Path, out: Path) -> list[str]:
    """``index`` as a build wrote it before cells were typed (plain ranged URLs, no tables), written to ``out``."""
    table = pq.read_table(index)
    paths = [with_format(p, "") for p in table.column("path").to_pylist()]
    at = table.column_names.index("path")
    table = table.set_column(at, table.field(at), pa.array(paths, pa.string()))
    at = table.column_names.index("seek_points")
    pq.write_table(table.set_column(at, table.field(at), pa.nulls(table.num_rows, table.field(at).type)), out)
    return paths


def test_an_update_reads_untyped_profiled_cells_again_to_give_them_their_tables(corpus, tmp_path):
    out = tmp_path / "update.parquet"
    _untyped(corpus.local_index, out)
    report = build_index(str(corpus.local), out, executor="serial", show_progress=False)
    assert (report.read, report.reused) == (len(corpus.clips), 0)
    assert _rows(out) == _rows(corpus.local_index)
    assert build_index(str(corpus.local), out, executor="serial", show_progress=False).reused == len(corpus.clips)


def test_the_plan_of_a_cell_is_a_tar_members_and_holds_what_its_seek_file_reads(corpus, tmp_path):
    """:func:`~audiotree.sources.read_plans.row_reads` places a typed cell's excerpt by its table exactly as it
    places the same clip's as a tar member (an untyped cell's estimate let libsndfile's seeks fall outside it),
    and the seek file asks for nothing outside the plan; a dataset with read-ahead then reads every item from it."""
    import tarfile

    from audiotree.io import read_ahead
    from audiotree.sources.read_plans import RowFacts, row_reads
    from container_factories import add_member

    shard = tmp_path / "train.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, (kind, clip) in enumerate(zip(corpus.kinds, corpus.clips)):
            add_member(tar, f"u{i}.{kind}", clip)
    corpus.server.objects["/d/train.tar"] = shard.read_bytes()
    members = _rows(_index(f"{corpus.server.base}/d/train.tar", tmp_path / "tar-index.parquet"))
    cells = _rows(corpus.remote_index)

    class Loader:  # what a plan asks of the dataset's loader
        excerpt, duration = ExcerptConfig(strategy="random"), 2.0

    class Start:
        excerpt, duration = ExcerptConfig(strategy="start"), 2.0

    durations = open_index(corpus.remote_index, columns=["duration"]).table.column("duration").to_pylist()
    for r, (cell, member) in enumerate(zip(cells, members)):
        assert np.array_equal(_points(cell), _points(member)), r
        plans = []
        for row in (cell, member):
            facts = RowFacts(path=row["path"], size=row["size"], duration=durations[r],
                             seek_bytes=_points(row)[:, 1], seek_points=_points(row))
            base = recorded_span(row["path"])[1]
            plans.append([(p.start - base, p.stop - base) for p in
                          row_reads(facts, np.random.default_rng(r), Loader(), trust_size=True)])
        assert plans[0] == plans[1] and plans[0], (r, plans)
        # The seek file's own reads (offsets from the cell's start) fall inside the plan: an excerpt at the start,
        # the middle and near the end (a segment window starting there, read from its start).
        with seek_hint(cell["path"], _points(cell), recorded_span(cell["path"])[2], cell["mtime_ns"]):
            seek = hinted(cell["path"])
        asked, read = [], seek._read
        seek._read = lambda lo, hi: (asked.append((lo, hi)), read(lo, hi))[1]
        seek.read(0, 10)  # (the header, kept: not part of an excerpt's plan)
        rate, base = seek.info.sample_rate, recorded_span(cell["path"])[1]
        for at in (0.0, durations[r] / 2 + 0.013, durations[r] - 2.5):
            facts = RowFacts(path=cell["path"], size=cell["size"], duration=durations[r], window=(at, durations[r]),
                             seek_bytes=_points(cell)[:, 1], seek_points=_points(cell))
            plan = [(p.start - base, p.stop - base) for p in
                    row_reads(facts, np.random.default_rng(0), Start(), trust_size=True)]
            asked.clear()
            seek.read(int(round(at * rate)), 2 * rate)
            assert asked and all(any(a <= lo and hi <= b for a, b in plan) for lo, hi in asked), (r, at, asked, plan)
    read_ahead.close_stores()
    ds = _dataset(corpus.remote_index, read_ahead=ReadAhead(items=8), num_epochs=None)
    counts = read_ahead_counts(ds, warm=6, upto=24)
    assert counts["hits"] > 0 and counts["misses"] == 0, counts


def test_a_parquet_file_rewritten_after_indexing_is_an_error_naming_it_under_trust(corpus, tmp_path):
    """The default check (the file's size and time) finds a rewritten file stale, as for a shard
    (tests/io/test_parquet_index_cells.py); trusted anyway, a cell's table does not match the bytes at its range."""
    server = corpus.server
    server.objects["/d/swap.parquet"] = corpus.local.read_bytes()
    index = _index(f"{server.base}/d/swap.parquet", tmp_path / "swap-index.parquet")
    # Rewritten with one more clip first: every cell moves.
    extra = _encode(tmp_path, "flac", 3.0, 1, seed=40)
    server.objects["/d/swap.parquet"] = _write(tmp_path / "swap.parquet", [extra, *corpus.clips]).read_bytes()
    ds = _dataset(index, strategy="start", num_epochs=1, shuffle=False)
    for i in range(3):  # a FLAC, an MP3 and an Ogg Vorbis cell: an error naming the file, never other audio
        clear_header_cache()
        with pytest.raises(AudioReadError, match=r"/d/swap\.parquet.*does not match the seek table"):
            ds[i]
