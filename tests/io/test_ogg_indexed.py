"""Ogg Vorbis seek points in the corpus index (issue 39): a remote excerpt is one ranged read, to the local samples.

Files are written by ``oggenc`` (mono and stereo, 8 to 48 kHz, ``-q 2`` and
``-q 8``) and by ``ffmpeg -c:a libvorbis``; every excerpt read by the table is
compared with ``np.array_equal`` against what ``AudioFile`` (libsndfile's own
seek) returns for the same file, start and length. Requests and bytes are
counted by the storage tests' HTTP Range server on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.io import AudioFile
from audiotree.io.flac_indexed import VorbisSeekFile, clear_header_cache, header_cache_size
from audiotree.io.ogg_seek_points import differs_from, planned_ranges, read_span, seek_points, vorbis_header

from test_storage import http, http_server  # noqa: F401 - the Range-honouring HTTP server fixtures
from helpers import member_after_junk

if not (shutil.which("oggenc") and shutil.which("ffmpeg")):
    pytest.skip("oggenc and ffmpeg are needed to write the test files", allow_module_level=True)

# (encoder, rate, channels, quality, seconds)
KINDS = [("oggenc", 8000, 1, 2, 14), ("oggenc", 16000, 2, 8, 12), ("oggenc", 22050, 1, 8, 11),
         ("oggenc", 32000, 2, 2, 10), ("oggenc", 44100, 2, 2, 12), ("oggenc", 48000, 1, 8, 9),
         ("ffmpeg", 44100, 2, 4, 12), ("ffmpeg", 16000, 1, 4, 15)]


def _wav(path, seconds: float, rate: int, channels: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    sweep = np.sin(2 * np.pi * (150 + 40 * t) * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.7 * t))
    x = np.stack([0.3 * sweep * (c + 1) / channels + 0.05 * rng.standard_normal(t.size) for c in range(channels)], 1)
    soundfile.write(path, x.astype(np.float32), rate, subtype="PCM_16")


def _encode(folder, name: str, kind: tuple, seed: int = 0) -> bytes:
    encoder, rate, channels, quality, seconds = kind
    wav, out = folder / f"{name}.wav", folder / name
    _wav(wav, seconds, rate, channels, seed)
    if encoder == "oggenc":
        subprocess.run(["oggenc", "-Q", "-q", str(quality), "-o", str(out), str(wav)], check=True)
    else:
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libvorbis", "-q:a",
                        str(quality), str(out)], check=True)
    return out.read_bytes()


def _name(kind: tuple) -> str:
    return f"{kind[0]}-{kind[1]}Hz-{kind[2]}ch-q{kind[3]}"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``{name: (local path, bytes)}`` of the files of :data:`KINDS`."""
    folder = tmp_path_factory.mktemp("ogg")
    out = {}
    for k, kind in enumerate(KINDS):
        name = f"{_name(kind)}.ogg"
        out[name] = (folder / name, _encode(folder, name, kind, seed=k))
    return out


def _local(path, start: int, frames: int) -> np.ndarray:
    """The current local read: a fresh open, libsndfile's seek, as a dataset reads an item."""
    with AudioFile(str(path)) as f:
        return f.read(start, frames)


