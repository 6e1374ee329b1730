"""FLAC seek points in the corpus index (issue 25): stored at index time, read by one ranged GET per excerpt.

Samples are compared with soundfile's whole decode of the same file; requests
and bytes are counted at a proxy in front of moto's S3 server on 127.0.0.1
(server side, every request the readers make).
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
import tarfile
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.io.flac_indexed import FlacSeekFile, clear_header_cache, seek_hint
from audiotree.io.flac_seek_points import header_seek_points, seek_points

from test_storage import http, http_server  # noqa: F401 - the Range-honouring HTTP server fixtures
from conftest import require_tool
from helpers import member_after_junk
from audiotree.sources import Corpus, Output

# (seconds, rate, channels, subtype): mono and stereo, several rates, 16 and 24 bits.
SHAPES = [(12, 16000, 1, "PCM_16"), (40, 44100, 2, "PCM_16"), (15, 48000, 2, "PCM_24"), (20, 22050, 1, "PCM_24")]


def _flac(seconds: float, rate: int, channels: int, subtype: str = "PCM_16", seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 0.3 * t))
    x = np.stack([tone * (c + 1) / 2 + 0.02 * rng.standard_normal(t.size) for c in range(channels)], axis=1)
    buf = io.BytesIO()
    soundfile.write(buf, x.astype(np.float32), rate, format="FLAC", subtype=subtype)
    return buf.getvalue()


def _decoded(data: bytes) -> np.ndarray:
    return soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]


def _starts(n: int, frames: int) -> list[int]:
    """At 0, mid-file (off any frame boundary), ending at the last frame, and running past the end."""
    return [0, n // 2 + 17, n - frames, n - frames // 3]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[1]}Hz-{s[2]}ch-{s[3]}")
def test_excerpts_by_seek_points_equal_the_soundfile_decode(tmp_path, shape):
    seconds, rate, channels, subtype = shape
    data = _flac(seconds, rate, channels, subtype)
    path = tmp_path / "a.flac"
    path.write_bytes(data)
    whole = _decoded(data)
    f = FlacSeekFile(str(path), seek_points(data), size=len(data))
    assert (f.info.frames, f.info.sample_rate, f.info.channels) == (len(whole), rate, channels)
    frames = 3 * rate
    for start in _starts(len(whole), frames):
        got = f.read(start, frames)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        assert np.array_equal(got, whole[start:start + frames]), start
    assert f.read(len(whole), 10).shape == (0, channels)


def test_a_member_of_a_local_shard_reads_its_own_bytes(tmp_path):
    data = _flac(9, 16000, 2)
    url = member_after_junk(tmp_path / "s.tar", "a.flac", data)
    whole = _decoded(data)
    got = FlacSeekFile(url, seek_points(data), size=len(data)).read(70000, 48000)
    assert np.array_equal(got, whole[70000:118000])


def _with_seektable(data: bytes, points: np.ndarray) -> bytes:
    """``data`` with its metadata replaced by STREAMINFO and a SEEKTABLE of ``points`` (what ``flac`` writes)."""
    first = int(points[0, 1])
    streaminfo = data[8:8 + 34]
    table = b"".join(int(s).to_bytes(8, "big") + int(b - first).to_bytes(8, "big") + (4096).to_bytes(2, "big")
                     for s, b in points[1:])
    head = b"fLaC" + bytes([0]) + (34).to_bytes(3, "big") + streaminfo
    head += bytes([0x80 | 3]) + len(table).to_bytes(3, "big") + table
    return head + data[first:]


def test_a_seektable_gives_points_from_the_header_alone():
    data = _flac(12, 16000, 1)
    scanned = seek_points(data)
    edited = _with_seektable(data, scanned)
    moved = scanned.copy()
    moved[:, 1] += len(edited) - len(data)
    assert np.array_equal(header_seek_points(edited[:4096]), moved)
    assert np.array_equal(seek_points(edited), moved)  # dense enough: taken as it is
    assert header_seek_points(data) is None  # libsndfile writes none
    sparse = _with_seektable(data, scanned[::10])  # like flac's default, 10 s apart
    assert len(header_seek_points(sparse)) == 2
    assert len(seek_points(sparse)) == len(scanned)  # the frames are scanned instead


def test_a_headers_only_build_keeps_a_seektable_and_scans_nothing(tmp_path):
    from audiotree.index import build_index, open_index

    data = _flac(12, 16000, 1)
    scanned = seek_points(data)
    (tmp_path / "audio").mkdir()
    (tmp_path / "audio" / "table.flac").write_bytes(_with_seektable(data, scanned))
    (tmp_path / "audio" / "plain.flac").write_bytes(data)
    for loudness in (False, True):
        out = tmp_path / f"idx-{loudness}.parquet"
        build_index(str(tmp_path / "audio"), out, loudness=loudness, executor="serial", show_progress=False)
        rows = {r["path"].rsplit("/", 1)[-1]: r["seek_points"]
                for r in open_index(out, columns=["path", "seek_points"]).table.to_pylist()}
        moved = scanned + [0, len(_with_seektable(data, scanned)) - len(data)]
        assert np.array_equal(np.asarray(rows["table.flac"]).reshape(-1, 2), moved)
        if loudness:  # every byte is read: the frames are scanned
            assert np.array_equal(np.asarray(rows["plain.flac"]).reshape(-1, 2), scanned)
        else:
            assert rows["plain.flac"] is None


def test_every_point_found_is_a_frame_start(tmp_path):
    """Noise at full scale (sync codes abound in its frames): a read from every point matches the decode."""
    rng = np.random.default_rng(3)
    buf = io.BytesIO()
    soundfile.write(buf, rng.uniform(-1, 1, 30 * 8000).astype(np.float32), 8000, format="FLAC")
    data = buf.getvalue()
    (tmp_path / "a.flac").write_bytes(data)
    whole = _decoded(data)
    points = seek_points(data)
    assert np.all(np.diff(points[:, 0]) > 0) and np.all(np.diff(points[:, 0]) <= 2 * 8000)
    f = FlacSeekFile(str(tmp_path / "a.flac"), points, size=len(data))
    for sample in points[:, 0]:
        assert np.array_equal(f.read(int(sample), 100), whole[sample:sample + 100])


def test_a_table_that_does_not_match_the_file_is_an_error_naming_it(tmp_path):
    data = _flac(10, 16000, 1)
    path = tmp_path / "a.flac"
    path.write_bytes(data)
    points = seek_points(data)
    shifted = points.copy()
    shifted[1:, 1] += 3  # offsets off their frames
    with pytest.raises(AudioReadError, match=r"a\.flac.*does not match the seek table.*Rebuild the index"):
        FlacSeekFile(str(path), shifted, size=len(data)).read(40000, 16000)
    other = _flac(10, 16000, 1, seed=9)  # another recording of the same length: other frame sizes
    path.write_bytes(other)
    clear_header_cache()
    with pytest.raises(AudioReadError, match=r"a\.flac.*does not match the seek table"):
        f = FlacSeekFile(str(path), points, size=len(other))
        f.read(80000, 16000)
    with pytest.raises(AudioReadError, match="does not start at sample 0"):
        FlacSeekFile(str(path), points[::-1], size=len(other))
    with pytest.raises(AudioReadError, match="stay inside"):
        FlacSeekFile(str(path), points, size=int(points[-1, 1]))


def test_open_audio_takes_the_hint_for_its_path_only(tmp_path):
    from audiotree.io.flac_indexed import FlacSeekFile as Seek
    from audiotree.io.segment import open_audio

    data = _flac(6, 16000, 1)
    path = tmp_path / "a.flac"
    path.write_bytes(data)
    with seek_hint(str(path), seek_points(data), len(data)):
        with open_audio(str(path)) as f:
            assert isinstance(f, Seek)
        with open_audio(str(path), (1.0, 2.0)) as f:  # a segment, over the seek file
            assert np.array_equal(f.read(0, 100), _decoded(data)[16000:16100])
        other = tmp_path / "b.flac"
        other.write_bytes(data)
        with open_audio(str(other)) as f:
            assert not isinstance(f, Seek)
    with open_audio(str(path)) as f:
        assert not isinstance(f, Seek)


# ------------------------------------------------------------------ through the index, over S3
@pytest.fixture(scope="module")
def s3flac(tmp_path_factory):
    """moto behind a counting proxy, holding FLAC files of mixed rates and a tar shard of FLAC members."""
    from test_remote_render import counted_s3

    with counted_s3() as (fs, proxy):
        fs.mkdir("flac")
        files = {}
        for k, (seconds, rate, channels, subtype) in enumerate(SHAPES):
            files[f"f{k}.flac"] = _flac(seconds, rate, channels, subtype, seed=k)
            fs.pipe(f"flac/files/f{k}.flac", files[f"f{k}.flac"])
        members = {f"m{k}.flac": _flac(25, 16000, 1 + k % 2, seed=10 + k) for k in range(2)}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, body in members.items():
                for member, data in ((name, body), (name.replace(".flac", ".json"), json.dumps({"k": 1}).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        fs.pipe("flac/shards/train-000000.tar", buf.getvalue())
        yield {"fs": fs, "proxy": proxy, "files": files, "members": members,
               "tmp": tmp_path_factory.mktemp("flac-index")}


def _index(s3flac, name, sources, **kwargs):
    from audiotree.index import build_index

    out = s3flac["tmp"] / name
    if not out.exists():
        build_index(sources, out, executor="serial", show_progress=False, **kwargs)
    return out


def _rows(out):
    from audiotree.index import open_index

    ix = open_index(out, columns=["path", "size", "seek_points", "duration", "channels", "sample_rate"])
    return ix.table.to_pylist()


def test_a_build_stores_each_flac_files_seek_points_and_reads_it_once(s3flac):
    proxy = s3flac["proxy"]
    proxy.reset()
    out = _index(s3flac, "files.parquet", ["s3://flac/files"])
    gets = [e for e in proxy.seen() if e[0] == "GET" and e[1].endswith(".flac")]
    # One GET of the whole object per file: the table and the profile from the same bytes.
    assert sorted(e[1] for e in gets) == sorted(f"/flac/files/{n}" for n in s3flac["files"]), gets
    for row in _rows(out):
        data = s3flac["files"][row["path"].rsplit("/", 1)[-1]]
        assert np.array_equal(np.asarray(row["seek_points"]).reshape(-1, 2), seek_points(data))
    # A headers-only build reads no audio: libsndfile's files have no SEEKTABLE, so no table.
    bare = _index(s3flac, "bare.parquet", ["s3://flac/files"], loudness=False)
    assert all(row["seek_points"] is None for row in _rows(bare))


def _dataset(out, *, on_stale="raise", read_ahead=None, **kwargs):
    """The index's dataset; without read-ahead (its plans would fetch other items' bytes during an item: these
    tests count each item's own requests; tests/sources/test_read_ahead.py counts the read-ahead's)."""
    from audiotree.sources import create_audio_dataset

    return create_audio_dataset(corpus=Corpus(index=str(out), on_stale=on_stale, read_ahead=read_ahead),
                                output=Output(mono=True),
                                duration=3.0, sample_rate=16000, num_epochs=1, shuffle_seed=1, excerpt_seed=2, **kwargs)


def _item_requests(s3flac, out, **kwargs):
    """Per item: (GETs, body bytes) at the server, and the waveforms (each file's header once per process)."""
    proxy = s3flac["proxy"]
    clear_header_cache()
    ds = _dataset(out, excerpt=ExcerptConfig(strategy="random"), on_stale="trust", **kwargs)
    counts, waves, paths = [], [], []
    for i in range(len(ds)):
        for _ in range(2):  # a file's first excerpt, then a second one
            proxy.reset()
            item = ds[i]
            waves.append(np.asarray(item.waveform))
            paths.append(item.filepath[0])
            log = [e for e in proxy.seen() if e[0] == "GET"]
            counts.append((len(log), sum(e[3] for e in log)))
    return counts, waves, paths


def _within_the_goal(counts, paths, rows):
    """Each file's first excerpt: header + <= 1.5x its share + 64 KiB; later ones: <= 1.5x + 64 KiB."""
    by_path = {row["path"]: row for row in rows}
    for k, ((_, sent), path) in enumerate(zip(counts, paths)):
        row = by_path[path]
        points = np.asarray(row["seek_points"]).reshape(-1, 2)
        share = (row["size"] - points[0, 1]) * 3 / row["duration"]
        header = int(points[0, 1]) if k % 2 == 0 else 0
        assert sent <= header + 1.5 * share + 64 * 1024, (path, sent, share)


def test_an_indexed_flac_excerpt_is_the_header_once_then_one_get(s3flac):
    out = _index(s3flac, "files.parquet", ["s3://flac/files"])
    counts, waves, paths = _item_requests(s3flac, out)
    assert [c[0] for c in counts] == [2, 1] * len(s3flac["files"]), counts
    _within_the_goal(counts, paths, _rows(out))
    # The same items as a local copy of the corpus read with libsndfile.
    local = s3flac["tmp"] / "local"
    local.mkdir(exist_ok=True)
    for name, data in s3flac["files"].items():
        (local / name).write_bytes(data)
    ds = _dataset(_index(s3flac, "local.parquet", [str(local)]), excerpt=ExcerptConfig(strategy="random"))
    for i in range(len(ds)):
        assert np.array_equal(waves[2 * i], np.asarray(ds[i].waveform))


def test_without_the_table_the_same_excerpts_cost_more_requests(s3flac, tmp_path):
    """An index of format 1.1 (no seek_points column) opens and reads as before: by libsndfile's probing seeks."""
    out = _index(s3flac, "files.parquet", ["s3://flac/files"])
    table = pq.read_table(out)
    meta = json.loads(table.schema.metadata[b"audiotree"])
    meta["format_version"] = [1, 1]
    old = tmp_path / "old.parquet"
    table = table.drop_columns(["seek_points"])
    pq.write_table(table.replace_schema_metadata({b"audiotree": json.dumps(meta).encode()}), old)
    counts, waves, _ = _item_requests(s3flac, old)
    new_counts, new_waves, _ = _item_requests(s3flac, out)
    assert all(np.array_equal(a, b) for a, b in zip(waves, new_waves))
    assert sum(c[0] for c in counts) > sum(c[0] for c in new_counts), (counts, new_counts)


def test_members_of_a_remote_shard_read_by_their_seek_points(s3flac):
    out = _index(s3flac, "shards.parquet", ["s3://flac/shards/train-000000.tar"])
    rows = _rows(out)
    assert len(rows) == 2 and all(row["seek_points"] is not None for row in rows)
    for row in rows:
        data = s3flac["members"][row["path"].split("?", 1)[0].rsplit("/", 1)[-1]]
        assert np.array_equal(np.asarray(row["seek_points"]).reshape(-1, 2), seek_points(data))
    counts, _, paths = _item_requests(s3flac, out)
    assert [c[0] for c in counts] == [2, 1, 2, 1], counts
    _within_the_goal(counts, paths, rows)


def test_a_file_replaced_since_indexing_is_caught_never_read_wrong(s3flac):
    from audiotree.index.reader import StaleFileError

    fs = s3flac["fs"]
    fs.pipe("flac/swap/a.flac", s3flac["files"]["f0.flac"])
    out = _index(s3flac, "swap.parquet", ["s3://flac/swap"])
    fs.pipe("flac/swap/a.flac", _flac(12, 16000, 1, seed=77))  # same length, other frames
    clear_header_cache()
    from audiotree.index import freshness

    freshness.clear()
    with pytest.raises(StaleFileError, match="a.flac"):
        _dataset(out, excerpt=ExcerptConfig(strategy="start"))[0]
    # Trusted anyway (on_stale="trust": no check), the table's frames are not found: an error, not other audio.
    ds = _dataset(out, excerpt=ExcerptConfig(strategy="start"), on_stale="trust")
    with pytest.raises(AudioReadError, match=r"s3://flac/swap/a\.flac.*does not match the seek table"):
        ds[0]


def test_over_http_an_excerpt_is_one_ranged_get_after_the_header(http):
    """A plain HTTP server honouring Range (tests/io/test_storage.py): the header once, then one GET an excerpt."""
    data = _flac(40, 44100, 2)
    http.objects["/flac/a.flac"] = data
    url = f"{http.base}/flac/a.flac"
    points = seek_points(data)
    whole = _decoded(data)
    clear_header_cache()
    http.reset_counters()
    f = FlacSeekFile(url, points, size=len(data), version=1)
    assert http.requests == 1 and http.bytes_sent == points[0, 1]
    share = (len(data) - points[0, 1]) * 3 / 40
    for start in (0, 600_000, len(whole) - 3 * 44100):
        http.reset_counters()
        assert np.array_equal(f.read(start, 3 * 44100), whole[start:start + 3 * 44100])
        assert http.requests == 1 and http.bytes_sent <= 1.5 * share + 64 * 1024, (http.requests, http.bytes_sent)
    http.reset_counters()
    FlacSeekFile(url, points, size=len(data), version=1).read(0, 10)  # the header is kept: one GET
    assert http.requests == 1


# ------------------------------------------------------------------ files written by flac, ffmpeg and sox (issue 39)
def _png(side: int = 96) -> bytes:
    """A noise PNG (cover art that does not compress: a metadata block of tens of KB)."""
    rows = np.random.default_rng(1).integers(0, 256, (side, 1 + 3 * side), dtype=np.uint8)
    rows[:, 0] = 0

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes())) + chunk(b"IEND", b""))


