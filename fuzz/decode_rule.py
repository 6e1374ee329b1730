"""The decode rule, checked on one file; shared by the fuzz harness and the tests.

The rule (issue 11): every read either returns exactly the frames the file's
header (or the excerpt request) promised, finite and decoded, or raises
:class:`~audiotree.errors.AudioReadError` naming the file. Nothing else may
escape: no ``MemoryError``, no plain ``ValueError``, no libsndfile exception.

:func:`check_file` applies the rule to every read the library makes of a file
(open, whole read, excerpts at the start, middle and end, a dataset-style
excerpt through :func:`audiotree.io.excerpt.read_excerpt`), and raises
:class:`RuleViolation` when it is broken. :func:`seed_bytes` synthesises the
small valid files the mutants start from, and :func:`mutate` makes one mutant.
Everything is deterministic given its seed.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

#: Formats the fuzz harness writes its inputs as (libFuzzer campaigns, one per format).
FUZZ_FORMATS = ("wav", "flac", "ogg", "mp3")
#: Formats of the mutation test: the fuzz formats plus Ogg/Opus and M4A/AAC (PyAV).
FORMATS = FUZZ_FORMATS + ("opus", "m4a")

# Short files keep every decode cheap: one mutant costs about a millisecond.
_SEED_SECONDS = 0.5
_SEED_RATE = 16000
_ENCODING = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}
# Reads of formats without a size bound (none of FORMATS) must still stay
# below this; a read that allocates more was trusting a hostile header.
MAX_READ_BYTES = 64 * 1024 * 1024


_EXCERPT_FRAMES = 1600  # length of the dataset-style excerpt read


class RuleViolation(AssertionError):
    """A read broke the decode rule; the message says which read and how."""


def seed_bytes(fmt: str, *, channels: int = 1, seed: int = 0) -> bytes:
    """A small valid file of format ``fmt`` (one of :data:`FORMATS`), as bytes."""
    import soundfile

    from audiotree.synth import synthesize

    x = synthesize("music", _SEED_SECONDS, _SEED_RATE, channels, np.random.default_rng(seed))
    if fmt == "m4a":
        return _m4a_bytes(x.astype(np.float32), _SEED_RATE)
    major, subtype = _ENCODING[fmt]
    # MP3 encoding needs a real file (libsndfile's LAME path seeks back to
    # write the Xing header), so every format goes through one for symmetry.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"seed.{fmt}")
        soundfile.write(path, x, _SEED_RATE, format=major, subtype=subtype)
        with open(path, "rb") as fh:
            return fh.read()


def _m4a_bytes(x: np.ndarray, rate: int) -> bytes:
    """AAC in M4A, encoded with FFmpeg's native encoder through PyAV."""
    import av

    layout = "mono" if x.shape[1] == 1 else "stereo"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "seed.m4a")
        with av.open(path, "w") as out:
            stream = out.add_stream("aac", rate=rate, layout=layout)
            step = stream.codec_context.frame_size or 1024
            for i in range(0, len(x), step):
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x[i : i + step].T), format="fltp", layout=layout)
                frame.sample_rate, frame.pts = rate, i
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
        with open(path, "rb") as fh:
            return fh.read()


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One mutant of ``data``: byte flips, a truncation, or a zeroed/0xFF header span."""
    b = bytearray(data)
    kind = int(rng.integers(6))
    if kind == 4:  # one random byte replaced anywhere (the middle of a frame, a CRC field, a page header)
        b[int(rng.integers(len(b)))] ^= int(rng.integers(1, 256))
    elif kind == 5:  # a span of 1-16 bytes zeroed anywhere
        start = int(rng.integers(len(b)))
        stop = min(len(b), start + int(rng.integers(1, 17)))
        b[start:stop] = bytes(stop - start)
    elif kind == 0:  # flip 1-8 random bits anywhere
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # truncate at a random point
        del b[int(rng.integers(1, len(b))) :]
    else:  # overwrite a span of the header (first 256 bytes) with 0x00 or 0xFF
        head = min(len(b), 256)
        start = int(rng.integers(head))
        stop = min(head, start + int(rng.integers(1, 9)))
        b[start:stop] = (b"\x00" if kind == 2 else b"\xff") * (stop - start)
    return bytes(b)


def _violation(path: str, what: str) -> RuleViolation:
    return RuleViolation(f"{os.path.basename(path)}: {what}")


def _check_array(path: str, x, expected: int, channels: int, what: str) -> None:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2 or x.shape[1] != channels:
        raise _violation(path, f"{what} returned {type(x).__name__} {getattr(x, 'shape', None)}, "
                         f"{getattr(x, 'dtype', None)}; expected float32 (frames, {channels})")
    if x.shape[0] != expected:
        raise _violation(path, f"{what} returned {x.shape[0]} frames; the header promised {expected}")
    if not np.isfinite(x).all():
        raise _violation(path, f"{what} returned NaN/Inf")


def _guard(path: str, what: str, fn):
    """Runs ``fn``; AudioReadError means the rule held (returns None), other errors break it."""
    from audiotree.errors import AudioReadError

    try:
        return fn()
    except AudioReadError as exc:
        if exc.file_path != path or path not in str(exc):
            raise _violation(path, f"{what}: AudioReadError does not name the file: {exc}") from exc
        return None
    except Exception as exc:  # noqa: BLE001 - anything else is a rule violation
        raise _violation(path, f"{what} raised {type(exc).__name__}: {exc}") from exc


def check_file(path: str, *, expect_audio: bool = False) -> str:
    """Applies the decode rule to every kind of read of ``path``.

    With ``expect_audio`` (for mutants of a non-silent seed file) a file that
    is accepted must also hold audio: a header claiming 0 frames, or a whole
    read that comes back all zeros, is a violation (the bytes held sound).

    Returns ``"refused"`` when the file is refused at open, ``"partial"`` when
    it opens but some read raised AudioReadError, else ``"accepted"``.

    Raises:
        RuleViolation: if any read broke the rule.
    """
    from audiotree.io.excerpt import read_excerpt
    from audiotree.io import AudioFile, integrity, probe

    f = _guard(path, "AudioFile()", lambda: AudioFile(path))
    if f is None:
        return "refused"
    refused = False
    with f:
        info = f.info
        n, channels = info.frames, info.channels
        if n < 0 or channels < 1 or not 1 <= info.sample_rate <= integrity.MAX_SAMPLE_RATE:
            raise _violation(path, f"implausible header accepted: {info}")
        if expect_audio and n == 0:
            raise _violation(path, "header claims 0 frames but the file holds audio bytes")
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(4096)
        limit = integrity.max_frames(info.format, info.subtype, channels, info.sample_rate, size, head)
        if n > (MAX_READ_BYTES // (4 * channels) if limit is None else limit):
            raise _violation(path, f"header claims {n} frames ({n * channels * 4} bytes), more than a "
                             f"{size}-byte {info.format} file can hold ({limit})")
        probed = _guard(path, "probe()", lambda: probe(path))
        if probed is not None and probed.frames != n:
            raise _violation(path, f"probe() says {probed.frames} frames, AudioFile says {n}")
        whole = _guard(path, "read_all()", f.read_all)
        if whole is None:
            refused = True
        else:
            _check_array(path, whole, n, channels, "read_all()")
            if expect_audio and not np.any(whole):
                raise _violation(path, f"read_all() returned {n} frames of pure silence from a file that held sound")
        for start, count in ((0, 300), (n // 2, 777), (max(0, n - 100), 400), (n, 10)):
            x = _guard(path, f"read({start}, {count})", lambda: f.read(start, count))
            if x is None:
                refused = True
                continue
            _check_array(path, x, max(0, min(count, n - start)), channels, f"read({start}, {count})")
    if n > 0:
        # The dataset path: a fixed-length excerpt, padded only where the file ends.
        rate = info.sample_rate
        offset = (n // 3) / rate
        # 1,600 frames whatever the rate: the request, not the header, sizes
        # this read (a huge but legal rate must not turn it into gigabytes).
        duration = _EXCERPT_FRAMES / rate
        out = _guard(path, "read_excerpt()", lambda: read_excerpt(path, offset=offset, duration=duration))
        if out is None:
            refused = True
        else:
            data, out_rate = out
            if data.shape != (channels, _EXCERPT_FRAMES) or not np.isfinite(data).all():
                raise _violation(path, f"read_excerpt() returned {data.shape}")
    return "partial" if refused else "accepted"


def check_bytes(data: bytes, fmt: str, directory: str, *, expect_audio: bool = False) -> str:
    """Writes ``data`` as ``directory/input.fmt`` and applies :func:`check_file`."""
    path = os.path.join(directory, f"input.{fmt}")
    with open(path, "wb") as fh:
        fh.write(data)
    return check_file(path, expect_audio=expect_audio)


#: Outcomes of :func:`classify` that are wrong reads: the file read as something it is not, without an error.
DEFINITE_WRONG = ("shorter", "shifted")
#: Outcomes a format without checksums over its audio cannot tell from a valid file (see docs/decoding.md).
SUSPECT = ("differs", "concealed", "longer")
# Formats whose audio bytes carry checksums (FLAC frame CRC-16, Ogg page CRC-32): damaged audio must not decode.
_CHECKSUMMED = ("flac", "ogg", "opus")


def _zero_runs(x: np.ndarray, at_least: int) -> int:
    """Frames in runs of at least ``at_least`` frames that are exactly zero in every channel."""
    silent = np.concatenate([[False], ~np.any(x != 0, axis=1), [False]])
    edges = np.flatnonzero(np.diff(silent.astype(np.int8)))
    lengths = edges[1::2] - edges[::2]
    return int(lengths[lengths >= at_least].sum())


def classify(data: bytes, fmt: str, directory: str, original: np.ndarray) -> str:
    """The outcome of one mutant, compared with ``original`` (the seed's decoded audio).

    Applies :func:`check_file` first (a :class:`RuleViolation` propagates),
    then for a file every read accepted, decodes it whole and compares:

    * ``"refused"`` / ``"partial"``: an AudioReadError at open / on some read;
    * ``"exact"``: the original's frames and samples (or, for a mutant of bytes
      no decoder reads, the same audio);
    * ``"shorter"``: fewer frames than the original, no error (a dropped page,
      a header claiming less); ``"shifted"``: the same length, but audio that
      matches the original moved in time (always wrong);
    * ``"differs"``: the same length, other samples; ``"concealed"``: runs of
      exact zeros (>= 576 frames) the original does not have; ``"longer"``:
      more frames than the original.

    ``"differs"`` in a format whose audio is checksummed is counted as
    ``"shorter"``'s kin by the callers: it is a wrong read there.
    """
    from audiotree.io import AudioFile

    outcome = check_bytes(data, fmt, directory)
    if outcome != "accepted":
        return outcome
    with AudioFile(os.path.join(directory, f"input.{fmt}")) as f:
        x = f.read_all()
    if x.shape[1] != original.shape[1]:
        return "differs"
    if len(x) < len(original):
        return "shorter"
    if len(x) > len(original):
        return "longer"
    if np.array_equal(x, original):
        return "exact"
    if _zero_runs(x, 576) > _zero_runs(original, 576):
        return "concealed"
    for lag in (576, 1024, 1152, 2048, 4096):  # audio moved by a frame or page worth: a dropped block
        if lag < len(x) and np.allclose(x[lag:], original[:-lag], atol=1e-3) and np.any(original[:-lag]):
            return "shifted"
        if lag < len(x) and np.allclose(x[:-lag], original[lag:], atol=1e-3) and np.any(original[lag:]):
            return "shifted"
    return "differs"


def is_wrong(fmt: str, outcome: str) -> bool:
    """Whether ``outcome`` of a ``fmt`` mutant is a definite wrong read (see :func:`classify`)."""
    return outcome in DEFINITE_WRONG or (outcome == "differs" and fmt in _CHECKSUMMED)


__all__ = ["FORMATS", "FUZZ_FORMATS", "MAX_READ_BYTES", "RuleViolation", "seed_bytes", "mutate", "check_file", "check_bytes",
           "classify", "is_wrong", "DEFINITE_WRONG", "SUSPECT"]