def _starts(total: int, rate: int, frames: int, seed: int = 0) -> list[int]:
    """At 0, within the first 2 s (a local read decodes from the start there), mid-file, ending at the last frame,
    inside the final page, running past the end, and a few anywhere."""
    anywhere = np.random.default_rng(seed).integers(0, total, 4).tolist()
    return [0, rate // 3, total // 2 + 17, total - frames, total - 300, total - frames // 3, *anywhere]


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_remote_excerpts_by_the_table_equal_the_local_read(made, http, kind):
    path, data = made[f"{_name(kind)}.ogg"]
    points = seek_points(data)
    rate = kind[1]
    total = int(points[-1, 0] - points[0, 0])
    assert differs_from(points, data, lambda s, n: _local(path, s, n)) is None
    http.objects[f"/ogg/{path.name}"] = data
    url = f"{http.base}/ogg/{path.name}"
    clear_header_cache()
    http.reset_counters()
    f = VorbisSeekFile(url, points, size=len(data), version=1)
    assert http.requests == 1 and http.bytes_sent == points[0, 1]  # the header pages, once
    with AudioFile(str(path)) as local:
        assert (f.info.frames, f.info.sample_rate, f.info.channels, f.info.format, f.info.subtype) == (
            local.info.frames, local.info.sample_rate, local.info.channels, local.info.format, local.info.subtype)
    share = (len(data) - points[0, 1]) / total  # bytes per frame
    for frames in (3 * rate, 1, 2000):
        for start in _starts(total, rate, frames, seed=frames):
            http.reset_counters()
            got = f.read(start, frames)
            want = _local(path, start, frames)
            assert got.dtype == np.float32 and got.flags.c_contiguous
            assert got.shape == want.shape and np.array_equal(got, want), (start, frames)
            # One request; its bytes: the excerpt's share, a long block and up to a table step on each side, and
            # a page (pages are up to about 4-13 KiB here).
            assert http.requests == (1 if len(want) else 0), (start, frames, http.requests)
            bound = share * (len(want) + 2 * rate + 2 * 8192) + 16 * 1024
            assert http.bytes_sent <= bound, (start, frames, http.bytes_sent, bound)
    http.reset_counters()
    VorbisSeekFile(url, points, size=len(data), version=1).read(total // 3, 100)  # the header is kept: one GET
    assert http.requests == 1 and header_cache_size() >= 1


def test_the_table_rows_are_pages_and_the_plan_covers_every_read(made):
    _, data = made["oggenc-44100Hz-2ch-q2.ogg"]
    points = seek_points(data)
    head = vorbis_header(data)
    assert points[0, 1] == head.length and points[-1, 1] == len(data)
    assert all(data[o:o + 4] == b"OggS" for o in points[:-1, 1])
    steps = np.diff(points[:-1, 0])
    assert np.all(steps >= 0.5 * head.rate) and np.all(steps <= 2 * head.rate)  # about every 0.5 s (a page apart)
    total = int(points[-1, 0] - points[0, 0])
    duration = total / head.rate
    rng = np.random.default_rng(5)
    exact = generic = 0
    for offset in [0.0, duration - 3.0, *rng.uniform(0, duration - 3.0, 30)]:
        start = int(round(offset * head.rate))
        end = min(total, start + int(np.ceil(3.0 * head.rate)) + 1)  # what io/excerpt.py reads for 3 s
        k, j = read_span(points, start, end, head.long_block)
        planned = _row_plan(points, len(data), duration, offset)
        assert planned[0] == (0, head.length) or planned == [(0, planned[0][1])]
        # The read's range, within a row of it on each side (the plan assumes the longest block Vorbis allows).
        lo, hi = planned[-1] if len(planned) == 2 else (int(points[0, 1]), planned[0][1])  # (joined to the header)
        assert points[max(0, k - 1), 1] <= lo <= points[k, 1], (offset, k, lo)
        assert points[j, 1] <= hi <= points[min(j + 1, len(points) - 1), 1], (offset, j, hi)
        exact += sum(b - a for a, b in planned)
        generic += sum(b - a for a, b in _row_plan(points, len(data), duration, offset, generic=True))
    assert exact < 0.85 * generic, (exact, generic)  # what a plan by the pages' offsets alone fetches


def _row_plan(points, size: int, duration: float, offset: float, *, generic: bool = False):
    """What the read-ahead plans for a 3 s excerpt at ``offset`` s of an indexed remote Ogg file (``generic``:
    planned from the pages' byte offsets alone, as a FLAC file's are)."""
    from audiotree.sources.read_plans import RowFacts, row_reads

    class Loader:
        excerpt, duration = ExcerptConfig(strategy="start"), 3.0

    facts = RowFacts(path="https://h/a.ogg", size=size, duration=duration, window=(offset, duration),
                     seek_bytes=points[:, 1], seek_points=None if generic else points)
    return [(r.start, r.stop) for r in row_reads(facts, np.random.default_rng(0), Loader(), trust_size=True)]


def test_a_stream_that_does_not_start_at_sample_0_reads_by_its_granules(made, tmp_path):
    """``ffmpeg -ss`` after the input, copying packets: the first page's granule position says the stream starts
    after sample 0 (libsndfile numbers its frames from there); reads by the table keep that numbering."""
    path = tmp_path / "late.ogg"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(made["oggenc-44100Hz-2ch-q2.ogg"][0]), "-ss", "4.1",
                    "-c", "copy", str(path)], check=True)
    data = path.read_bytes()
    points = seek_points(data)
    assert points[0, 0] > 0  # (1142 with this ffmpeg)
    assert differs_from(points, data, lambda s, n: _local(path, s, n)) is None
    f = VorbisSeekFile(str(path), points, size=len(data))
    with AudioFile(str(path)) as local:
        assert f.info.frames == local.info.frames
    for start in _starts(f.info.frames, 44100, 44100, seed=1):
        assert np.array_equal(f.read(start, 44100), _local(path, start, 44100)), start


