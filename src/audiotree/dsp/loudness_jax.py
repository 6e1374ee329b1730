"""ITU-R BS.1770-4 loudness in JAX, usable inside ``jax.jit`` and ``jax.vmap``.

Same measurement, shapes and conventions as :mod:`audiotree.dsp.loudness`
(the NumPy reference), computed in float32:

* K-weighting is a linear convolution with the K-filter's impulse response,
  truncated once its tail no longer matters, applied with real FFTs (a
  sequential IIR via ``lax.scan`` would be slow). The response is computed in
  float64 with NumPy from the same coefficients as the NumPy engine
  (:func:`~audiotree.dsp.loudness.k_weighting_sos`) and cut where the tail
  holds less than 1e-15 of the energy and its sum (the DC leak of the
  high-pass) is below 1e-9, about 100 ms at any rate. Like the IIR, the
  convolution is causal with zero initial state, so results match the NumPy
  engine to float32 accuracy (typically < 1e-3 LU).
* Gating uses masks and sums instead of boolean indexing, so it is
  jit-compatible; silent or fully gated inputs give ``-inf``, never NaN.
* ``sample_rate``, ``window_sec`` and ``hop_sec`` are static (Python values);
  shapes are static too, so each distinct (shape, rate, window) compiles once.

NaN/Inf samples cannot raise inside ``jit``; they propagate to NaN outputs.
Results are deterministic for a given backend, shape and input.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.fft
from jax import lax

from audiotree.dsp.biquads import sosfilt_blocks
from audiotree.dsp.loudness import (
    CHANNEL_WEIGHTS,
    MAX_SHIFTED_SLICES,
    check_channels_and_samples,
    check_meter_rate,
    gate,
    gating_geometry,
    k_weighting_sos_cached,
    power_to_lufs,
    window_geometry,
    masked_blocks,
    starts_within,
)

__all__ = ["integrated_loudness_jax", "k_weighting_ir", "measure_jax"]

_TAIL_ENERGY_TOL = 1e-15
_TAIL_SUM_TOL = 1e-9
_MAX_IR_SEC = 0.5


@functools.lru_cache(maxsize=64)
def _k_ir_cached(sample_rate: int) -> np.ndarray:
    n = int(np.ceil(_MAX_IR_SEC * sample_rate))
    impulse = np.zeros(n)
    impulse[0] = 1.0
    h = sosfilt_blocks(k_weighting_sos_cached(sample_rate), impulse)
    # tail_energy[i] = sum(h[i:] ** 2), tail_sum[i] = sum(h[i:])
    tail_energy = np.cumsum((h * h)[::-1])[::-1]
    tail_sum = np.abs(np.cumsum(h[::-1])[::-1])
    ok = (tail_energy <= _TAIL_ENERGY_TOL * tail_energy[0]) & (tail_sum <= _TAIL_SUM_TOL)
    # first index from which every later truncation point is also fine
    bad = np.nonzero(~ok)[0]
    length = n if bad.size == 0 else min(n, int(bad[-1]) + 1)
    ir = h[:length].copy()
    ir.flags.writeable = False
    return ir


def k_weighting_ir(sample_rate: int) -> np.ndarray:
    """Truncated K-weighting impulse response at ``sample_rate`` (float64, read-only, cached).

    About 0.1 s long; the discarded tail holds < 1e-15 of the energy.
    """
    return _k_ir_cached(check_meter_rate(sample_rate))


def _k_weighted_power(x: jax.Array, sample_rate: int) -> jax.Array:
    """(..., C, T) float32 -> (..., T) channel-weighted K-weighted power."""
    t = x.shape[-1]
    c = x.shape[-2]
    ir = _k_ir_cached(sample_rate)
    # Linear (not circular) convolution: n >= T + len(ir) - 1; only the first T
    # outputs are kept, i.e. the causal filter output with zero initial state.
    n = scipy.fft.next_fast_len(t + ir.size - 1, real=True)
    spectrum = jnp.fft.rfft(x, n=n, axis=-1) * jnp.fft.rfft(jnp.asarray(ir, jnp.float32), n=n)
    y = jnp.fft.irfft(spectrum, n=n, axis=-1)[..., :t]
    weights = jnp.asarray(CHANNEL_WEIGHTS[:c], dtype=jnp.float32)
    return jnp.einsum("...ct,c->...t", y * y, weights)


def _sliding_sums(power: jax.Array, window: int, hop: int) -> jax.Array:
    """Sums over windows [i*hop, i*hop + window), i < (T - window)//hop + 1; T >= window.

    Sub-blocks of ``gcd(window, hop)`` samples are summed first (tree
    reductions, no long float32 running sum); each window is a few shifted
    strided slices of those sums, or a ``lax.reduce_window`` when it spans
    many sub-blocks.
    """
    t = power.shape[-1]
    n_win = (t - window) // hop + 1
    d = math.gcd(window, hop)
    k_win, k_hop = window // d, hop // d
    n_sub = t // d
    sub = power[..., : n_sub * d].reshape(power.shape[:-1] + (n_sub, d)).sum(axis=-1)
    last = (n_win - 1) * k_hop + 1
    if k_win <= MAX_SHIFTED_SLICES:
        out = sub[..., 0:last:k_hop]
        for i in range(1, k_win):
            out = out + sub[..., i:i + last:k_hop]
        return out
    dims = (1,) * (sub.ndim - 1)
    return lax.reduce_window(sub, jnp.zeros((), sub.dtype), lax.add,
                             window_dimensions=dims + (k_win,),
                             window_strides=dims + (k_hop,), padding="VALID")


def _integrated(power: jax.Array, sample_rate: int, lengths=None) -> jax.Array:
    block, step = gating_geometry(sample_rate)
    if lengths is not None:
        block_ms, valid = masked_blocks(jnp, power, lengths, block, step, _sliding_sums)
        return gate(block_ms, jnp, valid)
    if power.shape[-1] < block:
        block_ms = jnp.mean(power, axis=-1, keepdims=True)
    else:
        block_ms = _sliding_sums(power, block, step) / block
    return gate(block_ms, jnp)


def _check_shape(x: jax.Array) -> None:
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., C, T), got shape {x.shape}")
    check_channels_and_samples(x.shape)


@functools.partial(jax.jit, static_argnames=("sample_rate", "window_sec", "hop_sec"))
def measure_jax(x, sample_rate: int, *, window_sec: float = 0.4,
                hop_sec: float | None = None, lengths=None) -> tuple[jax.Array, jax.Array]:
    """Integrated and per-window loudness (JAX twin of :func:`audiotree.dsp.loudness.measure`).

    Args:
      x: audio ``(..., C, T)``, 1 <= C <= 5 (L, R, C, Ls, Rs), full scale 1.0;
        computed in float32.
      sample_rate: Hz (static).
      window_sec: window length in seconds, >= 0.4 (static).
      hop_sec: hop in seconds, > 0, default ``window_sec`` (static).
      lengths: optional ``(...,)`` int real samples per item of a padded batch
        (may be traced); padding is never metered and windows past an item's
        end read ``-inf``, as in the NumPy engine.

    Returns:
      ``(lufs, lufs_windows)``: float32 ``(...,)`` gated integrated loudness and
      float32 ``(..., W)`` ungated per-window loudness in LUFS,
      ``W = (T - w) // h + 1`` (0 if T < w). ``-inf`` for silence.

    Raises:
      ValueError (at trace time): more than 5 channels, T == 0, bad window/hop.
    """
    sr = check_meter_rate(sample_rate)
    window, hop = window_geometry(sr, window_sec, hop_sec)
    x = jnp.asarray(x, dtype=jnp.float32)
    _check_shape(x)
    power = _k_weighted_power(x, sr)
    if lengths is not None:
        lengths = jnp.asarray(lengths)
        if lengths.shape != power.shape[:-1]:
            raise ValueError(f"lengths has shape {lengths.shape}; expected one length per item, {power.shape[:-1]}")
    lufs = _integrated(power, sr, lengths)
    if power.shape[-1] < window:
        lufs_windows = jnp.zeros(power.shape[:-1] + (0,), jnp.float32)
    else:
        lufs_windows = power_to_lufs(_sliding_sums(power, window, hop) / window, jnp)
        if lengths is not None:
            inside = starts_within(jnp, lengths, lufs_windows.shape[-1], window, hop)
            lufs_windows = jnp.where(inside, lufs_windows, -jnp.inf)
    return lufs.astype(jnp.float32), lufs_windows.astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("sample_rate",))
def integrated_loudness_jax(x, sample_rate: int, lengths=None) -> jax.Array:
    """Gated integrated loudness (LUFS), float32 ``(...,)`` for ``x`` of shape ``(..., C, T)``.

    A 1-D ``(T,)`` input is treated as mono. ``sample_rate`` is static.
    ``lengths`` (``(...,)`` samples, may be traced) meters only real samples.
    """
    sr = check_meter_rate(sample_rate)
    x = jnp.asarray(x, dtype=jnp.float32)
    if x.ndim == 1:
        x = x[None, :]
    _check_shape(x)
    return _integrated(_k_weighted_power(x, sr), sr, None if lengths is None else jnp.asarray(lengths)).astype(jnp.float32)
