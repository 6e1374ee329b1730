"""The NumPy transforms (CPU, Grain workers): draws here, math in :mod:`.kernels`.

Each random transform draws its per-item parameters from the leaf's
``np.random.Generator`` in exactly one place (its body below) and hands them
to the kernel of the same name. The JAX twins live in
:mod:`audiotree.transforms.jax.functional` with identical signatures.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from audiotree.core import AudioTree
from audiotree.transforms import _checks
from audiotree.transforms import _math as M
from audiotree.transforms import kernels as K
from audiotree.transforms.base import map_transform, random_transform

__all__ = [
    "corrupt_phase",
    "identity",
    "invert_phase",
    "mono",
    "peak_norm",
    "resample",
    "rescale_audio",
    "roll",
    "shift_phase",
    "stereo",
    "swap_stereo",
    "trim",
    "volume_change",
    "volume_norm",
]


def _generator(rng: Any, name: str) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError(
        f"audiotree.transforms.{name} (NumPy) draws from an np.random.Generator, got "
        f"{type(rng).__name__}; use audiotree.transforms.jax.{name} with JAX keys."
    )


def _uniform(rng: Any, name: str, low: float, high: float, shape: tuple) -> np.ndarray:
    return np.asarray(_generator(rng, name).uniform(low, high, size=shape), dtype=np.float64)


# ---------------------------------------------------------------- map
@map_transform
def identity(audio_tree: AudioTree) -> AudioTree:
    """Returns the input unchanged (a placeholder stage)."""
    return K.identity(audio_tree)


@map_transform
def mono(audio_tree: AudioTree) -> AudioTree:
    """Averages the channels to mono.

    Already-mono trees pass through with their derived fields; otherwise
    lufs, lufs_windows, codes and latents are cleared.
    """
    return K.mono(audio_tree)


@map_transform
def stereo(audio_tree: AudioTree) -> AudioTree:
    """Duplicates mono to two channels (stereo passes through).

    More than two channels raise ``ValueError``. Derived fields are cleared
    when the audio changes.
    """
    return K.stereo(audio_tree)


@map_transform(validate=_checks.check_resample_rate)
def resample(audio_tree: AudioTree, sample_rate: int | None = None) -> AudioTree:
    """Resamples to ``sample_rate`` Hz (soxr on NumPy, ``floor(T * new / old)`` samples).

    Args:
      sample_rate: the target rate; required (``None`` raises ``ValueError``).

    Derived fields are cleared unless the rate is already ``sample_rate``.
    """
    return K.resample(audio_tree, sample_rate)


@map_transform(validate=_checks.check_trim)
def trim(audio_tree: AudioTree, length: float = 1.0, mode: str = "wrap") -> AudioTree:
    """Cuts or right-pads every item to ``round(length * sample_rate)`` samples.

    Args:
      length: target duration in seconds (> 0).
      mode: pad mode when the audio is shorter: "wrap" (repeat from the start),
        "constant" (zeros), "edge", "reflect" or "symmetric".

    Derived fields are cleared when the length changes.
    """
    return K.trim(audio_tree, length, mode)


@map_transform
def rescale_audio(audio_tree: AudioTree) -> AudioTree:
    """Divides each item by ``max(peak, 1.0)``: only audio above full scale is scaled down.

    Derived fields are cleared.
    """
    return K.rescale_audio(audio_tree)


@map_transform
def peak_norm(audio_tree: AudioTree) -> AudioTree:
    """Scales each item to a peak of 1.0 (divides by ``max(peak, 1e-8)``).

    Derived fields are cleared.
    """
    return K.peak_norm(audio_tree)


# -------------------------------------------------------------- random
@random_transform(validate=_checks.check_db_range, pre=K.ensure_lufs)
def volume_norm(audio_tree: AudioTree, rng: Any, min_db: float = 0.0, max_db: float = 0.0) -> AudioTree:
    """Normalises each item to a loudness drawn uniformly from ``[min_db, max_db]`` LUFS.

    Args:
      min_db: lowest target loudness, LUFS.
      max_db: highest target loudness, LUFS.

    An existing ``lufs`` is trusted; otherwise the item is measured first
    (BS.1770). Silent items (non-finite loudness) get 0 dB. ``lufs`` and
    ``lufs_windows`` shift by the applied gain; codes and latents are cleared.
    """
    _checks.check_db_range(min_db, max_db)
    target = _uniform(rng, "volume_norm", min_db, max_db, K.item_shape(audio_tree))
    return K.volume_norm(audio_tree, target)


@random_transform(validate=_checks.check_db_range)
def volume_change(audio_tree: AudioTree, rng: Any, min_db: float = 0.0, max_db: float = 0.0) -> AudioTree:
    """Applies a gain drawn uniformly from ``[min_db, max_db]`` dB to each item.

    Args:
      min_db: lowest gain, dB.
      max_db: highest gain, dB.

    ``lufs`` and ``lufs_windows`` (when present) shift by the gain; codes and
    latents are cleared.
    """
    _checks.check_db_range(min_db, max_db)
    gain_db = _uniform(rng, "volume_change", min_db, max_db, K.item_shape(audio_tree))
    return K.volume_change(audio_tree, gain_db)


@random_transform
def invert_phase(audio_tree: AudioTree, rng: Any) -> AudioTree:
    """Negates the waveform (use ``prob`` to pick items).

    Loudness is unchanged and kept; codes and latents are cleared.
    """
    return K.invert_phase(audio_tree)


@random_transform
def swap_stereo(audio_tree: AudioTree, rng: Any) -> AudioTree:
    """Swaps the left and right channels (use ``prob`` to pick items).

    Mono trees pass through; more than two channels raise ``ValueError``.
    Loudness is kept; codes and latents are cleared.
    """
    return K.swap_stereo(audio_tree)


@random_transform(validate=_checks.check_phase)
def corrupt_phase(audio_tree: AudioTree, rng: Any, amount: float = 1.0, hop_factor: float = 0.5,
                  frame_length: int = 2048, window: Any = "hann", keep_lufs: bool = False) -> AudioTree:
    """Adds a random phase to every STFT bin, one per (item, channel, frequency).

    Args:
      amount: phases are uniform in ``[-pi * amount, pi * amount]`` (>= 0).
      hop_factor: STFT hop as a fraction of ``frame_length``, in (0, 0.5].
      frame_length: STFT frame (FFT) length in samples; the audio must be at
        least this long.
      window: a scipy ``get_window`` name, e.g. "hann".
      keep_lufs: keep lufs/lufs_windows (the magnitude spectrum barely
        changes) instead of clearing them.

    The same phase offsets apply to every frame; the output has the input's
    length. Codes and latents are cleared.
    """
    _checks.check_phase(amount, hop_factor, frame_length, window, keep_lufs)
    bound = math.pi * float(amount)
    phase = _uniform(rng, "corrupt_phase", -bound, bound, M.phase_shape(audio_tree, frame_length))
    return K.corrupt_phase(audio_tree, phase, hop_factor=hop_factor, frame_length=frame_length,
                           window=window, keep_lufs=keep_lufs)


@random_transform(validate=_checks.check_shift_phase)
def shift_phase(audio_tree: AudioTree, rng: Any, amount: float = 1.0, keep_lufs: bool = False) -> AudioTree:
    """Rotates the phase of every STFT bin of an item by one random angle.

    Args:
      amount: the angle is uniform in ``[-pi * amount, pi * amount]`` (>= 0).
      keep_lufs: keep lufs/lufs_windows instead of clearing them.

    One angle per item, shared by all channels and bins, so stereo images
    stay coherent and the energy is preserved. Uses a 2048-sample Hann STFT
    with hop 1024; the audio must be at least 2048 samples long.
    """
    _checks.check_shift_phase(amount, keep_lufs)
    bound = math.pi * float(amount)
    angle = _uniform(rng, "shift_phase", -bound, bound, K.item_shape(audio_tree))
    return K.shift_phase(audio_tree, angle, keep_lufs=keep_lufs)


@random_transform(validate=_checks.check_roll)
def roll(audio_tree: AudioTree, rng: Any, min_seconds: float = 0.0, max_seconds: float = 0.0,
         mode: str = "wrap") -> AudioTree:
    """Shifts each item in time by a random whole number of samples.

    Args:
      min_seconds: smallest shift, seconds (negative = earlier).
      max_seconds: largest shift, seconds; the shift in samples is uniform
        over ``[round(min_seconds * sr), round(max_seconds * sr)]`` inclusive.
      mode: "wrap" (circular) or "constant" (shift and fill with zeros).

    "wrap" keeps ``lufs`` and clears lufs_windows, codes and latents;
    "constant" clears all of them. The provenance ``offset`` is dropped.
    """
    _checks.check_roll(min_seconds, max_seconds, mode)
    low, high = M.roll_bounds(audio_tree, min_seconds, max_seconds)
    shift = _generator(rng, "roll").integers(low, high + 1, size=K.item_shape(audio_tree))
    return K.roll(audio_tree, shift, mode)
