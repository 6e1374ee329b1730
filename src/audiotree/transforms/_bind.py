"""The kernel functions, defined once and bound to one backend.

:mod:`audiotree.transforms.kernels` (NumPy) and
:mod:`audiotree.transforms.jax.kernels` (JAX) publish the functions built by
:func:`kernel_functions` for their array module and loudness meter, so both
backends share one definition of every kernel and differ only in the engines
plugged in (:mod:`._math` holds the math itself).
"""

from __future__ import annotations

from typing import Any, Callable

from audiotree.core import AudioTree
from audiotree.transforms import _checks
from audiotree.transforms import _math as M
from audiotree.transforms.codec import encode_codes_kernel, encode_latents_kernel


def kernel_functions(xp: Any, measure: Callable, module: str) -> dict[str, Callable]:
    """Every kernel by name, computing with ``xp`` and measuring loudness with ``measure``.

    ``measure(x, sample_rate)`` returns ``(lufs, lufs_windows)``. The functions
    built here are renamed into ``module``, the module that publishes them, so
    they pickle by reference like functions written there (``pre=`` hooks
    travel to spawned Grain workers).
    """

    def identity(audio_tree: AudioTree) -> AudioTree:
        """Returns ``audio_tree`` itself."""
        return audio_tree

    def mono(audio_tree: AudioTree) -> AudioTree:
        """Channel average; a mono tree is returned as-is (derived fields kept)."""
        return M.mono(xp, audio_tree)

    def stereo(audio_tree: AudioTree) -> AudioTree:
        """Mono duplicated to two channels; stereo as-is; more channels raise ``ValueError``."""
        return M.stereo(xp, audio_tree)

    def resample(audio_tree: AudioTree, sample_rate: Any = None) -> AudioTree:
        """Resamples to ``sample_rate`` with the backend's engine (``floor(T * new / old)`` samples)."""
        return M.resample(xp, audio_tree, sample_rate)

    def trim(audio_tree: AudioTree, length: float = 1.0, mode: str = "wrap") -> AudioTree:
        """Cuts or right-pads (``np.pad``/``jnp.pad`` ``mode``) to ``round(length * sample_rate)`` samples."""
        return M.trim(xp, audio_tree, length, mode)

    def rescale_audio(audio_tree: AudioTree) -> AudioTree:
        """Divides each item by ``max(peak, 1)``."""
        return M.peak_scale(xp, audio_tree, 1.0, "rescale_audio")

    def peak_norm(audio_tree: AudioTree) -> AudioTree:
        """Divides each item by ``max(peak, 1e-8)``."""
        return M.peak_scale(xp, audio_tree, 1e-8, "peak_norm")

    def volume_change(audio_tree: AudioTree, gain_db: Any) -> AudioTree:
        """Applies ``gain_db`` (per item, dB); lufs/lufs_windows shift, codes/latents clear."""
        return M.gain(xp, audio_tree, gain_db)

    def ensure_lufs(audio_tree: AudioTree, **_params: Any) -> AudioTree:
        """Measures ``lufs``/``lufs_windows`` with the backend's meter unless ``lufs`` is present."""
        return M.ensure_lufs(xp, audio_tree, measure)

    def volume_norm(audio_tree: AudioTree, target_lufs: Any) -> AudioTree:
        """Gains each item to ``target_lufs`` (measured with the backend's meter if lufs is None)."""
        return M.volume_norm(xp, audio_tree, target_lufs, measure)

    def invert_phase(audio_tree: AudioTree) -> AudioTree:
        """Negates the waveform; lufs kept, codes/latents cleared."""
        return M.invert(xp, audio_tree)

    def swap_stereo(audio_tree: AudioTree) -> AudioTree:
        """Swaps left and right; mono unchanged; more than 2 channels raise ``ValueError``."""
        return M.swap(xp, audio_tree)

    def roll(audio_tree: AudioTree, shift: Any, mode: str = "wrap") -> AudioTree:
        """Shifts each item by ``shift`` samples (positive = later), circular or zero-filled."""
        return M.roll(xp, audio_tree, shift, mode)

    def corrupt_phase(audio_tree: AudioTree, phase: Any, hop_factor: float = 0.5, frame_length: int = 2048,
                      window: Any = "hann", keep_lufs: bool = False) -> AudioTree:
        """Adds ``phase`` (radians, ``(*items, C, frame_length // 2 + 1)``) to every STFT frame."""
        return M.phase(xp, audio_tree, phase, hop_factor=hop_factor, frame_length=frame_length,
                       window=window, keep_lufs=keep_lufs, name="corrupt_phase")

    def shift_phase(audio_tree: AudioTree, angle: Any, keep_lufs: bool = False) -> AudioTree:
        """Rotates every STFT bin of each item by one ``angle`` (radians, per item)."""
        a = xp.asarray(angle)[..., None, None]
        return M.phase(xp, audio_tree, a, hop_factor=_checks.SHIFT_PHASE_HOP_FACTOR,
                       frame_length=_checks.SHIFT_PHASE_FRAME_LENGTH, window=_checks.SHIFT_PHASE_WINDOW,
                       keep_lufs=keep_lufs, name="shift_phase")

    bound = (identity, mono, stereo, resample, trim, rescale_audio, peak_norm, volume_change, ensure_lufs,
             volume_norm, invert_phase, swap_stereo, roll, corrupt_phase, shift_phase)
    for fn in bound:
        fn.__module__ = module
        fn.__qualname__ = fn.__name__
    functions = {fn.__name__: fn for fn in bound}
    # Backend-independent: the same objects in both kernel modules.
    functions.update(item_shape=M.item_shape, encode_with_codec=encode_codes_kernel,
                     encode_latents=encode_latents_kernel)
    return dict(sorted(functions.items()))
