"""The loudness profile: BS.1770's 100 ms block grid, measured once per file.

:func:`file_profile` streams a file through the K-weighting filter in chunks
(memory stays bounded by the chunk, whatever the file's length) and keeps the
K-weighted mean square of every 100 ms block. :func:`window_loudness` turns a
profile into the gated loudness of every window that starts on a block
boundary, exactly as BS.1770 gates its 400 ms blocks: a 400 ms gating block
starting at block ``k`` has mean square ``mean(profile[k:k + 4])``.

The only difference from metering the window alone is the filter's state at
the window's start (the profile's filter has heard the audio before it; a
meter run on the excerpt starts from silence). The K-filter settles within tens
of milliseconds, so on program material (windows above -50 LUFS) the two agree
within 0.1 LU, measured at most 0.065 LU on 0.4 to 3 s windows of speech, music
and noise bursts (0.066 LU from the profile as the index stores it; tested
against :func:`audiotree.dsp.loudness.integrated_loudness`).
A near-silent window right after a loud passage also holds the filter's ringing
from that passage, so the profile reads it louder than the fresh meter does (by
up to ~1 LU at -60 LUFS); it never reads a window quieter.
The block grid is exact when ``0.1 * rate`` is a whole number of samples (every
common rate); otherwise a gating block is ``4 * round(0.1 * rate)`` samples
instead of ``round(0.4 * rate)``.

The index stores a profile as :func:`encode_profile` makes it (int16
hundredths of a dB per block, 0.005 dB at most from the float32 profile) and
every reader gets it back through :func:`decode_profile`: these two functions
are the only code that knows the stored encoding.
"""

from __future__ import annotations

import math
import os

import numpy as np

from audiotree.dsp.edits import downmix
from audiotree.dsp.loudness import BLOCK_STEPS, CHANNEL_WEIGHTS, STEP_SEC, gated_from_block_power
from audiotree.dsp.window_meter import WindowMeter

__all__ = ["BLOCK_SEC", "GATING_BLOCKS", "profile_step", "file_profile", "window_loudness", "window_blocks",
           "encode_profile", "decode_profile", "ZERO_BLOCK"]

#: Profile block length in seconds (the BS.1770 gating step).
BLOCK_SEC = STEP_SEC
#: Profile blocks per 400 ms gating block.
GATING_BLOCKS = BLOCK_STEPS
# Seconds of audio filtered per read; bounds memory (~ rate * channels * 8 bytes * this).
_CHUNK_SECONDS = 20.0
# Window starts gated per vectorised pass (bounds the (starts, blocks) working array).
_MAX_CELLS = 1 << 22
#: The stored value of a block whose mean square is zero (or below -327.67 dB, far under any gate).
ZERO_BLOCK = -32768
_CENTI_DB_MAX = 32767
# Decoded mean square of every int16 value, built on first use (256 kB; indexing it is ~10x faster than 10 ** x).
_DECODED: np.ndarray | None = None


def profile_step(sample_rate: int) -> int:
    """Samples per profile block at ``sample_rate``: ``round(0.1 * rate)``.

    >>> profile_step(44_100), profile_step(16_000)
    (4410, 1600)
    """
    return int(round(BLOCK_SEC * int(sample_rate)))


