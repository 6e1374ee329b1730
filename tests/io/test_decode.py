"""Tests for the decoding layer (audiotree.io).

Every fixture is synthesised here with soundfile (and PyAV for M4A/AAC) from
a non-periodic signal (a chirp plus noise), so that alignment can be measured
by cross-correlation without periodic ambiguity. No timing assertions.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import (
    PYAV_EXTENSIONS,
    SOUNDFILE_EXTENSIONS,
    AudioFile,
    AudioInfo,
    normalize_extension,
    probe,
    pyav_available,
    read_frames,
    supported_extensions,
)
from conftest import REPO_ROOT
from factories import chirp

# (name, sample rate, channels, frames). Odd lengths so nothing lines up with
# codec frame sizes by accident.
SOURCES = {
    "mono16k": (16000, 1, 48_013),
    "stereo44k": (44100, 2, 110_257),
    "stereo48k": (48000, 2, 105_601),
}

# Lossy encodings written by libsndfile: extension -> (format, subtype).
LOSSY = {
    "ogg": ("OGG", "VORBIS"),
    "opus": ("OGG", "OPUS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}


def encode_aac(path: str, x: np.ndarray, sample_rate: int, pns: bool = True) -> None:
    """Encode (frames, channels) float32 to AAC-in-M4A with FFmpeg's native encoder."""
    import av

    layout = "mono" if x.shape[1] == 1 else "stereo"
    with av.open(path, "w") as out:
        stream = out.add_stream("aac", rate=sample_rate, layout=layout, options={} if pns else {"aac_pns": "0"})
        step = stream.codec_context.frame_size or 1024
        for i in range(0, len(x), step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x[i : i + step].T), format="fltp", layout=layout)
            frame.sample_rate = sample_rate
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def aac_encoding_unavailable() -> str | None:
    """Reason why M4A fixtures cannot be made here, or None if they can."""
    if not pyav_available():
        return "PyAV (av) is not installed; M4A/AAC is a PyAV-only format"
    import av

    try:
        av.codec.Codec("aac", "w")
    except Exception as exc:  # FFmpeg built without its AAC encoder
        return f"this FFmpeg build cannot encode AAC: {exc}"
    return None


