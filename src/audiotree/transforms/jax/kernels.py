"""JAX kernels: the same functions and signatures as :mod:`audiotree.transforms.kernels`.

Trace-safe (usable under ``jax.jit`` and ``jax.vmap``): parameters may be
traced arrays, while shapes, rates and modes are static. Results are JAX
arrays (a NumPy input waveform is converted). Loudness uses
:func:`audiotree.dsp.loudness_jax.measure_jax`, resampling
:func:`audiotree.dsp.resample_jax.resample_jax`; STFTs are computed in float32
with ``jnp.fft``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from audiotree.core import AudioTree
from audiotree.transforms import _checks
from audiotree.transforms import _math as M
from audiotree.transforms.codec import encode_codes_kernel as encode_with_codec
from audiotree.transforms.codec import encode_latents_kernel as encode_latents

__all__ = [
    "corrupt_phase",
    "encode_latents",
    "encode_with_codec",
    "ensure_lufs",
    "identity",
    "invert_phase",
    "item_shape",
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

item_shape = M.item_shape


def _measure(x: Any, sample_rate: int) -> tuple[Any, Any]:
    from audiotree.dsp.loudness_jax import measure_jax

    return measure_jax(x, sample_rate)


def identity(audio_tree: AudioTree) -> AudioTree:
    """Returns ``audio_tree`` itself."""
    return audio_tree


def mono(audio_tree: AudioTree) -> AudioTree:
    """Channel average; a mono tree is returned as-is (derived fields kept)."""
    return M.mono(jnp, audio_tree)


def stereo(audio_tree: AudioTree) -> AudioTree:
    """Mono duplicated to two channels; stereo as-is; more channels raise ``ValueError``."""
    return M.stereo(jnp, audio_tree)


def resample(audio_tree: AudioTree, sample_rate: Any = None) -> AudioTree:
    """Windowed-sinc resampling to ``sample_rate`` (``floor(T * new / old)`` samples)."""
    return M.resample(jnp, audio_tree, sample_rate)


def trim(audio_tree: AudioTree, length: float = 1.0, mode: str = "wrap") -> AudioTree:
    """Cuts or right-pads (``jnp.pad`` ``mode``) to ``round(length * sample_rate)`` samples."""
    return M.trim(jnp, audio_tree, length, mode)


def rescale_audio(audio_tree: AudioTree) -> AudioTree:
    """Divides each item by ``max(peak, 1)``."""
    return M.peak_scale(jnp, audio_tree, 1.0, "rescale_audio")


def peak_norm(audio_tree: AudioTree) -> AudioTree:
    """Divides each item by ``max(peak, 1e-8)``."""
    return M.peak_scale(jnp, audio_tree, 1e-8, "peak_norm")


def volume_change(audio_tree: AudioTree, gain_db: Any) -> AudioTree:
    """Applies ``gain_db`` (per item, dB); lufs/lufs_windows shift, codes/latents clear."""
    return M.gain(jnp, audio_tree, gain_db)


def ensure_lufs(audio_tree: AudioTree, **_params: Any) -> AudioTree:
    """Measures ``lufs``/``lufs_windows`` with the JAX meter unless ``lufs`` is present."""
    return M.ensure_lufs(jnp, audio_tree, _measure)


def volume_norm(audio_tree: AudioTree, target_lufs: Any) -> AudioTree:
    """Gains each item to ``target_lufs`` (measured with the JAX meter if lufs is None)."""
    return M.volume_norm(jnp, audio_tree, target_lufs, _measure)


def invert_phase(audio_tree: AudioTree) -> AudioTree:
    """Negates the waveform; lufs kept, codes/latents cleared."""
    return M.invert(jnp, audio_tree)


def swap_stereo(audio_tree: AudioTree) -> AudioTree:
    """Swaps left and right; mono unchanged; more than 2 channels raise ``ValueError``."""
    return M.swap(jnp, audio_tree)


def roll(audio_tree: AudioTree, shift: Any, mode: str = "wrap") -> AudioTree:
    """Shifts each item by ``shift`` samples (positive = later), circular or zero-filled."""
    return M.roll(jnp, audio_tree, shift, mode)


def corrupt_phase(audio_tree: AudioTree, phase: Any, hop_factor: float = 0.5, frame_length: int = 2048,
                  window: Any = "hann", keep_lufs: bool = False) -> AudioTree:
    """Adds ``phase`` (radians, ``(*items, C, frame_length // 2 + 1)``) to every STFT frame."""
    return M.phase(jnp, audio_tree, phase, hop_factor=hop_factor, frame_length=frame_length,
                   window=window, keep_lufs=keep_lufs, name="corrupt_phase")


def shift_phase(audio_tree: AudioTree, angle: Any, keep_lufs: bool = False) -> AudioTree:
    """Rotates every STFT bin of each item by one ``angle`` (radians, per item)."""
    a = jnp.asarray(angle)[..., None, None]
    return M.phase(jnp, audio_tree, a, hop_factor=_checks.SHIFT_PHASE_HOP_FACTOR,
                   frame_length=_checks.SHIFT_PHASE_FRAME_LENGTH, window=_checks.SHIFT_PHASE_WINDOW,
                   keep_lufs=keep_lufs, name="shift_phase")
