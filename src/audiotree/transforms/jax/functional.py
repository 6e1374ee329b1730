"""The JAX transforms (jitted steps): draws here, math in :mod:`.kernels`.

Same constructors, signatures and semantics as
:mod:`audiotree.transforms.functional`; parameters are drawn with
``jax.random`` from the leaf's key (a NumPy ``Generator``, as Grain passes,
is turned into a key first). Docstrings are shared with the NumPy twins.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import numpy as np

from audiotree.core import AudioTree
from audiotree.transforms import _checks
from audiotree.transforms import _math as M
from audiotree.transforms import functional as _np
from audiotree.transforms.base import map_transform, random_transform
from audiotree.transforms.jax import kernels as K

__all__ = list(_np.__all__)


def _doc_from(twin: Any) -> Callable:
    def attach(fn: Callable) -> Callable:
        fn.__doc__ = twin.__wrapped__.__doc__
        return fn

    return attach


def _key(rng: Any) -> Any:
    if isinstance(rng, np.random.Generator):
        return jax.random.key(int(rng.integers(0, 2**32)))
    return rng


def _uniform(rng: Any, low: float, high: float, shape: tuple) -> Any:
    return jax.random.uniform(_key(rng), shape, minval=low, maxval=high)


# ---------------------------------------------------------------- map
@map_transform
@_doc_from(_np.identity)
def identity(audio_tree: AudioTree) -> AudioTree:
    return K.identity(audio_tree)


@map_transform
@_doc_from(_np.mono)
def mono(audio_tree: AudioTree) -> AudioTree:
    return K.mono(audio_tree)


@map_transform
@_doc_from(_np.stereo)
def stereo(audio_tree: AudioTree) -> AudioTree:
    return K.stereo(audio_tree)


@map_transform(validate=_checks.check_resample_rate)
@_doc_from(_np.resample)
def resample(audio_tree: AudioTree, sample_rate: int | None = None) -> AudioTree:
    return K.resample(audio_tree, sample_rate)


@map_transform(validate=_checks.check_trim)
@_doc_from(_np.trim)
def trim(audio_tree: AudioTree, length: float = 1.0, mode: str = "wrap") -> AudioTree:
    return K.trim(audio_tree, length, mode)


@map_transform
@_doc_from(_np.rescale_audio)
def rescale_audio(audio_tree: AudioTree) -> AudioTree:
    return K.rescale_audio(audio_tree)


@map_transform
@_doc_from(_np.peak_norm)
def peak_norm(audio_tree: AudioTree) -> AudioTree:
    return K.peak_norm(audio_tree)


# -------------------------------------------------------------- random
@random_transform(validate=_checks.check_db_range, pre=K.ensure_lufs)
@_doc_from(_np.volume_norm)
def volume_norm(audio_tree: AudioTree, rng: Any, min_db: float = 0.0, max_db: float = 0.0) -> AudioTree:
    _checks.check_db_range(min_db, max_db)
    target = _uniform(rng, min_db, max_db, K.item_shape(audio_tree))
    return K.volume_norm(audio_tree, target)


@random_transform(validate=_checks.check_db_range)
@_doc_from(_np.volume_change)
def volume_change(audio_tree: AudioTree, rng: Any, min_db: float = 0.0, max_db: float = 0.0) -> AudioTree:
    _checks.check_db_range(min_db, max_db)
    gain_db = _uniform(rng, min_db, max_db, K.item_shape(audio_tree))
    return K.volume_change(audio_tree, gain_db)


@random_transform
@_doc_from(_np.invert_phase)
def invert_phase(audio_tree: AudioTree, rng: Any) -> AudioTree:
    return K.invert_phase(audio_tree)


@random_transform
@_doc_from(_np.swap_stereo)
def swap_stereo(audio_tree: AudioTree, rng: Any) -> AudioTree:
    return K.swap_stereo(audio_tree)


@random_transform(validate=_checks.check_phase)
@_doc_from(_np.corrupt_phase)
def corrupt_phase(audio_tree: AudioTree, rng: Any, amount: float = 1.0, hop_factor: float = 0.5,
                  frame_length: int = 2048, window: Any = "hann", keep_lufs: bool = False) -> AudioTree:
    _checks.check_phase(amount, hop_factor, frame_length, window, keep_lufs)
    bound = math.pi * float(amount)
    phase = _uniform(rng, -bound, bound, M.phase_shape(audio_tree, frame_length))
    return K.corrupt_phase(audio_tree, phase, hop_factor=hop_factor, frame_length=frame_length,
                           window=window, keep_lufs=keep_lufs)


@random_transform(validate=_checks.check_shift_phase)
@_doc_from(_np.shift_phase)
def shift_phase(audio_tree: AudioTree, rng: Any, amount: float = 1.0, keep_lufs: bool = False) -> AudioTree:
    _checks.check_shift_phase(amount, keep_lufs)
    bound = math.pi * float(amount)
    angle = _uniform(rng, -bound, bound, K.item_shape(audio_tree))
    return K.shift_phase(audio_tree, angle, keep_lufs=keep_lufs)


@random_transform(validate=_checks.check_roll)
@_doc_from(_np.roll)
def roll(audio_tree: AudioTree, rng: Any, min_seconds: float = 0.0, max_seconds: float = 0.0,
         mode: str = "wrap") -> AudioTree:
    _checks.check_roll(min_seconds, max_seconds, mode)
    low, high = M.roll_bounds(audio_tree, min_seconds, max_seconds)
    shift = jax.random.randint(_key(rng), K.item_shape(audio_tree), low, high + 1)
    return K.roll(audio_tree, shift, mode)