def _plain_and_refused(folder, made):
    """A plain file, and files that must get no table: a stream cut by copying its packets (its granule positions
    disagree with its packets: a local read from the start and one by the table differ), a chain, and Opus."""
    plain = folder / "plain.ogg"
    plain.write_bytes(made["oggenc-16000Hz-2ch-q8.ogg"][1])
    cut = folder / "cut.ogg"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-ss", "3.3", "-i", str(made["ffmpeg-44100Hz-2ch-q4.ogg"][0]),
                    "-c", "copy", str(cut)], check=True)
    chain = folder / "chain.ogg"
    chain.write_bytes(made["oggenc-8000Hz-1ch-q2.ogg"][1] + _encode(folder, "second.ogg", ("oggenc", 8000, 1, 2, 3), 7))
    (folder / "second.ogg").unlink()
    names = ["plain.ogg", "cut.ogg", "chain.ogg"]
    if shutil.which("opusenc"):
        _wav(folder / "o.wav", 4, 48000, 1)
        subprocess.run(["opusenc", "--quiet", str(folder / "o.wav"), str(folder / "opus.ogg")], check=True)
        names.append("opus.ogg")
    for wav in folder.glob("*.wav"):
        wav.unlink()
    return names


def test_a_build_keeps_tables_only_where_reads_by_them_equal_the_files_own(made, tmp_path):
    from audiotree.index import build_index, open_index

    folder = tmp_path / "audio"
    folder.mkdir()
    names = _plain_and_refused(folder, made)
    cut = (folder / "cut.ogg").read_bytes()
    reason = differs_from(seek_points(cut), cut, lambda s, n: _local(folder / "cut.ogg", s, n))
    assert reason is not None and "differs from the file's own read" in reason
    with pytest.raises(ValueError, match="more than one Ogg stream|end-of-stream"):
        seek_points((folder / "chain.ogg").read_bytes())
    out = tmp_path / "idx.parquet"
    build_index(str(folder), out, executor="serial", show_progress=False)
    table = open_index(out, columns=["path", "readable", "seek_points"]).table
    rows = {r["path"].rsplit("/", 1)[-1]: r for r in table.to_pylist()}
    assert sorted(rows) == sorted(names) and all(r["readable"] for r in rows.values())
    assert np.array_equal(np.asarray(rows["plain.ogg"]["seek_points"]).reshape(-1, 2),
                          seek_points((folder / "plain.ogg").read_bytes()))
    assert [n for n in names if rows[n]["seek_points"] is not None] == ["plain.ogg"]


