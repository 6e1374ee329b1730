"""A remote WAV or AIFF excerpt planned to the byte (issue 39).

The index records where an uncompressed file's samples start and end (a two-row ``seek_points`` table, from its
``data`` or ``SSND`` chunk, checked against libsndfile's frame count); the read-ahead then fetches the head
libsndfile reads at open, the excerpt's frames and a few frames around them, and the chunks after the samples
(libsndfile's open parses them), instead of an estimate widened by 16 KiB and 0.1 % of the file on each side.
Files are written by sox, soundfile (libsndfile) and ffmpeg (a LIST chunk before the data), served by a counting
HTTP server. The table never changes how a file is read; an index without tables plans as before.
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

from audiotree.excerpts.config import ExcerptConfig
from audiotree.index import build_index, freshness, open_index
from audiotree.io import byte_counters, read_ahead
from audiotree.io.flac_indexed import uses_seek_points
from audiotree.io.pcm_layout import data_table, wav_data_chunk
from audiotree.io.ranged_get import HEAD_NEED
from audiotree.sources import Corpus, ReadAhead, create_audio_dataset
from audiotree.sources.read_plans import RowFacts, row_reads
from counted_http import CountedHttp

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("sox", "ffmpeg")), reason="needs sox and ffmpeg")


def _noise(rate: int, channels: int, seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((int(rate * seconds), channels))).clip(-1, 1).astype(np.float32)


def _write_corpus(folder: Path) -> dict[str, bytes]:
    """name -> bytes: WAVs by sox and soundfile (mono/stereo, 8-96 kHz, 16/24-bit, float), a LIST chunk before the
    data (ffmpeg's, soundfile's strings written first) and after it (soundfile's strings written last), AIFF."""
    sox = [("sox-8k-16-mono.wav", 8000, 1, 16, 7.0), ("sox-441-24-stereo.wav", 44100, 2, 24, 5.0),
           ("sox-96k-16-mono.wav", 96000, 1, 16, 4.0), ("sox-16k-16-mono.aiff", 16000, 1, 16, 6.0)]
    for name, rate, channels, bits, seconds in sox:
        subprocess.run(["sox", "-n", "-r", str(rate), "-c", str(channels), "-b", str(bits), str(folder / name),
                        "synth", str(seconds), "whitenoise", "vol", "0.3"], check=True, capture_output=True)
    for i, (name, rate, channels, subtype, fmt) in enumerate(
            [("sf-16k-16-mono.wav", 16000, 1, "PCM_16", "WAV"), ("sf-48k-float-stereo.wav", 48000, 2, "FLOAT", "WAV"),
             ("sf-22k-24-stereo.aiff", 22050, 2, "PCM_24", "AIFF")]):
        soundfile.write(folder / name, _noise(rate, channels, 5.0, i), rate, subtype=subtype, format=fmt)
    with soundfile.SoundFile(folder / "sf-list-before.wav", "w", 16000, 1, "PCM_16") as f:
        f.comment = "x" * 9000  # strings set before the samples: a LIST chunk past the first 8 KiB, then data
        f.write(_noise(16000, 1, 6.0, 7))
    with soundfile.SoundFile(folder / "sf-list-after.wav", "w", 32000, 2, "PCM_16") as f:
        f.write(_noise(32000, 2, 5.0, 8))
        f.title, f.comment = "after", "y" * 3000  # strings set after the samples: a LIST chunk after the data
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "anoisesrc=r=24000:d=6", "-ac", "1",
                    str(folder / "ffmpeg-list.wav")], check=True)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pcm")
    files = _write_corpus(folder)
    server = CountedHttp({f"/p/{name}": data for name, data in files.items()})
    try:
        remote = folder.parent / f"{folder.name}-remote.parquet"
        build_index([f"{server.base}/p/{name}" for name in files], remote, executor="serial", show_progress=False)
        local = folder.parent / f"{folder.name}-local.parquet"
        build_index([str(folder / name) for name in files], local, executor="serial", show_progress=False,
                    loudness=False)
        yield types.SimpleNamespace(folder=folder, files=files, server=server, remote=remote, local=local)
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh():
    freshness.clear()
    read_ahead.close_stores()
    yield
    read_ahead.close_stores()
    freshness.clear()


