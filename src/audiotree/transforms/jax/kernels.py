"""JAX kernels: the same functions and signatures as :mod:`audiotree.transforms.kernels`.

Trace-safe (usable under ``jax.jit`` and ``jax.vmap``): parameters may be
traced arrays, while shapes, rates and modes are static. Results are JAX
arrays (a NumPy input waveform is converted). Loudness uses
:func:`audiotree.dsp.loudness_jax.measure_jax`, resampling
:func:`audiotree.dsp.resample_jax.resample_jax`; STFTs are computed in float32
with ``jnp.fft``. The functions are defined once, for both backends, in
:mod:`audiotree.transforms._bind`.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from audiotree.transforms._bind import kernel_functions


def _measure(x: Any, sample_rate: int, lengths: Any = None) -> tuple[Any, Any]:
    from audiotree.dsp.loudness_jax import measure_jax

    return measure_jax(x, sample_rate, lengths=None if lengths is None else jnp.asarray(lengths))


_KERNELS = kernel_functions(jnp, _measure, __name__)
globals().update(_KERNELS)
__all__ = list(_KERNELS)
