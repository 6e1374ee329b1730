"""Audio augmentations for jitted JAX steps (explicit PRNG keys).

The same names as :mod:`audiotree.transforms` except ``choose``, with the same
constructor signatures and semantics: ``t = volume_change(min_db=-6,
max_db=6, prob=0.5)`` then ``t.random_map(batch, key)`` (or ``t(batch, key)``)
inside ``jax.jit``/``jax.vmap``. Map transforms use ``t.map(batch)``. The
decorators and codec protocols are the very objects of the NumPy namespace.

Given the same drawn parameters, the kernels here
(:mod:`audiotree.transforms.jax.kernels`) and the NumPy kernels agree to float32
accuracy (resampling and loudness engines within their stated tolerances).
"""

from __future__ import annotations

from audiotree.transforms.base import map_transform, random_transform
from audiotree.transforms.codec import AudioCodec, LatentAudioCodec, encode_latents, encode_with_codec
from audiotree.transforms.jax.functional import (
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
    "encode_with_codec",
    "encode_latents",
]
