"""The decode rule, checked on one file; shared by the fuzz harness and the tests.

The rule (issue 11): every read either returns exactly the frames the file's
header (or the excerpt request) promised, finite and decoded, or raises
:class:`~audiotree.errors.AudioReadError` naming the file. Nothing else may
escape: no ``MemoryError``, no plain ``ValueError``, no libsndfile exception.

:func:`check_file` applies the rule to every read the library makes of a file
(open, whole read, excerpts at the start, middle and end, a dataset-style
excerpt through :func:`audiotree.excerpt.read_excerpt`), and raises
:class:`RuleViolation` when it is broken. :func:`seed_bytes` synthesises the
small valid files the mutants start from, and :func:`mutate` makes one mutant.
Everything is deterministic given its seed.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

FORMATS = ("wav", "flac", "ogg", "mp3")

# Short files keep every decode cheap: one mutant costs about a millisecond.
_SEED_SECONDS = 0.5
_SEED_RATE = 16000
_ENCODING = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
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
    major, subtype = _ENCODING[fmt]
    # MP3 encoding needs a real file (libsndfile's LAME path seeks back to
    # write the Xing header), so every format goes through one for symmetry.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"seed.{fmt}")
        soundfile.write(path, x, _SEED_RATE, format=major, subtype=subtype)
        with open(path, "rb") as fh:
            return fh.read()


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One mutant of ``data``: byte flips, a truncation, or a zeroed/0xFF header span."""
    b = bytearray(data)
    kind = int(rng.integers(4))
    if kind == 0:  # flip 1-8 random bits anywhere
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


__all__ = ["FORMATS", "MAX_READ_BYTES", "RuleViolation", "seed_bytes", "mutate", "check_file", "check_bytes"]
