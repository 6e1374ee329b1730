"""Sample-rate conversion in NumPy with soxr (the loader's CPU path).

soxr's ``resample`` works on ``(frames, channels)`` C-contiguous arrays; this
module moves the time axis to the front and folds every other axis into
channels, so any layout and any number of leading axes resample in one call.
Audio as returned by the decoder, ``(frames, channels)`` with ``axis=0``, goes
straight to soxr without copies. The JAX resampler is
:mod:`audiotree.dsp.resample_jax`.

Deterministic: soxr is a fixed linear filter; the same input gives the same
output.
"""

from __future__ import annotations

import math

import numpy as np
import soxr

from audiotree.validation import check_sample_rate

__all__ = ["resample", "resampled_length"]

_SOXR_QUALITIES = ("QQ", "LQ", "MQ", "HQ", "VHQ")
_SOXR_DTYPES = (np.dtype(np.float32), np.dtype(np.float64),
                np.dtype(np.int16), np.dtype(np.int32))


def resampled_length(length: int, old_sr: int, new_sr: int, *, full: bool = False) -> int:
    """``floor(length * new_sr / old_sr)`` (``ceil`` with ``full=True``), in exact integer math."""
    num = int(length) * int(new_sr)
    return -(-num // int(old_sr)) if full else num // int(old_sr)


def _fix_length(y: np.ndarray, n: int) -> np.ndarray:
    """Trim or zero-pad axis 0 of ``y`` to ``n`` frames."""
    if y.shape[0] == n:
        return y
    if y.shape[0] > n:
        return y[:n]
    out = np.zeros((n,) + y.shape[1:], dtype=y.dtype)
    out[: y.shape[0]] = y
    return out


def resample(x, old_sr: int, new_sr: int, *, axis: int = -1,
             output_length: int | None = None, quality: str = "HQ") -> np.ndarray:
    """Resample ``x`` from ``old_sr`` to ``new_sr`` Hz along ``axis`` with soxr.

    Args:
      x: array of any shape; ``axis`` is time (T frames). float32, float64,
        int16 and int32 keep their dtype; other floating dtypes (and bool/int
        types soxr lacks) are converted to float32.
      old_sr, new_sr: rates in Hz, positive integers.
      axis: the time axis.
      output_length: frames in the output; default ``floor(T * new_sr / old_sr)``.
        soxr's output is trimmed or zero-padded to it.
      quality: soxr quality, one of ``"QQ", "LQ", "MQ", "HQ", "VHQ"``.

    Returns:
      Array with ``x``'s shape except ``axis`` has ``output_length`` frames,
      C-contiguous. With ``old_sr == new_sr`` (and no different
      ``output_length``) ``x`` itself is returned, uncopied.

    Raises:
      ValueError: non-positive or non-integer rates, negative ``output_length``,
        unknown quality, complex input.
    """
    old_sr = check_sample_rate(old_sr, name="old_sr")
    new_sr = check_sample_rate(new_sr, name="new_sr")
    if quality not in _SOXR_QUALITIES:
        raise ValueError(f"quality must be one of {_SOXR_QUALITIES}, got {quality!r}")
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension (time)")
    if np.iscomplexobj(x):
        raise ValueError(f"complex input is not supported (dtype {x.dtype})")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of dimension {x.ndim}")
    axis = axis % x.ndim
    length = x.shape[axis]
    if output_length is None:
        n_out = resampled_length(length, old_sr, new_sr)
    else:
        n_out = int(output_length)
        if n_out < 0:
            raise ValueError(f"output_length must be >= 0, got {output_length!r}")

    if old_sr == new_sr and n_out == length:
        return x
    if x.dtype not in _SOXR_DTYPES:
        x = x.astype(np.float32)

    # (T, ...) -> (T, channels), C-contiguous; no copy for 1-D or contiguous
    # (frames, channels) with axis=0 (the decoder's layout).
    moved = np.moveaxis(x, axis, 0)
    rest = moved.shape[1:]
    n_channels = math.prod(rest)
    frames = np.ascontiguousarray(moved.reshape(length, n_channels))
    if old_sr == new_sr or length == 0 or n_channels == 0:
        y = frames  # nothing to filter: _fix_length trims or zero-pads
    else:
        y = soxr.resample(frames, old_sr, new_sr, quality=quality)
        if y.ndim == 1:  # soxr squeezes a single channel in some versions
            y = y.reshape(-1, frames.shape[1])
    y = _fix_length(y, n_out).reshape((n_out,) + rest)
    return np.ascontiguousarray(np.moveaxis(y, 0, axis))
