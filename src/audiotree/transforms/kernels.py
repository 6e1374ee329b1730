"""NumPy kernels: the deterministic math of every transform, parameters explicit.

Each public transform ``t`` of :mod:`audiotree.transforms` draws its random
parameters in one place and then calls ``kernels.t(tree, <drawn>, <static>)``.
:mod:`audiotree.transforms.jax.kernels` has the same functions with the same
signatures, so feeding both the same parameters must give the same trees
(the parity tests do exactly that). Per-item parameters have shape
``waveform.shape[:-2]`` (``(B,)`` for a batch).

Results are NumPy arrays (a JAX input waveform is converted). Loudness uses
the exact IIR meter (:func:`audiotree.dsp.loudness.measure`), resampling soxr.
The functions are defined once, for both backends, in :mod:`._bind`.
"""

from __future__ import annotations

import numpy as np

from audiotree.transforms._bind import kernel_functions


def _measure(x: np.ndarray, sample_rate: int, lengths=None) -> tuple[np.ndarray, np.ndarray]:
    from audiotree.dsp.loudness import measure

    return measure(x, sample_rate, lengths=None if lengths is None else np.asarray(lengths))


_KERNELS = kernel_functions(np, _measure, __name__)
globals().update(_KERNELS)
__all__ = list(_KERNELS)
