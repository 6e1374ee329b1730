"""Bad data never passes as audio (issue 11): cut, corrupt and lying files.

Every read either returns exactly the frames the header (or the excerpt
request) promised, finite and decoded, or raises ``AudioReadError`` naming the
file and saying what is wrong; inside a dataset that error goes through
``on_read_error``. The files are real encodings made here with soundfile and
then damaged the way downloads and disks damage them.
"""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import soundfile

from audiotree.core import AudioTree
from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, probe
from audiotree.sources import Corpus, create_audio_dataset
from audiotree.synth import synthesize

RATE = 16000


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, bytes]:
    """1 s of 16 kHz mono music in each format, as bytes."""
    root = tmp_path_factory.mktemp("good")
    x = synthesize("music", 1.0, RATE, 1, np.random.default_rng(0))
    out = {}
    for ext, kw in {
        "wav": dict(subtype="PCM_16"),
        "flac": dict(subtype="PCM_16"),
        "ogg": dict(format="OGG", subtype="VORBIS"),
        "mp3": dict(format="MP3", subtype="MPEG_LAYER_III"),
    }.items():
        path = root / f"good.{ext}"
        soundfile.write(path, x, RATE, **kw)
        out[ext] = path.read_bytes()
    return out


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _assert_names_file(exc: AudioReadError, path: str, *words: str) -> None:
    message = str(exc)
    assert exc.file_path == path and message.startswith(f"Failed to read audio file '{path}': ")
    for word in words:
        assert word in message, message
    assert 'on_read_error="skip"' in message  # says what to do


def _excerpt_policies(path: str) -> None:
    """Inside a dataset the bad file goes through every on_read_error policy."""
    ds = create_audio_dataset(filepaths=[path], duration=0.3, sample_rate=RATE, corpus=Corpus(on_read_error="raise"))
    with pytest.raises(AudioReadError) as info:
        ds[0]
    assert info.value.file_path == path
    with pytest.warns(UserWarning, match="Skipping unreadable audio"):
        assert create_audio_dataset(filepaths=[path], duration=0.3, sample_rate=RATE, corpus=Corpus(on_read_error="warn"))[0] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert create_audio_dataset(filepaths=[path], duration=0.3, sample_rate=RATE, corpus=Corpus(on_read_error="skip"))[0] is None


# ---------------------------------------------------------------- the four examples


def test_truncated_mp3_is_refused_not_zero_padded(good, tmp_path):
    path = _write(tmp_path, "t.mp3", good["mp3"][:700])
    with pytest.raises(AudioReadError) as info:
        AudioTree.from_file(path, offset=0.1, duration=0.3)
    _assert_names_file(info.value, path, "truncated")
    with pytest.raises(AudioReadError):
        AudioFile(path)
    _excerpt_policies(path)


def test_ogg_missing_its_last_47_bytes_is_refused(good, tmp_path):
    path = _write(tmp_path, "t.ogg", good["ogg"][:-47])
    with pytest.raises(AudioReadError) as info:  # was a plain ValueError ("offset past the end")
        AudioTree.from_file(path, offset=0.1, duration=0.3)
    _assert_names_file(info.value, path, "truncated", "end-of-stream")
    with pytest.raises(AudioReadError):
        probe(path)  # was: 0 frames
    _excerpt_policies(path)  # was: an all-zero item under every policy
    # A complete stream followed by a tag that some tools append still reads.
    tagged = _write(tmp_path, "tagged.ogg", good["ogg"] + b"TAG" + b"x" * 125)
    with AudioFile(tagged) as f:
        assert f.read_all().shape == (RATE, 1)


def _flac_total_samples(data: bytes, value: int) -> bytes:
    """Sets STREAMINFO's 36-bit total_samples (bits 108-143 of the block)."""
    b = bytearray(data)
    assert b[:4] == b"fLaC" and b[4] & 0x7F == 0
    base = 8  # "fLaC" + the metadata block header
    b[base + 13] = (b[base + 13] & 0xF0) | ((value >> 32) & 0x0F)
    b[base + 14 : base + 18] = struct.pack(">I", value & 0xFFFFFFFF)
    return bytes(b)


