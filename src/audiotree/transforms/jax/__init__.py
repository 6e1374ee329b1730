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

from audiotree.transforms import __all__ as _numpy_names
from audiotree.transforms.base import map_transform, random_transform
from audiotree.transforms.codec import AudioCodec, LatentAudioCodec, encode_latents, encode_with_codec
from audiotree.transforms.jax.functional import *  # noqa: F403  (the JAX twin of every NumPy transform)

# ``choose`` is NumPy-only: it draws from an np.random.Generator per element.
__all__ = [name for name in _numpy_names if name != "choose"]
