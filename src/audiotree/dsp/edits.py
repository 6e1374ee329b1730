"""The audio edits, written once for NumPy and JAX arrays: downmix and gain.

Every function takes arrays of either library and returns the same library
(``xp`` is ``numpy`` or ``jax.numpy``, chosen by the caller or from the input).
Nothing here imports JAX, so data-loader workers stay light; resampling lives
in :mod:`audiotree.dsp.resample` (soxr) and :mod:`audiotree.dsp.resample_jax`.

>>> import numpy as np
>>> x = np.array([[1.0, 3.0], [3.0, 5.0]], dtype=np.float32)  # (n=2 frames, C=2)
>>> downmix(x, axis=1).tolist()
[[2.0], [4.0]]
>>> apply_gain_db(np, np.ones((1, 1, 2), np.float32), np.array([20.0])).tolist()
[[[10.0, 10.0]]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["downmix", "apply_gain_db", "gain_to_target", "shift_loudness"]


def downmix(x: Any, *, axis: int) -> Any:
    """The mean of the channels on ``axis``, kept as a length-1 axis, in ``x``'s dtype.

    A one-channel input is returned as is. For NumPy the channels are added in
    place into one buffer: ``mean`` over a short strided axis (the decoder's
    ``(n, C)`` frames) is several times slower on the loader's hot path.
    """
    channels = x.shape[axis]
    if channels == 1:
        return x
    if not isinstance(x, np.ndarray):
        return x.mean(axis=axis, keepdims=True).astype(x.dtype)
    axis %= x.ndim
    lead = (slice(None),) * axis
    out = x[lead + (0,)].astype(np.result_type(x.dtype, np.float32), copy=True)
    for c in range(1, channels):
        out += x[lead + (c,)]
    out *= out.dtype.type(1.0 / channels)
    return np.expand_dims(out, axis).astype(x.dtype, copy=False)


def apply_gain_db(xp: Any, x: Any, gain_db: Any) -> Any:
    """``x (*lead, C, T)`` times ``10 ** (gain_db / 20)``, one gain per item ``lead``; dtype kept."""
    return (x * (10.0 ** (gain_db / 20.0))[..., None, None]).astype(x.dtype)


def gain_to_target(xp: Any, lufs: Any, target_lufs: Any, *, max_gain_db: float | None = None) -> Any:
    """The gain in dB that brings items at ``lufs`` to ``target_lufs``.

    Items whose loudness is not finite (silence measures ``-inf``) get 0 dB, so
    silence is never boosted; ``max_gain_db`` caps the boost.
    """
    lufs = xp.asarray(lufs)
    finite = xp.isfinite(lufs)
    gain_db = xp.where(finite, target_lufs - xp.where(finite, lufs, 0.0), 0.0)
    if max_gain_db is not None:
        gain_db = xp.minimum(gain_db, max_gain_db)
    return gain_db


def shift_loudness(xp: Any, lufs: Any, lufs_windows: Any, gain_db: Any) -> tuple[Any, Any]:
    """``(lufs + gain, lufs_windows + gain)`` as float32 after a gain; ``None`` stays ``None``.

    Loudness is linear in dB gain, so a gained excerpt need not be re-measured.
    """
    if lufs is not None:
        lufs = (xp.asarray(lufs) + gain_db).astype(xp.float32)
    if lufs_windows is not None:
        lufs_windows = (xp.asarray(lufs_windows) + xp.asarray(gain_db)[..., None]).astype(xp.float32)
    return lufs, lufs_windows