# (name, tool, rate, channels, bits, seconds, tool options)
TOOL_FILES = [
    ("flac-8k-mono-16", "flac", 8000, 1, 16, 20, []),
    ("flac-44k-stereo-16-b1152", "flac", 44100, 2, 16, 20, ["-b", "1152"]),
    ("flac-44k-stereo-16-b4096-S1s", "flac", 44100, 2, 16, 15, ["-b", "4096", "-S", "1s"]),  # its SEEKTABLE is used
    ("flac-96k-stereo-24", "flac", 96000, 2, 24, 8, []),
    ("flac-48k-mono-24-no-seektable", "flac", 48000, 1, 24, 15, ["--no-seektable"]),
    ("flac-22k-stereo-16-picture", "flac", 22050, 2, 16, 15, ["--picture"]),
    ("flac-48k-6ch-8", "flac", 48000, 6, 8, 8, ["--channel-map=none"]),
    ("flac-192k-mono-24", "flac", 192000, 1, 24, 6, []),
    ("ffmpeg-32k-stereo-16", "ffmpeg", 32000, 2, 16, 15, []),
    ("ffmpeg-48k-mono-24", "ffmpeg", 48000, 1, 24, 12, []),
    ("sox-16k-mono-16", "sox", 16000, 1, 16, 20, []),
    ("sox-44k-stereo-24", "sox", 44100, 2, 24, 10, []),
]