NO_AAC = aac_encoding_unavailable()
needs_aac = pytest.mark.skipif(NO_AAC is not None, reason=NO_AAC or "")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Write every fixture file once; returns {key: (path, original, sr)}."""
    root = tmp_path_factory.mktemp("audio")
    files: dict[str, tuple[str, np.ndarray, int]] = {}
    for seed, (name, (sr, ch, n)) in enumerate(SOURCES.items()):
        x = chirp(n, sr, ch, seed=seed)
        files[f"{name}.orig"] = ("", x, sr)

        def put(key, ext, orig=x, rate=sr, **kw):
            path = str(root / f"{name}_{key}.{ext}")
            soundfile.write(path, orig, rate, **kw)
            files[f"{name}.{key}"] = (path, orig, rate)

        put("wav16", "wav", subtype="PCM_16")
        put("wav24", "wav", subtype="PCM_24")
        put("wavf", "wav", subtype="FLOAT")
        # Lossless copies are made from the WAV's *integer* samples: libsndfile's
        # WAV and FLAC writers quantise the same float input differently (by up
        # to 1 LSB), so encoding x twice would not give identical content.
        pcm16 = soundfile.read(files[f"{name}.wav16"][0], dtype="int16", always_2d=True)[0]
        pcm24 = soundfile.read(files[f"{name}.wav24"][0], dtype="int32", always_2d=True)[0]
        put("flac16", "flac", orig=pcm16, subtype="PCM_16")
        put("flac24", "flac", orig=pcm24, subtype="PCM_24")
        put("aiff", "aiff", orig=pcm16, subtype="PCM_16")
        put("ogg", "ogg", format="OGG", subtype="VORBIS")
        put("mp3", "mp3", format="MP3", subtype="MPEG_LAYER_III")
        # Opus codes 8/12/16/24/48 kHz natively and libsndfile decodes at the
        # rate stored in the header; at 44.1 kHz libsndfile 1.2.2 refuses to
        # encode ("Opus only supports sample rates of 8000, ... and 48000").
        if sr in (16000, 48000):
            put("opus", "opus", format="OGG", subtype="OPUS")
        if NO_AAC is None and name in ("mono16k", "stereo44k"):
            for key, pns in (("m4a", True), ("m4a_nopns", False)):
                path = str(root / f"{name}_{key}.m4a")
                encode_aac(path, x, sr, pns=pns)
                files[f"{name}.{key}"] = (path, x, sr)
    return files


def reference_decode(path: str) -> np.ndarray:
    """One sequential decode of the whole file with a fresh decoder."""
    if path.endswith(".m4a"):
        with AudioFile(path) as f:
            return f.read_all()
    return soundfile.read(path, dtype="float32", always_2d=True)[0]


def xcorr_lag(original: np.ndarray, start: int, excerpt: np.ndarray, max_lag: int = 1200) -> tuple[int, float]:
    """Lag (in samples) at which ``excerpt`` best matches ``original[start:]``.

    Positive lag: the excerpt's first sample is original[start + lag].
    Returns (lag, normalised correlation at that lag) on channel 0.
    """
    y = excerpt[:, 0].astype(np.float64)
    lo = max(0, start - max_lag)
    hi = min(len(original), start + len(y) + max_lag)
    ref = original[lo:hi, 0].astype(np.float64)
    corr = np.correlate(ref, y, mode="valid")  # corr[k] = <ref[k:k+len(y)], y>
    k = int(np.argmax(corr))
    seg = ref[k : k + len(y)]
    norm = float(corr[k] / (np.linalg.norm(seg) * np.linalg.norm(y) + 1e-12))
    return lo + k - start, norm


# ---------------------------------------------------------------------------
# formats
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ext", "expected"),
    [("WAV", ".wav"), (".Flac", ".flac"), (" .Mp3 ", ".mp3"), ("m4a", ".m4a"), (".OPUS", ".opus")],
)
def test_normalize_extension(ext, expected):
    assert normalize_extension(ext) == expected


@pytest.mark.parametrize("bad", ["", ".", "  ", "a/b.wav", "dir\\x"])
def test_normalize_extension_rejects_non_extensions(bad):
    with pytest.raises(ValueError):
        normalize_extension(bad)


def test_extension_tables():
    for table in (SOUNDFILE_EXTENSIONS, PYAV_EXTENSIONS):
        assert isinstance(table, tuple)
        assert all(e == normalize_extension(e) for e in table)
    assert not set(SOUNDFILE_EXTENSIONS) & set(PYAV_EXTENSIONS)
    for ext in (".wav", ".flac", ".aiff", ".aif", ".ogg", ".opus", ".mp3", ".caf", ".w64", ".rf64", ".au"):
        assert ext in SOUNDFILE_EXTENSIONS
    for ext in (".m4a", ".aac", ".mp4", ".wma"):
        assert ext in PYAV_EXTENSIONS
    exts = supported_extensions()
    assert exts[: len(SOUNDFILE_EXTENSIONS)] == SOUNDFILE_EXTENSIONS
    assert (set(PYAV_EXTENSIONS) <= set(exts)) == pyav_available()
    assert pyav_available() is pyav_available()


def test_pyav_not_imported_unless_needed(corpus):
    wav = corpus["mono16k.wav16"][0]
    code = (
        "import sys, audiotree.io as io\n"
        "io.supported_extensions(); io.pyav_available()\n"
        f"io.probe({wav!r}); io.read_frames({wav!r}, 10, 100)\n"
        "assert 'av' not in sys.modules, 'av was imported'\n"
    )
    env = dict(os.environ)
    src = str(REPO_ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


# ---------------------------------------------------------------------------
# probe
# ---------------------------------------------------------------------------

PROBE_CASES = [
    ("wav16", "WAV", "PCM_16"),
    ("wav24", "WAV", "PCM_24"),
    ("wavf", "WAV", "FLOAT"),
    ("flac16", "FLAC", "PCM_16"),
    ("aiff", "AIFF", "PCM_16"),
    ("ogg", "OGG", "VORBIS"),
    ("mp3", "MP3", "MPEG_LAYER_III"),
]


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize(("key", "fmt", "subtype"), PROBE_CASES)
def test_probe_values(corpus, source, key, fmt, subtype):
    sr, ch, n = SOURCES[source]
    path = corpus[f"{source}.{key}"][0]
    info = probe(path)
    assert isinstance(info, AudioInfo)
    # libsndfile reports exact lengths, including for Vorbis (granule
    # positions) and MP3 (LAME/Xing header: priming and padding removed).
    assert info == AudioInfo(path, n, sr, ch, fmt, subtype)
    assert info.duration == pytest.approx(n / sr)


@pytest.mark.parametrize("source", ["mono16k", "stereo48k"])
def test_probe_opus_keeps_native_rate(corpus, source):
    sr, ch, n = SOURCES[source]
    path = corpus[f"{source}.opus"][0]
    # 16 kHz Opus is decoded at 16 kHz (the header's input rate), not 48 kHz.
    assert probe(path) == AudioInfo(path, n, sr, ch, "OGG", "OPUS")


@needs_aac
@pytest.mark.parametrize("source", ["mono16k", "stereo44k"])
def test_probe_m4a(corpus, source):
    sr, ch, n = SOURCES[source]
    path = corpus[f"{source}.m4a"][0]
    info = probe(path)
    assert (info.path, info.sample_rate, info.channels, info.format, info.subtype) == (path, sr, ch, "MOV", "AAC")
    # Length comes from the MP4 edit list, which excludes the 1024 priming
    # samples; FFmpeg's muxer rounds the end to within one AAC frame.
    assert abs(info.frames - n) < 1024


def test_audio_info_is_frozen_and_picklable():
    info = AudioInfo("a.wav", 32000, 16000, 1, "WAV", "PCM_16")
    assert info.duration == 2.0
    assert AudioInfo("a.wav", 5, 0, 1, "WAV", None).duration == 0.0
    with pytest.raises(AttributeError):
        info.frames = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(info)) == info


# ---------------------------------------------------------------------------
# exact reads (PCM / lossless)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", list(SOURCES))
def test_wav_reads_at_offsets_are_exact(corpus, source):
    sr, ch, n = SOURCES[source]
    path = corpus[f"{source}.wav16"][0]
    full = soundfile.read(path, dtype="float32", always_2d=True)[0]
    offsets = [0, 1, 777, n // 2, n - 3001, 12_345, 5]  # includes backward seeks
    with AudioFile(path) as f:
        assert f.backend == "soundfile"
        for start in offsets:
            y = f.read(start, 3000)
            assert y.dtype == np.float32 and y.shape == (3000, ch)
            assert y.flags.c_contiguous
            np.testing.assert_array_equal(y, full[start : start + 3000])
        # consecutive reads continue seamlessly
        np.testing.assert_array_equal(np.concatenate([f.read(100, 50), f.read(150, 50)]), full[100:200])


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize(("ref_key", "copy_key"), [("wav16", "flac16"), ("wav16", "aiff"), ("wav24", "flac24")])
def test_lossless_copies_are_bit_exact(corpus, source, ref_key, copy_key):
    n = SOURCES[source][2]
    with AudioFile(corpus[f"{source}.{ref_key}"][0]) as ref, AudioFile(corpus[f"{source}.{copy_key}"][0]) as cpy:
        for start in (0, 4095, 4096, n // 3, 2 * n // 3, n - 2000):
            np.testing.assert_array_equal(cpy.read(start, 2000), ref.read(start, 2000))


def test_float_wav_roundtrips_original(corpus):
    path, x, _ = corpus["stereo48k.wavf"]
    with AudioFile(path) as f:
        np.testing.assert_array_equal(f.read(1234, 5000), x[1234:6234])
        np.testing.assert_array_equal(f.read_all(), x)


def test_mono_is_two_dimensional(corpus):
    y, info = read_frames(corpus["mono16k.wav16"][0], 100, 10)
    assert y.shape == (10, 1) and info.channels == 1


# ---------------------------------------------------------------------------
# lossy: random access == sequential decode, alignment with the WAV original
# ---------------------------------------------------------------------------


def adversarial_offsets(n: int, sr: int) -> list[tuple[int, int]]:
    """(start, count) pairs that exercise every seek path of the decoders.

    Backward jumps, forward hops shorter than 2 s after a read (libsndfile's
    Vorbis skip path), far forward jumps (bisection), reads inside and
    straddling the final Ogg page, exact repeats, reads near the start (MP3
    priming, AAC priming packet) and reads past the end.
    """
    return [
        (n // 2, 2000),
        (n // 2 + 2000 + 3000, 1500),  # short forward hop
        (n // 2 + 6500 + sr // 2, 1500),  # another short hop
        (1000, 2500),  # backward
        (n - 400, 300),  # final Ogg page
        (n - 350, 100),  # again, forward within the final page
        (n - 900, 900),  # straddles into the final page, to the end
        # contiguous reads marching into the final page: each starts exactly
        # where the previous one ended (no seek needed in a naive reader)
        (n - 1000, 500),
        (n - 500, 250),
        (n - 250, 150),
        (n - 100, 60),
        (n - 40, 40),
        (n // 3, 3000),  # backward, far
        (n // 3, 3000),  # exact repeat
        (n // 3 + 3000, 3000),  # contiguous continuation
        (5, 1000),  # near the start
        (0, 1500),
        (n - 5000, 4000),  # long forward jump
        (n - 50, 1000),  # runs past the end
    ]


LOSSY_CASES = [
    ("mono16k", "ogg"),
    ("stereo44k", "ogg"),
    ("stereo48k", "ogg"),
    ("mono16k", "mp3"),
    ("stereo44k", "mp3"),
    ("stereo48k", "mp3"),
    ("mono16k", "opus"),
    ("stereo48k", "opus"),
]
M4A_CASES = [pytest.param("mono16k", marks=needs_aac), pytest.param("stereo44k", marks=needs_aac)]


@pytest.mark.parametrize(("source", "key"), LOSSY_CASES)
def test_lossy_random_access_matches_sequential_decode(corpus, source, key):
    path = corpus[f"{source}.{key}"][0]
    sr = SOURCES[source][0]
    full = reference_decode(path)
    n = len(full)
    # Opus re-converges after a seek within libsndfile's 80 ms pre-roll, but
    # not bit-exactly; a misaligned read would be off by ~0.5.
    atol = 1e-2 if key == "opus" else 1e-6
    with AudioFile(path) as f:
        assert f.info.frames == n
        for start, count in adversarial_offsets(n, sr):
            y = f.read(start, count)
            expected = full[start : start + count]
            assert y.shape == expected.shape, (start, count)
            np.testing.assert_allclose(y, expected, rtol=0, atol=atol, err_msg=f"read({start}, {count})")


@pytest.mark.parametrize("source", M4A_CASES)
def test_m4a_random_access_matches_sequential_decode(corpus, source):
    # PNS disabled: with perceptual noise substitution the noise bands depend
    # on the decoder's random state, i.e. on where decoding started.
    path = corpus[f"{source}.m4a_nopns"][0]
    full = reference_decode(path)
    n = len(full)
    with AudioFile(path) as f:
        assert f.backend == "pyav"
        for start, count in adversarial_offsets(n, SOURCES[source][0]):
            y = f.read(start, count)
            expected = full[start : start + count]
            assert y.shape == expected.shape, (start, count)
            np.testing.assert_allclose(y, expected, rtol=0, atol=1e-6, err_msg=f"read({start}, {count})")


@pytest.mark.parametrize(
    ("source", "key"),
    LOSSY_CASES + [pytest.param(s.values[0], "m4a", marks=needs_aac) for s in M4A_CASES],
)
def test_lossy_copies_align_with_wav_original(corpus, source, key):
    path, original, sr = corpus[f"{source}.{key}"]
    n = SOURCES[source][2]
    length = 4096
    with AudioFile(path) as f:
        for start in (0, 2500, n // 2, n - length - 100):
            y = f.read(start, length)
            assert y.shape == (length, SOURCES[source][1])
            lag, corr = xcorr_lag(original, start, y)
            assert abs(lag) <= 2, f"{key} excerpt at {start} is offset by {lag} samples"
            assert corr > 0.8, f"{key} excerpt at {start} does not resemble the original (corr={corr:.2f})"


# ---------------------------------------------------------------------------
# end of file, arguments, lifecycle
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["wav16", "flac16", "ogg", "mp3"])
def test_reads_near_eof_return_fewer_frames(corpus, key):
    path = corpus[f"stereo44k.{key}"][0]
    n = SOURCES["stereo44k"][2]
    full = reference_decode(path)
    with AudioFile(path) as f:
        y = f.read(n - 10, 100)
        assert y.shape == (10, 2)
        np.testing.assert_allclose(y, full[n - 10 :], atol=1e-6)
        for start in (n, n + 1, n + 10**9):
            empty = f.read(start, 5)
            assert empty.shape == (0, 2) and empty.dtype == np.float32
        assert f.read(0, 0).shape == (0, 2)
        np.testing.assert_allclose(f.read(n - 1000), full[n - 1000 :], atol=1e-6)
        np.testing.assert_allclose(f.read_all(), full, atol=1e-6)


def test_invalid_arguments_and_lifecycle(corpus):
    path = corpus["mono16k.wav16"][0]
    f = AudioFile(path)
    assert f.path == path and not f.closed and "soundfile" in repr(f)
    with pytest.raises(ValueError):
        f.read(-1, 10)
    with pytest.raises(ValueError):
        f.read(0, -1)
    with pytest.raises(TypeError):
        f.read(1.5, 10)  # type: ignore[arg-type]
    f.close()
    f.close()  # idempotent
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.read(0, 10)
    with AudioFile(path) as g:
        pass
    assert g.closed


def test_read_frames_one_shot(corpus):
    path = corpus["stereo48k.flac16"][0]
    y, info = read_frames(path, 1000, 2048)
    assert info == probe(path)
    np.testing.assert_array_equal(y, soundfile.read(path, dtype="float32", always_2d=True)[0][1000:3048])
    y_all, _ = read_frames(path)
    assert y_all.shape == (SOURCES["stereo48k"][2], 2)


def test_pathlike_paths(corpus, tmp_path):
    from pathlib import Path

    path = Path(corpus["mono16k.wav16"][0])
    with AudioFile(path) as f:
        assert f.path == str(path) and f.info.path == str(path)


# ---------------------------------------------------------------------------
# decoding only what is needed
# ---------------------------------------------------------------------------


class ReadSpy:
    """Records the frame counts soundfile is asked to decode."""

    def __init__(self, monkeypatch):
        self.calls: list[int] = []
        original = soundfile.SoundFile.read
        spy = self

        def read(self, frames=-1, *args, **kwargs):
            spy.calls.append(frames)
            return original(self, frames, *args, **kwargs)

        monkeypatch.setattr(soundfile.SoundFile, "read", read)


def test_long_flac_excerpts_decode_only_what_is_needed(tmp_path, monkeypatch):
    sr, minutes = 16000, 10
    path = str(tmp_path / "long.flac")
    rng = np.random.default_rng(7)
    with soundfile.SoundFile(path, "w", sr, 1, subtype="PCM_16") as out:
        for _ in range(minutes):
            out.write((0.2 * rng.standard_normal(60 * sr)).astype(np.float32))
    n = minutes * 60 * sr
    full = soundfile.read(path, dtype="float32", always_2d=True)[0]
    assert len(full) == n
    spy = ReadSpy(monkeypatch)
    with AudioFile(path) as f:
        for start in (0, n // 2 + 12_345, n - 3 * sr, 1, 7 * 60 * sr + 1):
            spy.calls.clear()
            y = f.read(start, 3 * sr)
            np.testing.assert_array_equal(y, full[start : start + 3 * sr])
            # one decoder call for exactly the excerpt, never the whole file
            assert spy.calls == [3 * sr]


@pytest.mark.parametrize("key", ["mp3", "ogg"])
def test_lossy_excerpts_decode_at_most_a_bounded_preroll(corpus, monkeypatch, key):
    path = corpus[f"stereo44k.{key}"][0]
    n = SOURCES["stereo44k"][2]
    spy = ReadSpy(monkeypatch)
    with AudioFile(path) as f:
        for start in (n // 2, 20_000, n - 5000):
            spy.calls.clear()
            f.read(start, 1000)
            # MP3 pre-roll is 8 MPEG frames; Vorbis decodes through at most
            # 2 s instead of using libsndfile's broken short-seek path.
            limit = 8 * 1152 if key == "mp3" else 2 * 44100
            assert len(spy.calls) == 1 and 1000 <= spy.calls[0] <= 1000 + limit


# ---------------------------------------------------------------------------
# bad files
# ---------------------------------------------------------------------------


def _write_bad(kind: str, tmp_path, corpus) -> str:
    wav = corpus["mono16k.wav16"][0]
    flac = corpus["mono16k.flac16"][0]
    mp3 = corpus["mono16k.mp3"][0]

    def clone(src: str, name: str, mutate) -> str:
        with open(src, "rb") as fh:
            data = mutate(bytearray(fh.read()))
        dst = str(tmp_path / name)
        with open(dst, "wb") as fh:
            fh.write(bytes(data))
        return dst

    if kind == "missing":
        return str(tmp_path / "does_not_exist.wav")
    if kind == "zero_byte":
        return clone(wav, "empty.wav", lambda d: d[:0])
    if kind == "text_renamed_wav":
        return clone(wav, "notes.wav", lambda d: bytearray(b"this is a text file, not audio\n" * 40))
    if kind == "truncated_wav_header":
        return clone(wav, "trunc.wav", lambda d: d[:20])
    if kind == "truncated_flac_header":
        return clone(flac, "trunc.flac", lambda d: d[:30])
    if kind == "truncated_mp3_header":
        return clone(mp3, "trunc.mp3", lambda d: d[:100])
    if kind == "corrupt_wav_header":

        def garble(d):
            d[20:36] = b"\xff" * 16  # the 'fmt ' chunk payload
            return d

        return clone(wav, "corrupt.wav", garble)
    if kind == "corrupt_flac_header":

        def garble(d):
            d[0:8] = b"\x00" * 8  # 'fLaC' magic and STREAMINFO header
            return d

        return clone(flac, "corrupt.flac", garble)
    if kind == "truncated_flac_data":
        return clone(flac, "half.flac", lambda d: d[: len(d) // 2])
    if kind == "random_bytes_m4a":
        return clone(wav, "noise.m4a", lambda d: bytearray(np.random.default_rng(3).bytes(4000)))
    if kind == "directory":
        d = tmp_path / "a_dir.wav"
        d.mkdir()
        return str(d)
    raise AssertionError(kind)


BAD_KINDS = [
    "missing",
    "zero_byte",
    "text_renamed_wav",
    "truncated_wav_header",
    "truncated_flac_header",
    "truncated_mp3_header",
    "corrupt_wav_header",
    "corrupt_flac_header",
    "truncated_flac_data",
    "random_bytes_m4a",
    "directory",
]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_files_raise_audio_read_error(kind, tmp_path, corpus):
    path = _write_bad(kind, tmp_path, corpus)
    with pytest.raises(AudioReadError) as excinfo:
        read_frames(path)  # open + decode everything
    err = excinfo.value
    message = str(err)
    assert message.startswith(f"Failed to read audio file '{path}': ")
    assert err.file_path == path
    assert isinstance(err, OSError)
    assert err.__cause__ is not None  # raised from the decoder's exception
    if kind == "missing":
        assert isinstance(err.__cause__, FileNotFoundError)
        assert "does not exist" in message
    if kind == "zero_byte":
        assert "the file is empty" in message.lower()
    if kind == "random_bytes_m4a" and not pyav_available():
        assert "pip install av" in message
    # The message survives the trip to a parent process.
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is AudioReadError
    assert str(clone) == message and clone.file_path == path


@pytest.mark.parametrize("kind", ["missing", "zero_byte", "text_renamed_wav", "truncated_wav_header"])
def test_probe_raises_for_unopenable_files(kind, tmp_path, corpus):
    path = _write_bad(kind, tmp_path, corpus)
    with pytest.raises(AudioReadError, match="Failed to read audio file"):
        probe(path)


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_rejected(tmp_path, bad_value):
    sr = 16000
    x = chirp(sr, sr, 2, seed=11)
    x[5000, 1] = bad_value
    path = str(tmp_path / "poisoned.wav")
    soundfile.write(path, x, sr, subtype="FLOAT")
    assert probe(path).frames == sr  # the header is fine
    with AudioFile(path) as f:
        np.testing.assert_array_equal(f.read(0, 4000), x[:4000])  # clean span reads fine
        with pytest.raises(AudioReadError) as excinfo:
            f.read(4990, 20)
        np.testing.assert_array_equal(f.read(6000, 100), x[6000:6100])  # file still usable
    message = str(excinfo.value)
    assert path in message and excinfo.value.file_path == path
    assert "NaN/Inf" in message
    assert "re-encode" in message and 'on_read_error="skip"' in message
    clone = pickle.loads(pickle.dumps(excinfo.value))
    assert str(clone) == message and clone.file_path == path


def test_huge_finite_samples_are_accepted(tmp_path):
    x = np.zeros((1000, 1), dtype=np.float32)
    x[10:20] = 3e38  # finite, but any float32 sum of them overflows
    path = str(tmp_path / "loud.wav")
    soundfile.write(path, x, 8000, subtype="FLOAT")
    y, _ = read_frames(path)
    np.testing.assert_array_equal(y, x)


def test_audio_read_error_pickle_roundtrip():
    err = AudioReadError("Failed to read audio file '/x.wav': boom. Fix it.", "/x.wav")
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is AudioReadError
    assert str(clone) == str(err) and clone.file_path == "/x.wav"


# ---------------------------------------------------------------------------
# PyAV selection and fallback
# ---------------------------------------------------------------------------


@needs_aac
def test_misnamed_m4a_falls_back_to_pyav(corpus, tmp_path):
    src = corpus["stereo44k.m4a_nopns"][0]
    disguised = str(tmp_path / "actually_aac.wav")
    shutil.copyfile(src, disguised)
    with AudioFile(disguised) as f, AudioFile(src) as g:
        assert f.backend == "pyav"
        assert f.info.frames == g.info.frames
        np.testing.assert_array_equal(f.read(5000, 3000), g.read(5000, 3000))


@needs_aac
def test_pyav_only_format_without_av_gives_install_hint(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # makes `import av` fail
    path = corpus["mono16k.m4a"][0]
    with pytest.raises(AudioReadError) as excinfo:
        AudioFile(path)
    assert "pip install av" in str(excinfo.value) and excinfo.value.file_path == path


def test_mp3_decoder_noise_is_silenced_but_stderr_survives(tmp_path):
    """mpg123's pre-roll messages do not reach fd 2; fd 2 works afterwards."""
    import subprocess
    import sys

    code = f"""
import numpy as np, soundfile, sys, os
from audiotree.synth import synthesize
# 16 kHz stereo music: a low per-channel bitrate, where mpg123 complains after seeks.
soundfile.write({str(tmp_path / 'n.mp3')!r}, synthesize('music', 6.0, 16000, 2, np.random.default_rng(0)), 16000)
from audiotree.io import AudioFile
with AudioFile({str(tmp_path / 'n.mp3')!r}) as f:
    for start in range(10000, 80000, 7000):
        f.read(start, 4410)
os.write(2, b"STDERR STILL WORKS\\n")
"""
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "part2_3_length" not in quiet.stderr
    assert "STDERR STILL WORKS" in quiet.stderr
    import os

    loud = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "AUDIOTREE_DECODER_MESSAGES": "1"},
    )
    assert "part2_3_length" in loud.stderr  # the messages exist; we only hide them