def window_blocks(seconds: float) -> int:
    """Profile blocks in a window of ``seconds`` (rounded to the 100 ms grid).

    >>> window_blocks(3.0), window_blocks(0.4)
    (30, 4)
    """
    if not (isinstance(seconds, (int, float, np.floating, np.integer)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"a window must be a positive number of seconds, got {seconds!r}.")
    return max(1, int(round(float(seconds) / BLOCK_SEC)))


def encode_profile(mean_squares) -> np.ndarray:
    """Mean squares per block as the index stores them: int16 centi-decibels.

    Value ``v = round(1000 * log10(ms))`` (hundredths of a dB of the mean
    square), clamped to ``[-32767, 32767]``; a zero mean square, or one below
    ``10 ** -32.767`` (-327.67 dB, hundreds of dB under BS.1770's -70 LUFS gate),
    is :data:`ZERO_BLOCK`. The error is at most 0.005 dB per block, so a
    window's loudness moves by at most 0.005 LU (unless a block sits within
    0.005 dB of a gate). Pure and deterministic.

    Args:
      mean_squares: ``(N,)`` finite, non-negative K-weighted mean squares
        (:func:`file_profile`).

    Returns:
      int16 ``(N,)``; :func:`decode_profile` inverts it.

    Raises:
      ValueError: a value that is NaN, infinite or negative.

    >>> encode_profile([1.0, 0.01, 0.0]).tolist()
    [0, -2000, -32768]
    """
    p = np.asarray(mean_squares, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("a loudness profile holds non-negative, finite mean squares (no NaN, infinite or negative "
                         "values).")
    with np.errstate(divide="ignore"):
        centi = np.rint(1000.0 * np.log10(p))  # log10(0) = -inf: below the range, so ZERO_BLOCK
    out = np.minimum(centi, _CENTI_DB_MAX)
    out[~(centi >= -_CENTI_DB_MAX)] = ZERO_BLOCK
    return out.astype(np.int16)


def decode_profile(values) -> np.ndarray:
    """A stored profile as float32 K-weighted mean squares per 100 ms block.

    ``values`` is a row's ``profile`` as the index stores it (a NumPy array or
    a list). Integers are the int16 centi-decibels of :func:`encode_profile`
    (format 1.1 on); floats are mean squares, as indexes of format 1.0 store
    them, and pass through. Every reader of stored profiles goes through here,
    so this and :func:`encode_profile` are the only code that knows the
    encoding. Deterministic: a value always decodes to the same float32.

    Raises:
      ValueError: an integer outside int16's range.

    >>> decode_profile(encode_profile([1.0, 0.01, 0.0])).tolist()
    [1.0, 0.009999999776482582, 0.0]
    >>> decode_profile([0.5, 0.25]).tolist()
    [0.5, 0.25]
    """
    stored = np.asarray(values)
    if stored.dtype.kind not in "iu":
        return np.asarray(stored, dtype=np.float32)
    if stored.dtype != np.int16 and stored.size and (stored.min() < ZERO_BLOCK or stored.max() > _CENTI_DB_MAX):
        raise ValueError(f"a stored loudness profile holds int16 centi-decibels, but a value is outside "
                         f"[{ZERO_BLOCK}, {_CENTI_DB_MAX}]; the index was edited or damaged. Rebuild it.")
    return _decoded()[stored.astype(np.int64) - ZERO_BLOCK]


def _decoded() -> np.ndarray:
    global _DECODED
    if _DECODED is None:
        table = (10.0 ** (np.arange(ZERO_BLOCK, _CENTI_DB_MAX + 1, dtype=np.float64) / 1000.0)).astype(np.float32)
        table[0] = 0.0
        _DECODED = table
    return _DECODED


def file_profile(audio, *, mono: bool = True, chunk_seconds: float = _CHUNK_SECONDS,
                 on_frames=None) -> np.ndarray:
    """The loudness profile of an open :class:`~audiotree.io.AudioFile`, streamed.

    Args:
      audio: an open ``AudioFile`` (read sequentially from frame 0).
      mono: average the channels before filtering (what ``mono=True`` datasets
        meter); else weight them as BS.1770 does (at most 5 channels).
      chunk_seconds: audio decoded and filtered per step.
      on_frames: called with each decoded chunk ``(n, channels)`` in order
        (every frame the profile covers, once): how the index measures
        quality in the same pass (:class:`audiotree.dsp.quality.QualityMeter`).

    Returns:
      float32 ``(frames // step,)``: the K-weighted mean square of each block.

    Raises:
      ValueError: more than 5 channels with ``mono=False``, or a file that
        ends before its header says.
      AudioReadError: a decoding failure (from ``AudioFile.read``).
    """
    info = audio.info
    rate = int(info.sample_rate)
    step = profile_step(rate)
    channels = 1 if mono else int(info.channels)
    if channels > len(CHANNEL_WEIGHTS):
        raise ValueError(
            f"'{audio.path}' has {channels} channels; BS.1770 loudness weights at most {len(CHANNEL_WEIGHTS)}, "
            "so index it with mono=True."
        )
    n_blocks = int(info.frames) // step
    out = np.empty(n_blocks, dtype=np.float32)
    if n_blocks == 0:
        return out
    meter = WindowMeter(rate, channels=channels, window=step)  # carries the K-filter state across chunks
    per_chunk = max(1, int(chunk_seconds / BLOCK_SEC))
    for first in range(0, n_blocks, per_chunk):
        count = min(per_chunk, n_blocks - first)
        frames = audio.read(first * step, count * step)
        if frames.shape[0] != count * step:
            raise ValueError(
                f"'{audio.path}' ended at {(first * step + frames.shape[0]) / rate:.3f} s, before the "
                f"{info.duration:.3f} s its header declares; the file is truncated."
            )
        if on_frames is not None:
            on_frames(frames)
        power = meter.weighted_power(downmix(frames, axis=1) if mono else frames)
        out[first:first + count] = power.mean(axis=1)
    return out


def window_loudness(profile, window_blocks: int, *, hop_blocks: int = 1) -> np.ndarray:
    """Gated BS.1770 loudness of every window of ``window_blocks`` profile blocks.

    Window ``i`` starts at block ``i * hop_blocks`` and covers
    ``window_blocks`` blocks; only windows that fit inside the profile are
    returned. Its gating blocks are the 400 ms blocks (4 profile blocks) that
    start at each of its blocks and end inside it, gated at -70 LUFS and 10 LU
    below their mean, as :func:`audiotree.dsp.loudness.integrated_loudness`
    does. A window shorter than 400 ms counts as one block at its mean square,
    as the meter treats such an excerpt. Pure and vectorised over the window
    starts (in slices, so memory stays bounded).

    Args:
      profile: ``(N,)`` block mean squares from :func:`file_profile`.
      window_blocks: window length in blocks (``window_blocks(seconds)``), >= 1.
      hop_blocks: distance between window starts in blocks, >= 1.

    Returns:
      float64 ``(max(0, (N - window_blocks) // hop_blocks + 1),)`` in LUFS;
      ``-inf`` where every gating block is gated away.

    >>> import numpy as np
    >>> p = np.r_[np.full(30, 1e-9), np.full(30, 1e-2)]  # 3 s of silence, then 3 s at -20.7 LUFS
    >>> lufs = window_loudness(p, 30)                     # every 3 s window, 100 ms apart
    >>> lufs.shape, float(lufs[0]), round(float(lufs[-1]), 2)
    ((31,), -inf, -20.69)
    """
    p = np.asarray(profile, dtype=np.float64).reshape(-1)
    w, hop = int(window_blocks), int(hop_blocks)
    if w < 1 or hop < 1:
        raise ValueError(f"window_blocks and hop_blocks must be >= 1, got {window_blocks!r} and {hop_blocks!r}.")
    if p.size < w:
        return np.zeros(0, dtype=np.float64)
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("a loudness profile holds non-negative, finite mean squares.")
    if w < GATING_BLOCKS:
        means = np.lib.stride_tricks.sliding_window_view(p, w)[::hop].mean(axis=1)
        return gated_from_block_power(means[:, None])
    # Mean square of the gating block starting at each profile block.
    sums = np.lib.stride_tricks.sliding_window_view(p, GATING_BLOCKS).sum(axis=1)
    gating = sums / GATING_BLOCKS
    per_window = w - GATING_BLOCKS + 1
    view = np.lib.stride_tricks.sliding_window_view(gating, per_window)[::hop]
    out = np.empty(view.shape[0], dtype=np.float64)
    rows = max(1, _MAX_CELLS // per_window)
    for first in range(0, view.shape[0], rows):
        out[first:first + rows] = gated_from_block_power(view[first:first + rows])
    return out


def profile_of_path(path: str | os.PathLike, *, mono: bool = True) -> np.ndarray:
    """:func:`file_profile` of the file at ``path`` (opened and closed here)."""
    from audiotree.io import AudioFile

    with AudioFile(path) as f:
        return file_profile(f, mono=mono)