def test_a_damaged_or_foreign_page_is_an_error_naming_the_file(made, tmp_path):
    data = made["oggenc-22050Hz-1ch-q8.ogg"][1]
    points = seek_points(data)
    path = tmp_path / "a.ogg"
    rate = vorbis_header(data).rate
    k, j = read_span(points, 5 * rate, 6 * rate, vorbis_header(data).long_block)
    bad = bytearray(data)
    bad[int(points[k, 1]) + 200] ^= 0x10  # one bit inside the pages the excerpt reads
    path.write_bytes(bytes(bad))
    clear_header_cache()
    with pytest.raises(AudioReadError, match=r"a\.ogg.*fails its CRC check.*does not match the seek table.*Rebuild"):
        VorbisSeekFile(str(path), points, size=len(data)).read(5 * rate, rate)
    shifted = points.copy()
    shifted[1:-1, 1] += 5  # offsets off their pages
    path.write_bytes(data)
    with pytest.raises(AudioReadError, match=r"a\.ogg.*not a whole Ogg page.*Rebuild the index"):
        VorbisSeekFile(str(path), shifted, size=len(data)).read(5 * rate, rate)
    with pytest.raises(AudioReadError, match="does not increase"):
        VorbisSeekFile(str(path), points[::-1], size=len(data))


# ------------------------------------------------------------------ through the index, over HTTP
def _index(urls, out):
    from audiotree.index import build_index

    build_index(urls, str(out), executor="serial", show_progress=False)
    return out


def _dataset(out, *, read_ahead=None, on_stale="trust"):
    from audiotree.sources import Corpus, Output, create_audio_dataset

    return create_audio_dataset(corpus=Corpus(index=str(out), on_stale=on_stale, read_ahead=read_ahead),
                                output=Output(mono=True), excerpt=ExcerptConfig(strategy="random"),
                                duration=3.0, sample_rate=16000, num_epochs=1, shuffle_seed=1, excerpt_seed=2)


def _served(made, http, names):
    for name in names:
        http.objects[f"/ix/{name}"] = made[name][1]
    return [f"{http.base}/ix/{name}" for name in names]


def _per_item(http, ds, repeat: int = 2):
    """Per item (each read ``repeat`` times): (requests, body bytes, waveform)."""
    clear_header_cache()
    out = []
    for i in range(len(ds)):
        for _ in range(repeat):
            http.reset_counters()
            item = ds[i]
            out.append((http.requests, http.bytes_sent, np.asarray(item.waveform)))
    return out


NAMES = ["oggenc-44100Hz-2ch-q2.ogg", "oggenc-16000Hz-2ch-q8.ogg", "ffmpeg-16000Hz-1ch-q4.ogg"]


def test_an_indexed_ogg_excerpt_is_the_header_once_then_one_get(made, http, tmp_path):
    out = _index(_served(made, http, NAMES), tmp_path / "remote.parquet")
    local = _index([str(made[n][0]) for n in NAMES], tmp_path / "local.parquet")
    items = _per_item(http, _dataset(out))
    assert [n for n, _, _ in items] == [2, 1] * len(NAMES), [n for n, _, _ in items]
    expect = _dataset(local, on_stale="raise")
    for i in range(len(NAMES)):
        assert np.array_equal(items[2 * i][2], np.asarray(expect[i].waveform))
    for n, sent, _ in items[1::2]:  # 3 s of at most ~160 kbit/s, a table step and a long block on each side
        assert sent <= 160_000 / 8 * (3 + 2 * 0.75) + 16 * 1024, sent


def test_an_index_without_ogg_tables_reads_as_before(made, http, tmp_path):
    """Rows written before this change hold no Ogg table (null): libsndfile's probing seeks, the same samples."""
    out = _index(_served(made, http, NAMES), tmp_path / "remote.parquet")
    table = pq.read_table(out)
    old = tmp_path / "old.parquet"
    column = table.schema.get_field_index("seek_points")
    nulls = pa.nulls(table.num_rows, table.schema.field("seek_points").type)
    pq.write_table(table.set_column(column, table.schema.field("seek_points"), nulls), old)
    before = _per_item(http, _dataset(old))
    after = _per_item(http, _dataset(out))
    assert all(np.array_equal(a[2], b[2]) for a, b in zip(before, after))
    assert sum(a[0] for a in before) > sum(b[0] for b in after), ([a[0] for a in before], [b[0] for b in after])