def _tool_flac(folder, name, tool, rate, channels, bits, seconds, options):
    require_tool(shutil.which(tool) is not None, tool, "it writes the FLAC files read by seek points")
    rng = np.random.default_rng(len(name))
    t = np.arange(int(seconds * rate)) / rate
    x = np.stack([0.3 * np.sin(2 * np.pi * (220 + 110 * c) * t) * (1 + 0.5 * np.sin(2 * np.pi * 0.3 * t))
                  + 0.05 * rng.standard_normal(t.size) for c in range(channels)], axis=1)
    wav, out = folder / f"{name}.wav", folder / f"{name}.flac"
    soundfile.write(wav, x.astype(np.float32) / channels, rate, subtype="PCM_U8" if bits == 8 else f"PCM_{bits}")
    if tool == "flac":
        if "--picture" in options:
            (folder / "cover.png").write_bytes(_png())
            options = ["--picture", str(folder / "cover.png"), "-T", "TITLE=a tone"]
        cmd = ["flac", "-s", "-f", *options, "-o", str(out), str(wav)]
    elif tool == "ffmpeg":
        cmd = ["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "flac", *options, str(out)]
    else:
        cmd = ["sox", str(wav), str(out)]
    subprocess.run(cmd, check=True)
    return out


@pytest.mark.parametrize("case", TOOL_FILES, ids=lambda c: c[0])
def test_files_written_by_the_tools_read_by_seek_points_equal_a_local_read(tmp_path, case):
    """The hard gate: every excerpt (start, middle, last frames, across and at seek points) equals AudioFile.read
    (mono to 6 channels, 8 to 24 bits, 8 to 192 kHz)."""
    from audiotree.io import AudioFile

    name, tool, rate, channels, bits = case[:5]
    path = _tool_flac(tmp_path, *case)
    data = path.read_bytes()
    points = seek_points(data)
    if name.endswith("picture"):
        assert points[0, 1] > 20000  # the cover art is in the header: not kept, not needed to decode
    if name.endswith("S1s"):
        assert np.array_equal(points, header_seek_points(data[:int(points[0, 1])]))  # flac's own table
    clear_header_cache()
    f = FlacSeekFile(str(path), points, size=len(data))
    local = AudioFile(str(path))
    n = local.info.frames
    assert (f.info.frames, f.info.sample_rate, f.info.channels, f.info.subtype) == (
        n, rate, channels, local.info.subtype)
    frames = 3 * rate
    mid = len(points) // 2
    starts = {0, 1, n // 2 + 17, n - frames, n - 1000, n - 1,  # the start, the middle, the last frames
              int(points[mid, 0]), int(points[mid, 0]) - 1, int(points[mid, 0]) - frames // 2}  # at / across a point
    for start in sorted(starts):
        for count in (frames, 100, n):
            want = local.read(start, count)
            got = f.read(start, count)
            assert got.dtype == np.float32 and np.array_equal(got, want), (name, start, count)
    local.close()


def test_without_pyav_a_remote_flac_excerpt_is_one_request(http, tmp_path):
    """A base install (``import av`` fails): FLAC URLs go by their seek points, one GET an excerpt after the header."""
    data = _flac(20, 44100, 2)
    http.objects["/flac/base.flac"] = data
    url = f"{http.base}/flac/base.flac"
    points = seek_points(data)
    np.save(tmp_path / "points.npy", points)
    starts = [0, 400_000, len(_decoded(data)) - 3 * 44100]
    child = f"""
import sys
sys.modules["av"] = None  # what a base install without the av extra sees
import numpy as np
from audiotree.io.extensions import pyav_available
from audiotree.io.flac_indexed import FlacSeekFile, uses_seek_points
assert not pyav_available()
assert uses_seek_points("http://h/x.flac") and uses_seek_points({url!r})
f = FlacSeekFile({url!r}, np.load({str(tmp_path / 'points.npy')!r}), size={len(data)})
for k, start in enumerate({starts!r}):
    np.save({str(tmp_path)!r} + f"/x{{k}}.npy", f.read(start, 3 * 44100))
assert sys.modules["av"] is None
"""
    http.reset_counters()
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert http.requests == 1 + len(starts)  # the header once, then one ranged GET per excerpt
    whole = _decoded(data)
    for k, start in enumerate(starts):
        assert np.array_equal(np.load(tmp_path / f"x{k}.npy"), whole[start:start + 3 * 44100])


def test_a_damaged_frame_is_an_error_not_audio(tmp_path):
    """A byte flipped inside a frame (its CRC-16 fails): libsndfile stops, as a local read does; never other audio
    (FFmpeg's decoder, through PyAV before, gave these frames' samples wrong)."""
    good = _flac(12, 44100, 2)
    points = seek_points(good)
    for k, skip in enumerate((3000, 60000)):  # in the frame the read seeks to, in a frame it reads on to
        data = bytearray(good)
        data[int(points[4, 1]) + skip] ^= 0x10
        path = tmp_path / f"a{k}.flac"
        path.write_bytes(data)
        f = FlacSeekFile(str(path), points, size=len(data))
        assert np.array_equal(f.read(0, 44100), _decoded(good)[:44100])  # the frames before it
        with pytest.raises(AudioReadError, match=rf"a{k}\.flac.*do not decode"):
            f.read(int(points[4, 0]), 2 * 44100)


# ------------------------------------------------------------------ variable block size
# No tool here writes one (flac 1.4, ffmpeg's and sox's FLAC encoders block at a fixed size), so the test builds
# one from frames `flac` wrote: a first part at -b 4096 and the rest at -b 1152, each frame header rewritten to
# variable blocking (it carries its first sample, not its frame number), both CRCs recomputed.
def _crc(data: bytes, poly: int, bits: int) -> int:
    crc, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for byte in data:
        crc ^= byte << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly if crc & top else crc << 1) & mask
    return crc


def _coded(n: int) -> bytes:
    """FLAC's UTF-8-like coding of a frame header's number."""
    if n < 0x80:
        return bytes([n])
    length = next(k for k in range(2, 8) if n < 1 << (7 - k + 6 * (k - 1)))
    tail = [0x80 | (n >> 6 * i) & 0x3F for i in reversed(range(length - 1))]
    return bytes([(0xFF00 >> length) & 0xFF | n >> 6 * (length - 1)] + tail)


def _frames(data: bytes) -> list[bytes]:
    """The frames of a FLAC file, each ending where the next header (CRC-8 checked) starts and its CRC-16 holds."""
    from audiotree.io.flac_seek_points import header_length
    from audiotree.io.integrity import flac_frame_header

    pos, out = header_length(data), []
    while pos < len(data):
        nxt = pos + 2
        while nxt < len(data) and not (flac_frame_header(data, nxt) and _crc(data[pos:nxt], 0x8005, 16) == 0):
            nxt = data.find(b"\xff\xf8", nxt + 1) % (len(data) + 1) or len(data)
        out.append(data[pos:nxt])
        pos = nxt
    return out


def _variable(frame: bytes, sample: int) -> bytes:
    """``frame`` with variable blocking: its header names its first sample; CRC-8 and CRC-16 recomputed."""
    length = next((k for k in range(1, 8) if not frame[4] & (0x80 >> k)), 1) if frame[4] & 0x80 else 1
    extra = {6: 1, 7: 2}.get(frame[2] >> 4, 0) + {12: 1, 13: 2, 14: 2}.get(frame[2] & 0xF, 0)
    rest = frame[4 + length:4 + length + extra]
    head = bytes([frame[0], frame[1] | 1, frame[2], frame[3]]) + _coded(sample) + rest
    head += bytes([_crc(head, 0x07, 8)])
    body = head + frame[4 + length + extra + 1:-2]
    return body + _crc(body, 0x8005, 16).to_bytes(2, "big")


def test_a_variable_blocksize_stream_reads_by_seek_points(tmp_path):
    from audiotree.io import AudioFile
    from audiotree.io.integrity import flac_frame_header

    require_tool(shutil.which("flac") is not None, "flac", "it writes the frames the variable stream is made of")
    rate, split = 16000, 3 * 16000 + 1000
    x = _decoded(_flac(9, rate, 2))
    parts = []
    for k, (lo, hi, block) in enumerate(((0, split, "4096"), (split, len(x), "1152"))):
        soundfile.write(tmp_path / f"{k}.wav", x[lo:hi], rate, subtype="PCM_16")
        subprocess.run(["flac", "-s", "-f", "--no-seektable", "--no-padding", "-b", block, "-o",
                        str(tmp_path / f"{k}.flac"), str(tmp_path / f"{k}.wav")], check=True)
        parts.append((tmp_path / f"{k}.flac").read_bytes())
    frames, sample = [], 0
    for part in parts:
        for frame in _frames(part):
            frames.append(_variable(frame, sample))
            sample += flac_frame_header(frame, 0)[1]
    assert sample == len(x) and {len(f) > 0 for f in frames} == {True}
    info = bytearray(parts[0][8:42])
    info[0:4] = struct.pack(">HH", 1152, 4096)  # min and max block size
    info[4:10] = bytes(6)  # frame sizes unknown
    info[13:18] = (int.from_bytes(info[13:18], "big") >> 36 << 36 | len(x)).to_bytes(5, "big")  # total samples
    info[18:34] = bytes(16)  # no MD5
    data = b"fLaC\x80\x00\x00\x22" + bytes(info) + b"".join(frames)
    path = tmp_path / "variable.flac"
    path.write_bytes(data)
    assert flac_frame_header(data, 42)[2]  # variable blocking
    subprocess.run(["flac", "-s", "-t", str(path)], check=True)  # libFLAC's own test: a valid stream
    local = AudioFile(str(path))
    assert np.array_equal(local.read(0, None), x)  # a valid stream: libsndfile decodes it whole to the signal
    points = seek_points(data)
    assert len(points) >= 8 and np.all(np.diff(points[:, 0]) <= 2 * rate)
    f = FlacSeekFile(str(path), points, size=len(data))
    for start in (0, 1, split - 500, split, int(points[5, 0]) - 3, len(x) // 2 + 17, len(x) - rate, len(x) - 1):
        assert np.array_equal(f.read(start, rate), local.read(start, rate)), start