def test_flac_header_claiming_huge_length_is_refused_before_allocating(good, tmp_path):
    data = bytearray(good["flac"])
    data[8 + 13 : 8 + 18] = b"\xff" * 5  # the mutation: total_samples bytes set to 0xFF
    path = _write(tmp_path, "huge.flac", bytes(data))
    with pytest.raises(AudioReadError) as info:  # was MemoryError (25 GiB to 18 TiB), escaping on_read_error
        AudioFile(path).read_all()
    _assert_names_file(info.value, path, "header claims 68719476735 frames", "holds at most")
    _excerpt_policies(path)


def test_flac_header_without_a_length_is_refused(good, tmp_path):
    path = _write(tmp_path, "unknown.flac", _flac_total_samples(good["flac"], 0))
    with pytest.raises(AudioReadError) as info:
        probe(path)
    _assert_names_file(info.value, path, "does not record the stream length")


def test_flac_header_claiming_more_than_the_frames_present_is_refused(good, tmp_path):
    path = _write(tmp_path, "long.flac", _flac_total_samples(good["flac"], 3 * RATE))  # holds 1 s
    with AudioFile(path) as f:
        assert f.info.frames == 3 * RATE
        np.testing.assert_array_equal(f.read(0, 1000), soundfile.read(path, frames=1000, dtype="float32",
                                                                       always_2d=True)[0])
        with pytest.raises(AudioReadError) as info:
            f.read_all()
        _assert_names_file(info.value, path, "truncated")  # libsndfile's own error, or ours on a short decode
        with pytest.raises(AudioReadError):  # an excerpt past the real end is not zero padding
            f.read(2 * RATE, 4000)
    with pytest.raises(AudioReadError):
        AudioTree.from_file(path, offset=1.5, duration=0.3)


