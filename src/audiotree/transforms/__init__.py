"""Audio augmentations for Grain pipelines (NumPy backend, CPU workers).

Every transform is built by a constructor such as ``volume_change(min_db=-6,
max_db=6, prob=0.5)`` and is a Grain ``RandomMap`` (random transforms) or
``Map`` (deterministic ones), so it chains with ``ds.random_map(t)`` /
``ds.map(t)`` and pickles into spawned workers. Elements may be a single
:class:`~audiotree.core.AudioTree`, any nesting of dicts/lists of them, or
``None`` (passed through).

:mod:`audiotree.transforms.jax` exports the same names (minus ``choose``) for
jitted steps with explicit JAX keys; with the same drawn parameters both
backends compute the same result. The decorators and codec protocols are the
same objects in both namespaces.

This module does not import the JAX backend, the JAX loudness/resampling
engines, or any audio library beyond NumPy/SciPy (loaded lazily).
"""

from __future__ import annotations

import importlib
from typing import Any

from audiotree.transforms.base import map_transform, random_transform
from audiotree.transforms.choose import choose
from audiotree.transforms.codec import AudioCodec, LatentAudioCodec, encode_latents, encode_with_codec
from audiotree.transforms.functional import (
    corrupt_phase,
    identity,
    invert_phase,
    mono,
    peak_norm,
    resample,
    rescale_audio,
    roll,
    shift_phase,
    stereo,
    swap_stereo,
    trim,
    volume_change,
    volume_norm,
)

__all__ = [
    "map_transform",
    "random_transform",
    "AudioCodec",
    "LatentAudioCodec",
    "identity",
    "mono",
    "stereo",
    "resample",
    "trim",
    "rescale_audio",
    "peak_norm",
    "volume_change",
    "volume_norm",
    "invert_phase",
    "swap_stereo",
    "corrupt_phase",
    "shift_phase",
    "roll",
    "choose",
    "encode_with_codec",
    "encode_latents",
]


def __getattr__(name: str) -> Any:
    # ``audiotree.transforms.jax`` loads on first access only. (``.kernels`` is NumPy only and is
    # imported by ``.functional``, so it is already an attribute here.)
    if name == "jax":
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"jax"})
