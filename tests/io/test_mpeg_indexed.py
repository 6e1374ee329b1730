"""MP3 seek points in the corpus index (issue 39): a remote MP3 excerpt is one ranged read of its own bytes.

The MP3s are written by ``lame`` and ``ffmpeg -c:a libmp3lame``; every excerpt read
by the table is compared (``np.array_equal``) with ``AudioFile.read`` of the same
file, the local read. Requests and bytes are counted at the tests' HTTP Range
server on 127.0.0.1 (tests/io/counted_http.py).
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
from audiotree.io.flac_indexed import MpegSeekFile, clear_header_cache, seek_hint
from audiotree.io.mpeg_seek_points import SEEK_EVERY, planned_ranges, seek_points, stream_layout

from counted_http import CountedHttp
from helpers import member_after_junk

pytestmark = pytest.mark.skipif(not (shutil.which("lame") and shutil.which("ffmpeg")), reason="needs lame and ffmpeg")

# name -> (seconds, rate, channels, encoder arguments): MPEG-1 layer III (32-48 kHz), CBR and VBR, mono and stereo.
ENCODES = {
    "lame-cbr128-44k-stereo.mp3": (14, 44100, 2, ["lame", "--quiet", "-b", "128"]),
    "lame-v2-48k-mono.mp3": (12, 48000, 1, ["lame", "--quiet", "-V2"]),
    "lame-v2-44k-stereo.mp3": (12, 44100, 2, ["lame", "--quiet", "-V2"]),
    "lame-cbr96-32k-stereo.mp3": (12, 32000, 2, ["lame", "--quiet", "-b", "96"]),
    "lame-notag-44k-stereo.mp3": (10, 44100, 2, ["lame", "--quiet", "-t", "-b", "160"]),
    "ffmpeg-128k-44k-stereo.mp3": (12, 44100, 2, ["ffmpeg", "-b:a", "128k"]),
    "ffmpeg-cover-48k-stereo.mp3": (12, 48000, 2, ["ffmpeg", "cover", "-b:a", "112k"]),
}
# MPEG-2 and 2.5 (8-24 kHz, 576 samples a frame): a table too, read as mpg123's seek leaves its handle.
MPEG2 = {
    "lame-cbr64-22k-stereo.mp3": (10, 22050, 2, ["lame", "--quiet", "-b", "64"]),
    "lame-v4-16k-mono.mp3": (10, 16000, 1, ["lame", "--quiet", "-V4"]),
    "lame-resample-22k-notag-stereo.mp3": (10, 44100, 2, ["lame", "--quiet", "-b", "32", "--resample", "22.05"]),
    "lame-cbr24-11k-notag-mono.mp3": (12, 11025, 1, ["lame", "--quiet", "-b", "24"]),  # MPEG-2.5 (lame: no tag)
    "ffmpeg-48k-24k-stereo.mp3": (10, 24000, 2, ["ffmpeg", "-b:a", "48k"]),
    "ffmpeg-16k-8k-mono.mp3": (12, 8000, 1, ["ffmpeg", "-b:a", "16k"]),  # MPEG-2.5
    "lame-crc-22k-stereo.mp3": (10, 22050, 2, ["lame", "--quiet", "-p", "-b", "64"]),  # CRC-protected
}
# CRC-protected MPEG-1: no table (see audiotree.io.mpeg_seek_points); read as before.
CRC = {"lame-crc-44k-mono.mp3": (10, 44100, 1, ["lame", "--quiet", "-p", "-b", "48"])}


def _music(seconds: float, rate: int, channels: int, seed: int) -> np.ndarray:
    """Tones that move, noise, and a pause: what makes the bit reservoir and the frame sizes vary."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.25 * np.sin(2 * np.pi * (220 + 80 * np.sin(2 * np.pi * 0.2 * t)) * t)
    x = tone[:, None] + 0.08 * rng.standard_normal((t.size, channels))
    x[int(0.4 * t.size):int(0.45 * t.size)] *= 0.001
    return (x * np.linspace(0.6, 1.0, channels)).astype(np.float32)