def test_a_file_changed_after_indexing_and_trusted_is_an_error_naming_it(made, http, tmp_path):
    name = "oggenc-44100Hz-2ch-q2.ogg"
    out = _index(_served(made, http, [name]), tmp_path / "one.parquet")
    again = _encode(tmp_path, "again.ogg", ("oggenc", 44100, 2, 2, 12), seed=40)  # another take, same shape
    http.objects[f"/ix/{name}"] = again
    clear_header_cache()
    with pytest.raises(AudioReadError, match=rf"/ix/{name}.*does not match the seek table.*Rebuild the index"):
        _dataset(out)[0]


def test_the_read_ahead_plans_exactly_the_bytes_each_excerpt_reads(made, http, tmp_path):
    """With read-ahead, once the order's shape is known every read (header pages, excerpt) is served from a planned
    block: the store's hits grow by exactly the reads."""
    import grain

    from audiotree.io import read_ahead
    from audiotree.io.byte_counters import byte_counters
    from audiotree.sources import ReadAhead, create_audio_dataset
    from audiotree.sources import Corpus

    names = sorted(made)
    out = _index(_served(made, http, names), tmp_path / "all.parquet")
    ds = create_audio_dataset(corpus=Corpus(index=str(out), on_stale="trust", read_ahead=ReadAhead(items=8)),
                              excerpt=ExcerptConfig(strategy="random"), duration=2.0, sample_rate=16000,
                              num_epochs=None, shuffle_seed=3, excerpt_seed=4)
    clear_header_cache()
    read_ahead.close_stores()
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
    warm = 12
    for _ in range(warm):
        next(it)

    def hits() -> int:
        return byte_counters()["by_cache"].get("read_ahead", {}).get("hits", 0)

    hits0, headers0 = hits(), header_cache_size()
    n = 30
    for _ in range(n):
        next(it)
    assert hits() - hits0 == n + header_cache_size() - headers0, (hits() - hits0, n, header_cache_size() - headers0)


def test_a_member_of_a_local_shard_reads_its_own_bytes(made, tmp_path):
    path, data = made["oggenc-16000Hz-2ch-q8.ogg"]
    url = member_after_junk(tmp_path / "s.tar", "a.ogg", data)
    got = VorbisSeekFile(url, seek_points(data), size=len(data)).read(70000, 48000)
    assert np.array_equal(got, _local(path, 70000, 48000))


def test_members_of_a_remote_shard_read_by_their_tables(made, http, tmp_path):
    import io
    import tarfile

    names = ["ffmpeg-16000Hz-1ch-q4.ogg", "oggenc-32000Hz-2ch-q2.ogg"]  # (in the order a local index lists them)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(made[name][1])
            tar.addfile(info, io.BytesIO(made[name][1]))
    http.objects["/shards/train-000000.tar"] = buf.getvalue()
    out = _index([f"{http.base}/shards/train-000000.tar"], tmp_path / "shards.parquet")
    from audiotree.index import open_index

    rows = open_index(out, columns=["path", "seek_points"]).table.to_pylist()
    assert len(rows) == 2 and all(r["seek_points"] is not None for r in rows)
    items = _per_item(http, _dataset(out))
    assert [n for n, _, _ in items] == [2, 1, 2, 1], [n for n, _, _ in items]
    local = _index([str(made[n][0]) for n in names], tmp_path / "local.parquet")
    expect = _dataset(local, on_stale="raise")
    remote = _dataset(out)
    for i in range(2):
        member, file = remote[i].filepath[0].split("?", 1)[0], expect[i].filepath[0]
        assert member.rsplit("/", 1)[-1] == file.rsplit("/", 1)[-1] and float(remote[i].offset[0]) > 0
        assert np.array_equal(items[2 * i][2], np.asarray(expect[i].waveform))
