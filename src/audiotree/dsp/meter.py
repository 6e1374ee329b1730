"""One entry point to the two loudness engines, chosen per call.

``measure_loudness`` picks the NumPy engine (:mod:`audiotree.dsp.loudness`:
exact IIR K-weighting on the CPU) or the JAX engine
(:mod:`audiotree.dsp.loudness_jax`: jittable, any device), runs it, and hands
the results back in the input's array library. JAX is imported only when the
JAX engine runs or the input already is a JAX array.

>>> import numpy as np
>>> x = np.zeros((1, 1, 48_000), np.float32)
>>> lufs, windows = measure_loudness(x, 48_000)
>>> lufs.tolist(), windows.shape
([-inf], (1, 2))
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["ENGINES", "choose_engine", "measure_loudness"]

ENGINES = ("numpy", "jax")


def _is_jax(x: Any) -> bool:
    jax = sys.modules.get("jax")  # a JAX array exists only once jax is imported
    return jax is not None and isinstance(x, jax.Array)


def choose_engine(waveform: Any, engine: str | None, device: Any) -> str:
    """``engine``, or by default the waveform's own library; a non-CPU device forces JAX."""
    if engine not in (None, *ENGINES):
        raise ValueError(f"Unknown loudness engine {engine!r}; use 'numpy' or 'jax'.")
    non_cpu = device is not None and device.platform != "cpu"
    if engine == "numpy" and non_cpu:
        raise ValueError("engine='numpy' runs on the CPU only; use engine='jax' for an accelerator.")
    if engine is None:
        engine = "jax" if (non_cpu or _is_jax(waveform)) else "numpy"
    return engine


def measure_loudness(
    waveform: Any,
    sample_rate: int,
    *,
    window_sec: float = 0.4,
    hop_sec: float | None = None,
    engine: str | None = None,
    device: Any = None,
    lengths: Any = None,
) -> tuple[Any, Any]:
    """Gated ``lufs`` ``(...,)`` and ungated ``lufs_windows`` ``(..., W)``, float32 LUFS.

    ``waveform`` is ``(..., C, T)``. ``device`` is ``None`` or a ``jax.Device``
    the JAX engine runs on. ``lengths`` ``(...,)`` (samples, or ``None``) meters
    only each item's real samples: windows past an item's end read ``-inf``.
    Output is in ``waveform``'s array library.
    """
    engine = choose_engine(waveform, engine, device)
    if engine == "numpy":
        from audiotree.dsp.loudness import measure

        lufs, windows = measure(
            np.asarray(waveform), sample_rate, window_sec=window_sec, hop_sec=hop_sec,
            lengths=None if lengths is None else np.asarray(lengths),
        )
    else:
        import jax

        from audiotree.dsp.loudness_jax import measure_jax

        x = waveform if device is None else jax.device_put(waveform, device)
        lufs, windows = measure_jax(x, sample_rate, window_sec=window_sec, hop_sec=hop_sec, lengths=lengths)
    if _is_jax(waveform):
        import jax.numpy as jnp

        return jnp.asarray(lufs), jnp.asarray(windows)
    return np.asarray(lufs, dtype=np.float32), np.asarray(windows, dtype=np.float32)