def _encode(folder, name: str, spec, seed: int = 0) -> bytes:
    seconds, rate, channels, args = spec
    wav = folder / (name + ".wav")
    soundfile.write(wav, _music(seconds, rate, channels, seed), rate, subtype="PCM_16")
    out = folder / name
    if args[0] == "lame":
        subprocess.run([*args, str(wav), str(out)], check=True)
    else:
        cmd = ["ffmpeg", "-v", "error", "-y", "-i", str(wav)]
        if "cover" in args:  # an ID3v2 tag holding a picture: the stream starts tens of kB in
            png = folder / "cover.png"
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x240:duration=1",
                            "-frames:v", "1", str(png)], check=True)
            cmd += ["-i", str(png), "-map", "0", "-map", "1", "-id3v2_version", "3"]
        cmd += ["-c:a", "libmp3lame", *[a for a in args[1:] if a != "cover"], str(out)]
        subprocess.run(cmd, check=True)
    wav.unlink()
    return out.read_bytes()


@pytest.fixture(scope="module")
def mp3s(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mp3")
    files = {name: _encode(folder, name, spec, seed) for seed, (name, spec) in enumerate({**ENCODES, **MPEG2, **CRC}.items())}
    return folder, files


def _local(path, start: int, frames: int) -> np.ndarray:
    with AudioFile(path) as f:  # a fresh handle, as a dataset item opens one
        return f.read(start, frames)


def _starts(total: int, frames: int, rate: int) -> list[int]:
    """The start, the middle (off any frame), a second in, and the end (clamped: the excerpt runs past it)."""
    return [0, rate + 3, total // 2 + 577, total - frames // 3]


@pytest.mark.parametrize("name", sorted(ENCODES) + sorted(MPEG2))
def test_an_excerpt_over_http_is_one_read_of_its_own_bytes_and_equals_the_local_read(mp3s, name):
    folder, files = mp3s
    path, data = folder / name, files[name]
    points = seek_points(data, lambda: AudioFile(path))
    assert points is not None, name
    with AudioFile(path) as f:
        info = f.info
    layout = stream_layout(data)
    assert points[-1].tolist() == [info.frames, layout.end] and points[0, 1] == layout.offsets[0]
    biggest = int(np.max(np.diff(np.append(layout.offsets, layout.end))))
    server = CountedHttp({"/a.mp3": data})
    try:
        clear_header_cache()
        seek = MpegSeekFile(f"{server.base}/a.mp3", points, size=len(data), version=1)
        assert (seek.info.frames, seek.info.sample_rate, seek.info.channels) == (info.frames, info.sample_rate,
                                                                                  info.channels)
        assert server.counts() == (1, 4)  # the first audio frame's header, once
        frames = 3 * info.sample_rate
        share = (layout.end - layout.offsets[0]) / info.frames * frames
        for start in _starts(info.frames, frames, info.sample_rate):
            server.reset()
            got = seek.read(start, frames)
            assert got.dtype == np.float32 and got.flags.c_contiguous
            assert np.array_equal(got, _local(path, start, frames)), (name, start)
            requests, sent = server.counts()
            # One GET: the excerpt's share, the pre-roll (the 8 frames the local read decodes first, and mpg123's
            # 2, or for MPEG-2 its 4), a seek point's spacing at each end, and the next frame's header (and at the
            # start of an MPEG-2 stream the Xing/Info frame before its first audio frame).
            spf = layout.spf
            spacing = SEEK_EVERY * info.sample_rate / spf
            pre = (10 if spf == 1152 else 12) + (0 if spf == 1152 or start else 1441 / biggest)
            assert requests == 1 and sent <= share + (pre + 2 * spacing + 2) * biggest + 4, (start, sent, share)
        assert seek.read(info.frames, 10).shape == (0, info.channels)
    finally:
        server.stop()


@pytest.mark.parametrize("name", sorted(ENCODES)[:3])
def test_many_random_excerpts_equal_the_local_read(mp3s, name):
    folder, files = mp3s
    path, data = folder / name, files[name]
    points = seek_points(data, lambda: AudioFile(path))
    seek = MpegSeekFile(str(path), points, size=len(data))
    rng = np.random.default_rng(5)
    for start in rng.integers(0, seek.info.frames, 25):
        n = int(rng.integers(1, 2 * seek.info.sample_rate))
        assert np.array_equal(seek.read(int(start), n), _local(path, int(start), n)), (name, start, n)


@pytest.mark.parametrize("name", ["lame-v4-16k-mono.mp3", "lame-cbr64-22k-stereo.mp3", "ffmpeg-16k-8k-mono.mp3",
                                  "lame-crc-22k-stereo.mp3"])
def test_mpeg2_every_way_a_read_starts_equals_the_local_read(mp3s, name):
    """MPEG-2/2.5: starts in the first frames (where the local read's seek keeps what the open decoded, or
    skips a frame), and random ones (where the low-bitrate mono stream's first frames lack their bit reservoir
    and mpg123 synthesizes some and not others: the decode must start where the local read's does)."""
    folder, files = mp3s
    path, data = folder / name, files[name]
    assert stream_layout(data).spf == 576
    points = seek_points(data, lambda: AudioFile(path))
    assert points is not None
    seek = MpegSeekFile(str(path), points, size=len(data))
    rng = np.random.default_rng(9)
    starts = [*range(0, 20 * 576, 97), *rng.integers(0, seek.info.frames, 30).tolist(), seek.info.frames - 5]
    for start in starts:
        n = int(rng.integers(1, seek.info.sample_rate))
        assert np.array_equal(seek.read(int(start), n), _local(path, int(start), n)), (name, start, n)


@pytest.mark.parametrize("name", sorted(CRC))
def test_crc_protected_mpeg1_streams_get_no_table(mp3s, name):
    folder, files = mp3s
    assert stream_layout(files[name]).spf == 1152
    assert seek_points(files[name], lambda: AudioFile(folder / name)) is None


def test_a_corrupted_offset_is_an_error_naming_the_file(mp3s, tmp_path):
    folder, files = mp3s
    name = "lame-v2-44k-stereo.mp3"
    data = files[name]
    points = seek_points(data, lambda: AudioFile(folder / name))
    path = tmp_path / "a.mp3"
    path.write_bytes(data)
    shifted = points.copy()
    shifted[1:-1, 1] += 5  # offsets off their frames
    with pytest.raises(AudioReadError, match=r"a\.mp3.*does not match the seek table.*Rebuild the index"):
        MpegSeekFile(str(path), shifted, size=len(data)).read(5 * 44100, 44100)
    other = files["lame-v2-48k-mono.mp3"]  # another file where this one was
    path.write_bytes(other)
    clear_header_cache()
    with pytest.raises(AudioReadError, match=r"a\.mp3.*does not match the seek table"):
        MpegSeekFile(str(path), points, size=len(other)).read(3 * 44100, 44100)
    with pytest.raises(AudioReadError, match="does not start at the first frame"):
        MpegSeekFile(str(path), points[::-1], size=len(data))


@pytest.mark.parametrize("name", ["ffmpeg-cover-48k-stereo.mp3", "lame-v4-16k-mono.mp3",
                                  "ffmpeg-48k-24k-stereo.mp3"])
def test_the_plan_holds_what_the_read_reads(mp3s, name):
    """:func:`planned_ranges` (what the read-ahead fetches) covers the bytes the read asks for."""
    folder, files = mp3s
    data = files[name]
    points = seek_points(data, lambda: AudioFile(folder / name))
    seek = MpegSeekFile(str(folder / name), points, size=len(data))
    asked = []
    read = seek._read
    seek._read = lambda lo, hi: (asked.append((lo, hi)), read(lo, hi))[1]
    duration = seek.info.frames / seek.info.sample_rate
    for start_s in (0.0, 0.2, 0.33, 1.3, 5.55, duration - 1.0):
        asked.clear()
        seek.read(int(round(start_s * seek.info.sample_rate)), 3 * seek.info.sample_rate)
        plan = planned_ranges(points, start_s, 3.0, duration)
        assert plan[0] == (points[0, 1], points[0, 1] + 4)
        for lo, hi in asked:
            assert any(a <= lo and hi <= b for a, b in plan), (start_s, asked, plan)
        assert plan[1][1] - plan[1][0] <= (asked[0][1] - asked[0][0]) * 1.5


def test_a_member_of_a_shard_reads_its_own_bytes(mp3s, tmp_path):
    folder, files = mp3s
    name = "lame-v2-48k-mono.mp3"
    url = member_after_junk(tmp_path / "s.tar", "a.mp3", files[name])
    points = seek_points(files[name], lambda: AudioFile(url))  # (offsets from the member's start)
    assert points is not None and points[0, 1] == stream_layout(files[name]).offsets[0]
    seek = MpegSeekFile(url, points, size=len(files[name]))
    assert np.array_equal(seek.read(100_000, 48_000), _local(folder / name, 100_000, 48_000))


def test_open_audio_takes_the_hint_for_an_mp3(mp3s):
    from audiotree.io.segment import open_audio

    folder, files = mp3s
    name = "lame-cbr128-44k-stereo.mp3"
    path = str(folder / name)
    points = seek_points(files[name], lambda: AudioFile(path))
    with seek_hint(path, points, len(files[name])):
        with open_audio(path) as f:
            assert isinstance(f, MpegSeekFile)
        with open_audio(path, (1.0, 2.0)) as f:  # a segment, over the seek file
            assert np.array_equal(f.read(0, 100), _local(path, 44100, 100))


# ------------------------------------------------------------------ through the index, over HTTP
def _dataset(index, strategy="random"):
    from audiotree.sources import Corpus, create_audio_dataset

    return create_audio_dataset(corpus=Corpus(index=str(index), on_stale="trust", read_ahead=None),
                                duration=3.0, sample_rate=16000, num_epochs=1, shuffle_seed=1, excerpt_seed=2,
                                excerpt=ExcerptConfig(strategy=strategy))


@pytest.fixture(scope="module")
def indexed(mp3s, tmp_path_factory):
    from audiotree.index import build_index

    folder, files = mp3s
    out = tmp_path_factory.mktemp("mp3-index")
    server = CountedHttp({f"/c/{name}": data for name, data in files.items()})
    try:
        remote = out / "remote.parquet"
        build_index([f"{server.base}/c/{name}" for name in sorted(files)], remote, executor="serial",
                    show_progress=False)
        local = out / "local.parquet"
        build_index([str(folder / name) for name in sorted(files)], local, executor="serial", show_progress=False)
        yield server, remote, local, out
    finally:
        server.stop()


def test_items_over_http_equal_the_local_items_and_read_less(indexed):
    from audiotree.index import open_index

    server, remote, local, out = indexed
    rows = {r["path"].rsplit("/", 1)[-1]: r["seek_points"]
            for r in open_index(remote, columns=["path", "seek_points"]).table.to_pylist()}
    assert all(rows[name] is not None for name in {**ENCODES, **MPEG2}) and all(rows[name] is None for name in CRC)
    ds, here = _dataset(remote), _dataset(local)
    server.reset()
    remote_items = [ds[i] for i in range(len(ds))]
    _, with_table = server.counts()
    for a, b in zip(remote_items, (here[i] for i in range(len(here)))):
        assert a.filepath[0].rsplit("/", 1)[-1] == b.filepath[0].rsplit("/", 1)[-1]
        assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    # An index built before the tables (null for MP3 rows): the same items, read as before.
    table = pq.read_table(remote)
    old = out / "old.parquet"
    column = table.schema.get_field_index("seek_points")
    pq.write_table(table.set_column(column, "seek_points", pa.nulls(table.num_rows, pa.list_(pa.int64()))), old)
    before = _dataset(old)
    server.reset()
    old_items = [before[i] for i in range(len(before))]
    _, without = server.counts()
    for a, b in zip(remote_items, old_items):
        if "notag" in a.filepath[0]:  # without a table, a remote MP3 without a length tag has mpg123's estimated
            continue  # length (audiotree.io.mpeg_stream), so its excerpt may fall elsewhere; with one it is exact
        assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    assert with_table < without, (with_table, without)


def test_a_file_changed_after_indexing_is_an_error_naming_it_under_trust(mp3s, indexed, tmp_path):
    from audiotree.index import build_index

    folder, files = mp3s
    server = CountedHttp({"/x/a.mp3": files["lame-v2-44k-stereo.mp3"]})
    try:
        index = tmp_path / "one.parquet"
        build_index([f"{server.base}/x/a.mp3"], index, executor="serial", show_progress=False)
        clear_header_cache()
        body = bytearray(files["lame-v2-44k-stereo.mp3"])
        body[20000:20000] = bytes(7)  # the frames after byte 20000 move: the table's offsets no longer hit them
        server.objects["/x/a.mp3"] = bytes(body)
        with pytest.raises(AudioReadError, match=r"/x/a\.mp3.*does not match the seek table.*Rebuild the index"):
            _dataset(index, "start")[0]
    finally:
        server.stop()
