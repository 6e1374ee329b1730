"""Variable-length batches: each item's real samples (``lengths``) and the padding around them.

An ``AudioTree`` of whole utterances holds ``(B, C, T)`` samples padded on the
right to a common ``T``; ``lengths`` ``(B,)`` int32 says how many samples of
each item are real. These helpers validate ``lengths``, pad items to one
length and rescale lengths with the sample rate. They work in NumPy and JAX
(traced lengths under ``jit`` are checked by shape only) and know nothing of
files.

>>> import numpy as np
>>> check_lengths([3, 5], np.zeros((2, 1, 5), np.float32)).tolist()
[3, 5]
>>> scale_lengths(np.array([441, 44100]), 44_100, 16_000, limit=16_000).tolist()
[160, 16000]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import numpy as np

from audiotree.leaves import array_module, is_jax
from audiotree.validation import is_int

__all__ = ["check_lengths", "check_pad_to", "pad_last", "pad_items", "scale_lengths"]


def check_lengths(lengths: Any, waveform: Any) -> Any:
    """Validated ``lengths`` for ``waveform`` ``(..., C, T)``: int32 ``(...,)`` in ``[0, T]``.

    Concrete values are checked; traced JAX values (under ``jit``) only by shape.
    """
    if waveform is None:
        raise ValueError("lengths needs a waveform to describe; this tree is token-only.")
    shape = tuple(np.shape(waveform))
    if is_jax(lengths):
        import jax.numpy as jnp

        values = lengths
        if not jnp.issubdtype(values.dtype, jnp.integer):
            raise ValueError(f"lengths must be integers (samples), got dtype {values.dtype}.")
        if tuple(values.shape) != shape[:-2]:
            raise ValueError(
                f"lengths has shape {tuple(values.shape)} but the waveform {shape} has items {shape[:-2]}."
            )
        if isinstance(values, jax.core.Tracer):
            return values.astype(jnp.int32)
        concrete = np.asarray(values)
    else:
        concrete = np.asarray(lengths)
        if concrete.dtype.kind == "f" and concrete.size and np.all(np.mod(concrete, 1) == 0):
            concrete = concrete.astype(np.int64)
        if concrete.dtype.kind not in "iu" and concrete.size:
            raise ValueError(f"lengths must be integers (samples), got {concrete.dtype} values.")
        if concrete.shape != shape[:-2]:
            raise ValueError(
                f"lengths has shape {concrete.shape} but the waveform {shape} has items {shape[:-2]}; "
                "give one length (in samples) per item."
            )
    if concrete.size and (concrete.min() < 0 or concrete.max() > shape[-1]):
        raise ValueError(
            f"lengths {concrete.reshape(-1).tolist()[:8]} disagree with the waveform: every length must be in "
            f"[0, {shape[-1]}] samples (the waveform's last axis)."
        )
    return lengths.astype(np.int32) if is_jax(lengths) else concrete.astype(np.int32)


def check_pad_to(pad_to: Any) -> int:
    if not is_int(pad_to) or pad_to < 0:
        raise ValueError(f"pad_to must be a number of samples >= 0, got {pad_to!r}.")
    return int(pad_to)


def pad_last(x: Any, target: int, value: float) -> Any:
    xp = array_module(x)
    missing = target - int(np.shape(x)[-1])
    if missing == 0:
        return x
    widths = [(0, 0)] * (np.ndim(x) - 1) + [(0, missing)]
    return xp.pad(xp.asarray(x), widths, constant_values=value)


def pad_items(nodes: Sequence[Any], pad_to: int | None) -> list[Any] | None:
    """Items padded to one length with ``lengths`` filled, or None when plain concatenation fits."""
    if any(n.waveform is None for n in nodes):
        return None
    samples = [int(np.shape(n.waveform)[-1]) for n in nodes]
    if pad_to is None and len(set(samples)) == 1 and all(n.lengths is None for n in nodes):
        return None
    channels = {int(np.shape(n.waveform)[-2]) for n in nodes}
    if len(channels) != 1:
        raise ValueError(
            f"Cannot batch AudioTrees with different channel counts {sorted(channels)}; "
            "read them with mono=True or convert with to_mono()/to_stereo()."
        )
    target = max(samples) if pad_to is None else pad_to
    if target < max(samples):
        longest = int(np.argmax(samples))
        where = nodes[longest].filepath
        raise ValueError(
            f"Item {longest}{' (' + where[0] + ')' if where else ''} has {samples[longest]} samples, more than "
            f"pad_to={pad_to}; crop it first (ExcerptConfig(strategy='full', crop_to=...)) or pad to more."
        )
    windows = [n.lufs_windows for n in nodes if n.lufs_windows is not None]
    window_target = max(int(np.shape(w)[-1]) for w in windows) if windows else 0
    out = []
    for node, n in zip(nodes, samples):
        lengths = node.full_lengths() if node.lengths is None else check_lengths(node.lengths, node.waveform)
        updates: dict = {"waveform": pad_last(node.waveform, target, 0.0), "lengths": lengths}
        if node.lufs_windows is not None:
            updates["lufs_windows"] = pad_last(node.lufs_windows, window_target, -np.inf)
        out.append(dataclasses.replace(node, **updates))
    return out


def scale_lengths(lengths: Any, old_rate: int, new_rate: int, *, limit: int) -> Any:
    """Real samples after resampling from ``old_rate`` to ``new_rate`` Hz, at most ``limit``.

    ``floor(n * new / old)``, computed in int32 without overflow (the ratio is
    reduced first), in the array library of ``lengths``.
    """
    xp = array_module(lengths)
    g = math.gcd(new_rate, old_rate)
    up, down = new_rate // g, old_rate // g
    n = xp.asarray(lengths)
    scaled = (n // down) * up + ((n % down) * up) // down
    return xp.minimum(scaled, limit).astype(xp.int32)