_OTHER_THREAD_DURING_MP3 = """
import ctypes, os, sys, threading, traceback, warnings
import numpy as np, soundfile
from audiotree.synth import synthesize
path = {path!r}
soundfile.write(path, synthesize('music', 6.0, 16000, 2, np.random.default_rng(0)), 16000)
from audiotree.io import AudioFile

libc = ctypes.CDLL(None)
c_stderr = ctypes.c_void_p.in_dll(libc, "stderr")
original = c_stderr.value
done, reading = threading.Event(), threading.Event()

def decode():
    with AudioFile(path) as f:
        for _ in range(40):
            for start in range(10000, 80000, 7000):
                reading.set()
                f.read(start, 4410)
                reading.clear()
    done.set()

def chatter():
    # Another thread writing to stderr in every way Python can, until the decodes end.
    n = during = 0
    while not done.is_set() or n < 10:
        inside = reading.is_set()  # an MP3 read is in progress right now
        sys.stderr.write(f"LINE {{n}}\\n"); sys.stderr.flush()
        os.write(2, f"RAW {{n}}\\n".encode())
        warnings.warn(f"WARN {{n}}")
        try:
            raise ValueError(f"TRACE {{n}}")
        except ValueError:
            traceback.print_exc()
        during += inside
        n += 1
    print("WRITTEN", n, during)

warnings.simplefilter("always")
threads = [threading.Thread(target=decode), threading.Thread(target=chatter)]
for t in threads: t.start()
for t in threads: t.join()
assert c_stderr.value == original
"""