def _rows(index: Path) -> list[dict]:
    return pq.read_table(index).to_pylist()


def test_each_file_gets_the_table_of_its_samples_in_both_builds(corpus):
    """The table's rows are ``[0, first sample byte]`` and ``[frames, end of the samples]``: the bytes between
    are the samples libsndfile decodes (16-bit and float compared as stored), in a build with loudness (the
    remote index) and one of headers only (the local index); a LIST chunk before the data or after it is passed."""
    for index in (corpus.remote, corpus.local):
        rows = _rows(index)
        assert len(rows) == len(corpus.files)
        for row in rows:
            name = row["path"].rsplit("/", 1)[1]
            data = corpus.files[name]
            points = np.asarray(row["seek_points"], dtype=np.int64).reshape(-1, 2)
            assert points.shape == (2, 2) and points[0, 0] == 0 and points[1, 0] == row["frames"], (name, points)
            first, end = int(points[0, 1]), int(points[1, 1])
            with soundfile.SoundFile(corpus.folder / name) as f:
                width = {"PCM_16": 2, "PCM_24": 3, "FLOAT": 4}[f.subtype]
                assert end - first == f.frames * f.channels * width, name
                kind = {"PCM_16": "i2", "FLOAT": "f4"}.get(f.subtype)
                if kind is not None:
                    order = ">" if name.endswith(".aiff") else "<"
                    stored = np.frombuffer(data[first:end], dtype=order + kind).reshape(-1, f.channels)
                    assert np.array_equal(stored, f.read(dtype="int16" if kind == "i2" else "float32", always_2d=True)), name
            if name == "sf-list-before.wav":
                assert first > HEAD_NEED  # (the data chunk's header was read past the first 8 KiB)
            if name == "sf-list-after.wav":
                assert end < len(data) and data[end:end + 4] == b"LIST"
            assert not uses_seek_points(row["path"])  # (a table never changes how a WAV is read)


def test_a_table_is_only_kept_when_bytes_and_frames_agree():
    """A data chunk whose size is not the frames' bytes (unknown: a streaming writer's 0xFFFFFFFF), or a compressed
    subtype, gets no table; the chunk list is followed past the bytes at hand by its chunk headers only."""
    import io
    import struct

    fmt = struct.pack("<4sI2H2I2H", b"fmt ", 16, 1, 2, 8000, 32000, 4, 16)
    junk = b"JUNK" + struct.pack("<I", 5000) + bytes(5000)
    body = fmt + junk + b"data" + struct.pack("<I", 400) + bytes(400)
    wav = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body
    assert wav_data_chunk(wav[:64], io.BytesIO(wav)) == (12 + len(fmt) + len(junk) + 8, 400)
    assert wav_data_chunk(wav[:64]) is None  # (past the bytes at hand, with nothing to read them from)
    kw = dict(channels=2, container="WAV", size=len(wav))
    assert data_table(wav, frames=100, subtype="PCM_16", **kw)[1].tolist() == [100, len(wav)]
    assert data_table(wav, frames=99, subtype="PCM_16", **kw) is None
    assert data_table(wav, frames=100, subtype="IMA_ADPCM", **kw) is None
    assert data_table(wav, frames=100, subtype="PCM_16", channels=2, container="RF64") is None
    streamed = wav.replace(b"data" + struct.pack("<I", 400), b"data" + struct.pack("<I", 0xFFFFFFFF))
    assert data_table(streamed, frames=100, subtype="PCM_16", **kw) is None


class _Random:
    excerpt, duration = ExcerptConfig(strategy="random"), 1.5