def test_flac_header_claiming_less_than_the_frames_present_is_refused(good, tmp_path):
    """Issue 29: total_samples / 2 was trusted (the second half silently dropped); the last frame's number says more."""
    path = _write(tmp_path, "half.flac", _flac_total_samples(good["flac"], RATE // 2))
    with pytest.raises(AudioReadError) as info:
        probe(path)
    _assert_names_file(info.value, path, f"claims {RATE // 2} frames", f"last FLAC frame ends at frame {RATE}")
    with AudioFile(_write(tmp_path, "whole.flac", good["flac"])) as f:  # the intact file: its claim matches
        assert f.read_all().shape == (RATE, 1)


def test_m4a_track_duration_claiming_less_than_its_packets_is_refused(tmp_path):
    """Issue 29: an mdhd duration of half the track was trusted; the sample table's packet count says more."""
    from test_decode import NO_AAC, encode_aac

    if NO_AAC:
        pytest.skip(NO_AAC)
    path = str(tmp_path / "a.m4a")
    encode_aac(path, synthesize("music", 1.0, RATE, 1, np.random.default_rng(0)).astype(np.float32), RATE)
    assert probe(path).frames == RATE
    data = bytearray(open(path, "rb").read())
    i = data.index(b"mdhd")
    at = i + 8 + (16 if data[i + 4] == 1 else 8)  # version/flags, then the creation/modification times, timescale
    width = 8 if data[i + 4] == 1 else 4
    duration = int.from_bytes(data[at + 4 : at + 4 + width], "big")
    data[at + 4 : at + 4 + width] = (duration // 2).to_bytes(width, "big")
    bad = _write(tmp_path, "half.m4a", bytes(data))
    with pytest.raises(AudioReadError) as info:
        probe(bad)
    assert info.value.file_path == bad and "packets of 1024 samples" in str(info.value)


def test_corrupt_flac_frames_are_errors_not_silence(good, tmp_path):
    data = bytearray(good["flac"])
    rng = np.random.default_rng(5)
    for i in rng.integers(200, len(data), 40):
        data[i] ^= 0x5A  # damage frame payloads (their CRC no longer matches)
    path = _write(tmp_path, "corrupt.flac", bytes(data))
    with pytest.raises(AudioReadError) as info:
        AudioFile(path).read_all()
    _assert_names_file(info.value, path)


def test_absurd_sample_rate_is_refused(good, tmp_path):
    """Found by the fuzzer: a 1 GHz WAV made a 0.1 s excerpt pad 100 million frames (seconds, GBs)."""
    data = bytearray(good["wav"])
    data[24:28] = struct.pack("<I", 1_048_576_000)
    path = _write(tmp_path, "fast.wav", bytes(data))
    with pytest.raises(AudioReadError) as info:
        AudioTree.from_file(path, duration=0.1)
    _assert_names_file(info.value, path, "sample rate of 1048576000 Hz")
    data[24:28] = struct.pack("<I", 384_000)  # a real high rate still reads
    with AudioFile(_write(tmp_path, "hi.wav", bytes(data))) as f:
        assert f.info.sample_rate == 384_000 and f.read_all().shape == (RATE, 1)


def _wav_after_big_list(frames: int, list_bytes: int = 70_000) -> bytes:
    """A 16 kHz mono PCM_16 WAV whose ``data`` chunk starts after a LIST chunk of ``list_bytes``."""
    import io

    buf = io.BytesIO()
    soundfile.write(buf, synthesize("music", frames / RATE, RATE, 1, np.random.default_rng(2)), RATE,
                    format="WAV", subtype="PCM_16")
    data = buf.getvalue()
    i = data.index(b"data")
    chunk = b"LIST" + struct.pack("<I", list_bytes) + b"INFO" + b"\0" * (list_bytes - 4)
    out = data[:i] + chunk + data[i:]
    return out[:4] + struct.pack("<I", len(out) - 8) + out[8:]


def test_truncated_wav_with_its_data_chunk_beyond_64_kib_is_refused(tmp_path):
    """Issue 29: the data chunk was looked for in the first 64 KiB only; 19,200 declared, 9,200 read, no error."""
    whole = _wav_after_big_list(19_200)
    with AudioFile(_write(tmp_path, "whole.wav", whole)) as f:  # complete: reads as declared
        assert f.read_all().shape == (19_200, 1)
    path = _write(tmp_path, "cut.wav", whole[: len(whole) - 2 * 10_000])
    with pytest.raises(AudioReadError) as info:
        probe(path)
    _assert_names_file(info.value, path, "truncated", "38400 bytes of audio", "only 9200 frames")


# ---------------------------------------------------------------- zero-length claims


def test_wav_with_zero_data_size_over_audio_is_refused(good, tmp_path):
    data = bytearray(good["wav"])
    pos = data.index(b"data")
    data[pos + 4 : pos + 8] = b"\0\0\0\0"
    path = _write(tmp_path, "zero.wav", bytes(data))
    with pytest.raises(AudioReadError) as info:
        probe(path)
    _assert_names_file(info.value, path, "claims 0 frames")


def test_genuinely_empty_files_stay_readable(tmp_path):
    for ext, kw in (("wav", {}), ("ogg", dict(format="OGG", subtype="VORBIS"))):
        path = str(tmp_path / f"empty.{ext}")
        soundfile.write(path, np.zeros((0, 1), np.float32), RATE, **kw)
        with AudioFile(path) as f:
            assert f.info.frames == 0 and f.read_all().shape == (0, 1)


# ---------------------------------------------------------------- MP3 length estimates


def _without_length_header(mp3: bytes) -> bytes:
    b = bytearray(mp3)
    i = b.find(b"Xing")
    assert 0 <= i < 64
    b[i : i + 4] = b"\0\0\0\0"  # mpg123 now estimates the length from the file size
    return bytes(b)


def test_mp3_without_length_header_reads_its_estimated_length(tmp_path):
    """A constant-bitrate MP3 with no Xing/Info frame: mpg123's estimate from the size holds."""
    x = synthesize("music", 1.0, RATE, 1, np.random.default_rng(0))
    stream = b"".join(_cbr_frames(tmp_path, "cbr.mp3", x, 0.3))
    path = _write(tmp_path, "nohdr.mp3", stream)
    info = probe(path)
    assert info.frames > 0
    with AudioFile(path) as f:
        whole = f.read_all()
        assert whole.shape == (info.frames, 1) and np.abs(whole).max() > 0.01
    # Cut near its end: the estimate follows the size; what is missing stays
    # within the tolerance and the read keeps the promised length.
    for cut in (len(stream) - 300, len(stream) - 100):
        path = _write(tmp_path, f"cut{cut}.mp3", stream[:cut])
        with AudioFile(path) as f:
            assert f.read_all().shape == (f.info.frames, 1)


def _untrimmed(damaged: str, original: np.ndarray) -> np.ndarray:
    """The whole read of an MP3 whose tag is not trusted: every frame, untrimmed, holding ``original``."""
    with AudioFile(damaged) as f:
        x = f.read_all()
        assert x.shape == (f.info.frames, 1) and f.info.frames % 576 == 0  # whole MPEG frames, no trimming
    # The original is this audio without the encoder delay (LAME's 576 + the decoder's 529) and the padding.
    lag = 576 + 529
    np.testing.assert_allclose(x[lag : lag + len(original)], original, atol=1e-6)
    return x


def test_mp3_whose_length_tag_is_damaged_reads_whole(good, tmp_path):
    """Issue 29 made these read short; issue 35: a damaged tag is not trusted, the frames give the length."""
    with AudioFile(_write(tmp_path, "good.mp3", good["mp3"])) as f:
        original = f.read_all()
    cases = (("renamed", _without_length_header(good["mp3"])), ("no-count", _xing_flags(good["mp3"], 0)))
    for name, damaged in cases:
        path = _write(tmp_path, f"{name}.mp3", damaged)
        assert soundfile.info(path).frames < 0.9 * RATE  # what libsndfile alone reads, without an error
        _untrimmed(path, original)


def test_mp3_estimate_short_of_the_stream_reads_every_frame(tmp_path):
    """No tag at all, a 160 kbit/s frame first: mpg123 estimates a ~20x shorter file; the frame walk counts it."""
    x = synthesize("music", 2.0, RATE, 1, np.random.default_rng(1))
    dense = _cbr_frames(tmp_path, "hi.mp3", x, 0.0)
    sparse = _cbr_frames(tmp_path, "lo.mp3", x, 0.99)
    path = _write(tmp_path, "front-loaded.mp3", dense[0] + b"".join(sparse))
    assert soundfile.info(path).frames < len(sparse) * 576 // 5  # libsndfile's estimate: what it alone reads
    with AudioFile(path) as f:
        assert f.info.frames == (len(sparse) + 1) * 576
        whole = f.read_all()
        assert whole.shape == (f.info.frames, 1) and np.abs(whole[-5000:]).max() > 0.01
        np.testing.assert_allclose(f.read(f.info.frames - 3000, 1000), whole[-3000:-2000], atol=1e-6)


def _xing_flags(mp3: bytes, flags: int) -> bytes:
    b = bytearray(mp3)
    i = b.find(b"Xing")
    b[i + 4 : i + 8] = struct.pack(">I", flags)
    return bytes(b)


def test_mp3_whose_frame_count_was_halved_reads_whole(good, tmp_path):
    """Issue 29 trusted Info/Xing frames / 2; the LAME tag's CRC (or the bitrate bound) catches it, and the frames
    give the length (issue 35: the file is no longer refused for its tag)."""
    with AudioFile(_write(tmp_path, "good.mp3", good["mp3"])) as f:
        original = f.read_all()
    b = bytearray(good["mp3"])
    i = b.find(b"Xing")
    frames = struct.unpack_from(">I", b, i + 8)[0]
    b[i + 8 : i + 12] = struct.pack(">I", frames // 2)
    path = _write(tmp_path, "half.mp3", bytes(b))
    claimed = soundfile.info(path).frames
    assert claimed < 0.6 * len(original)
    whole = _untrimmed(path, original)
    # An excerpt past the end the damaged tag claims is read, not refused as past the end (OffsetPastEndError).
    tree = AudioTree.from_file(path, offset=(claimed + 500) / RATE, duration=0.1)
    np.testing.assert_allclose(tree.waveform.reshape(-1), whole[claimed + 500 : claimed + 2100, 0], atol=1e-6)
    # Without a LAME extension, a count below what the bytes hold at the highest bitrate is not trusted either.
    lame = b.find(b"LAME")
    b[lame : lame + 36] = bytes(36)  # as encoders without the LAME extension leave it
    b[i + 8 : i + 12] = struct.pack(">I", 3)  # 5.5 KB at most 160 kbit/s (720-byte frames): at least 7 frames
    _untrimmed(_write(tmp_path, "three.mp3", bytes(b)), original)


def test_mp3_with_a_hole_between_its_frames_is_refused(tmp_path):
    x = synthesize("music", 1.0, RATE, 1, np.random.default_rng(0))
    data = bytearray(b"".join(_cbr_frames(tmp_path, "cbr.mp3", x, 0.3)))
    # Destroy the middle third: the decoder would skip those bytes and join the audio around them.
    third = len(data) // 3
    data[third : 2 * third] = b"\0" * third
    path = _write(tmp_path, "holed.mp3", bytes(data))
    with pytest.raises(AudioReadError) as info:
        AudioFile(path)
    _assert_names_file(info.value, path, "not MPEG frames, yet frames follow them")
    _excerpt_policies(path)


_MPEG2_L3_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)


def _cbr_frames(tmp_path, name: str, x: np.ndarray, level: float) -> list[bytes]:
    """The MPEG frames of a constant-bitrate 16 kHz MP3 of ``x``, without any Xing/Info frame."""
    path = tmp_path / name
    soundfile.write(path, x, RATE, format="MP3", bitrate_mode="CONSTANT", compression_level=level)
    data, frames, i = path.read_bytes(), [], 0
    while i + 4 <= len(data) and data[i] == 0xFF and data[i + 1] & 0xE0 == 0xE0:
        size = 72 * _MPEG2_L3_KBPS[data[i + 2] >> 4] * 1000 // RATE + (data[i + 2] >> 1 & 1)
        frames.append(data[i : i + size])
        i += size
    assert len(frames) > 20
    # At 8 kbit/s a frame is too small for LAME's Info tag, so it writes none.
    return frames[1:] if b"Xing" in frames[0] or b"Info" in frames[0] else frames


def test_mp3_without_length_header_is_read_to_its_last_frame(tmp_path):
    """No length header: a cut file reads to its last whole frame; an estimate 20x too long is corrected."""
    x = synthesize("music", 2.0, RATE, 1, np.random.default_rng(1))
    dense = _cbr_frames(tmp_path, "hi.mp3", x, 0.0)  # 160 kbit/s
    stream = b"".join(dense)
    for cut in (len(stream) // 2 + 123, len(stream) - 500):
        path = _write(tmp_path, f"cut{cut}.mp3", stream[:cut])
        sf_frames = len(soundfile.read(path, dtype="float32")[0])
        with AudioFile(path) as f:
            assert f.info.frames == sf_frames and f.info.frames % 576 == 0
            np.testing.assert_array_equal(f.read_all(), soundfile.read(path, dtype="float32", always_2d=True)[0])
    # mpg123 estimates the length from the first frame: a 8 kbit/s frame in
    # front of 160 kbit/s ones makes it ~20x too long. The frames say how long it is.
    sparse = _cbr_frames(tmp_path, "lo.mp3", np.zeros_like(x), 0.99)
    path = _write(tmp_path, "mixed.mp3", sparse[0] + stream)
    assert soundfile.info(path).frames > 10 * len(x)
    with AudioFile(path) as f:
        assert f.info.frames == (len(dense) + 1) * 576
        assert f.read_all().shape == (f.info.frames, 1)


def test_mp3_with_length_header_is_held_to_it(good, tmp_path):
    """A Xing/Info header makes the length exact: a cut file is refused at open."""
    for cut in (len(good["mp3"]) - 300, len(good["mp3"]) // 2):
        path = _write(tmp_path, f"cut{cut}.mp3", good["mp3"][:cut])
        with pytest.raises(AudioReadError) as info:
            probe(path)
        _assert_names_file(info.value, path, "truncated", "Xing/Info header records")


# ---------------------------------------------------------------- memory


def test_a_read_too_large_for_memory_is_an_audio_read_error(tmp_path):
    """A real (sparse) 1 TiB RF64 file: the whole read cannot be allocated; AudioReadError, not MemoryError."""
    path = tmp_path / "huge.rf64"
    soundfile.write(path, np.zeros((1000, 1), np.float32), RATE, format="RF64", subtype="FLOAT")
    data = bytearray(path.read_bytes())
    frames = 2**38  # 1 TiB of float32
    ds64 = data.index(b"ds64")
    riff = 12 + 8 + 28 + 8 + 16 + 8 + frames * 4  # not checked by readers beyond plausibility
    data[ds64 + 8 : ds64 + 24] = struct.pack("<QQ", riff, frames * 4)
    data[ds64 + 24 : ds64 + 32] = struct.pack("<Q", frames)
    path.write_bytes(bytes(data))
    try:
        with open(path, "r+b") as fh:
            fh.truncate(data.index(b"data") + 8 + frames * 4)  # sparse: no disk blocks
    except OSError as exc:
        pytest.skip(f"this filesystem cannot hold a sparse 1 TiB file: {exc}")
    try:
        f = AudioFile(path)
    except AudioReadError as exc:
        pytest.skip(f"libsndfile does not open this RF64 layout here: {exc}")
    with f:
        if f.info.frames < 2**37:
            pytest.skip(f"libsndfile reads {f.info.frames} frames from the patched header")
        with pytest.raises(AudioReadError) as info:
            f.read_all()
        assert "not enough memory" in str(info.value) and info.value.file_path == str(path)