def test_other_threads_stderr_survives_an_mp3_decode(tmp_path):
    """Only the decoder's C-stream messages are dropped: Python-level and fd-2 writes of other threads stay."""
    code = _OTHER_THREAD_DURING_MP3.format(path=str(tmp_path / "n.mp3"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    written, during = map(int, result.stdout.split("WRITTEN")[1].split())
    assert during > 0, "no write overlapped an MP3 read; the test proves nothing"
    err = result.stderr
    for kind in ("LINE", "RAW", "WARN", "TRACE"):
        seen = {int(tok.split()[1].rstrip(":'\"")) for tok in re.findall(rf"{kind} \d+", err)}
        assert seen == set(range(written)), (kind, sorted(set(range(written)) - seen)[:10])
    assert "part2_3_length" not in err


def test_truncated_wav_data_is_a_bad_file(tmp_path):
    """A WAV cut inside its data chunk is refused, not read as a shorter file."""
    import numpy as np
    import soundfile

    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile, probe

    full = tmp_path / "full.wav"
    soundfile.write(full, np.zeros((16000, 2), np.float32), 16000, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(full.read_bytes()[:44 + 2 * 2 * 8])  # header + 8 frames
    with pytest.raises(AudioReadError, match="truncated") as info:
        probe(cut)
    assert info.value.file_path == str(cut) and "cut.wav" in str(info.value)
    with AudioFile(full) as f:  # an intact file still opens
        assert f.info.frames == 16000
    # A streaming WAV with an unknown (0xFFFFFFFF) data size is accepted.
    data = bytearray(full.read_bytes())
    pos = data.index(b"data")
    data[pos + 4 : pos + 8] = b"\xff\xff\xff\xff"
    stream = tmp_path / "stream.wav"
    stream.write_bytes(bytes(data[: pos + 8 + 4 * 100]))
    try:
        assert probe(stream).frames >= 100
    except AudioReadError as exc:  # libsndfile may refuse the header itself; never as "truncated"
        assert "truncated" not in str(exc)


def _encode_16ch_opus(path: str, x: np.ndarray, sample_rate: int) -> None:
    """16-channel Opus (libopus, mapping family 255) in Matroska, read back through PyAV."""
    av = pytest.importorskip("av")
    if "libopus" not in av.codecs_available:
        pytest.skip("this FFmpeg build has no libopus encoder")
    with av.open(path, "w") as out:
        stream = out.add_stream("libopus", rate=sample_rate, layout="hexadecagonal", options={"mapping_family": "255"})
        fmt = stream.codec_context.format
        pcm = np.clip(x * 32767, -32768, 32767).astype(np.int16)  # libopus takes packed s16
        for i in range(0, len(pcm), 960):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm[i:i + 960].reshape(1, -1)), format=fmt.name,
                                               layout="hexadecagonal")
            frame.sample_rate, frame.pts = sample_rate, i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def test_more_than_eight_planar_channels_decode_in_order(tmp_path):
    # PyAV reads planes past the 8th through garbage pointers; this used to crash the process.
    rate, channels = 48_000, 16
    x = (0.2 * np.random.default_rng(7).standard_normal((rate, channels))).astype(np.float32)
    path = str(tmp_path / "sixteen.mka")
    _encode_16ch_opus(path, x, rate)
    with AudioFile(path) as f:
        assert f.info.channels == channels
        whole = f.read_all()
        assert whole.shape == (f.info.frames, channels) and np.isfinite(whole).all()
        np.testing.assert_array_equal(f.read(0, 9600), whole[:9600])
    # Each decoded channel is its own source channel (the interleave keeps the order).
    a, b = whole[rate // 4: rate // 2], x[rate // 4: rate // 2]
    corr = np.array([[abs(np.corrcoef(a[:, i], b[:, j])[0, 1]) for j in range(channels)] for i in range(channels)])
    assert (np.argmax(corr, axis=1) == np.arange(channels)).all(), np.round(corr.max(axis=1), 2)


def test_matroska_seek_reads_are_sample_exact(tmp_path):
    # Matroska timestamps are in ms and FFmpeg re-applies the Opus pre-skip after a flush; seek reads are
    # placed by the packets' exact sample counts instead (audiotree.io.pyav_reader), so no shift remains.
    rate, channels = 48_000, 16
    x = (0.2 * np.random.default_rng(8).standard_normal((rate, channels))).astype(np.float32)
    path = str(tmp_path / "sixteen.mka")
    _encode_16ch_opus(path, x, rate)
    tick = rate // 1000
    with AudioFile(path) as f:
        whole = f.read_all()
        for start in (9_600, 20_000, 31_234):
            got = f.read(start, 4_000)
            assert got.shape == (4_000, channels)
            probe_ = got[1_000:3_000, 0]
            lags = list(range(-tick, tick + 1))
            errors = [np.abs(whole[start + 1_000 + lag: start + 3_000 + lag, 0] - probe_).max() for lag in lags]
            assert lags[int(np.argmin(errors))] == 0 and min(errors) < 0.05, (start, min(errors))