def test_a_plan_is_the_excerpts_bytes_the_head_and_the_chunks_after_the_data(corpus):
    """Per excerpt the plan is the first 8 KiB (what the reader fetches at open; the chunks before the data when
    they run past them), the excerpt's bytes with at most 1.05x their size, and the chunks after the data."""
    for row in _rows(corpus.remote):
        points = np.asarray(row["seek_points"], dtype=np.int64).reshape(-1, 2)
        first, end = int(points[0, 1]), int(points[1, 1])
        block_align = (end - first) // row["frames"]
        facts = RowFacts(path=row["path"], size=row["size"], duration=row["duration"], seek_points=points)
        for seed in range(20):
            plan = [(p.start, p.stop) for p in row_reads(facts, np.random.default_rng(seed), _Random(), trust_size=True)]
            excerpt = int(np.ceil(_Random.duration * row["sample_rate"])) * block_align
            head = max(HEAD_NEED, first)
            tail = min(row["size"] - end, HEAD_NEED)
            assert plan[0][0] == 0 and plan[0][1] >= head, (row["path"], plan)
            assert sum(b - a for a, b in plan) <= 1.05 * excerpt + head + tail, (row["path"], plan, excerpt)


def _dataset(index: Path, read_ahead=None, sample_rate=16000, **kwargs):
    return create_audio_dataset(corpus=Corpus(index=str(index), on_stale="trust", read_ahead=read_ahead),
                                duration=1.5, sample_rate=sample_rate, excerpt=ExcerptConfig(strategy="random"),
                                excerpt_seed=3, num_epochs=None, **kwargs)


@pytest.mark.slow
def test_read_ahead_holds_every_read_and_items_equal_the_local_ones(corpus):
    """Over many random excerpts of every file (at 16 and 48 kHz: resampled, and at their own rate) each read libsndfile
    makes is a read-ahead hit: 0 misses, and the items equal the same files read from disk."""
    for rate in (16000, 48000):
        read_ahead.close_stores()
        ds = _dataset(corpus.remote, ReadAhead(items=8), shuffle_seed=1, sample_rate=rate)
        here = _dataset(corpus.local, shuffle_seed=1, sample_rate=rate)
        for i in range(6):  # the order's shape is known after the first few
            ds[i]
        byte_counters.reset_byte_counters()
        for i in range(6, 60):
            a, b = ds[i], here[i]
            assert a.filepath[0].rsplit("/", 1)[1] == b.filepath[0].rsplit("/", 1)[1]
            assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform)), (i, a.filepath)
        counts = byte_counters.byte_counters()["by_cache"]["read_ahead"]
        read_ahead.close_stores()
        assert counts["hits"] > 0 and counts["misses"] == 0, (rate, counts)


def test_an_index_without_tables_plans_and_reads_as_before(corpus, tmp_path):
    """An index built before the tables (``seek_points`` null for its WAV rows) plans by the mean byte rate as it
    did, reads the same items, and fetches more bytes than the one with tables."""
    table = pq.read_table(corpus.remote)
    column = table.schema.get_field_index("seek_points")
    old = tmp_path / "old.parquet"
    pq.write_table(table.set_column(column, table.schema.field(column),
                                    pa.nulls(table.num_rows, table.schema.field(column).type)), old)
    assert all(p is None for p in open_index(old, columns=["seek_points"]).table.column("seek_points").to_pylist())
    fetched = []
    for index in (corpus.remote, old):
        read_ahead.close_stores()
        ds = _dataset(index, ReadAhead(items=8), shuffle_seed=4)
        corpus.server.reset()
        items = [ds[i] for i in range(30)]
        read_ahead.close_stores()
        fetched.append((corpus.server.counts()[1], items))
    (new_bytes, new_items), (old_bytes, old_items) = fetched
    for a, b in zip(new_items, old_items):
        assert np.array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
    assert new_bytes < old_bytes, (new_bytes, old_bytes)
