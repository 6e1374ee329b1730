"""ITU-R BS.1770-4 loudness (LUFS) in NumPy: the CPU engine of the data loader.

Measurement chain (BS.1770-4, EBU R 128 / Tech 3341 "integrated" loudness):

1. K-weighting of every channel: a high-shelf biquad (head acoustics, about
   +4 dB above 2 kHz) followed by the RLB high-pass biquad (about 38 Hz).
   Coefficients are derived for any sample rate by the bilinear transform
   (pre-warped at the prototype's corner frequency) of analog prototypes. The
   prototypes are obtained by inverting that same transform on the 48 kHz
   coefficient tables printed in BS.1770, so at 48 kHz the printed tables are
   reproduced to within floating-point rounding.
2. Channel-weighted sum of squares: weights ``[L, R, C, Ls, Rs] =
   [1, 1, 1, 1.41, 1.41]`` (at most 5 channels; LFE is not measured).
3. Gating blocks of 400 ms with 75 % overlap (100 ms step); block loudness
   ``-0.691 + 10 log10(mean square)``; absolute gate at -70 LUFS, then a
   relative gate 10 LU below the loudness of the blocks that passed the
   absolute gate; integrated loudness is the loudness of the mean square of
   the blocks passing both gates.

Conventions shared by every function here:

* Audio is ``(..., C, T)``: any leading batch axes, then channels, then time.
  Power is ``(..., T)``. Loudness values are in LUFS (dB); silence, or an
  excerpt whose blocks are all gated away, measures ``-inf`` (never NaN, and
  no ``RuntimeWarning`` is emitted).
* All work is vectorised over the leading axes; there is no Python loop over
  items or blocks. The K-filter runs once, in float64, over the real samples
  only (no zero padding is ever filtered).
* Every function is pure and deterministic: the same input gives bit-identical
  output on the same machine.
* Input containing NaN or +-Inf raises ``ValueError``.
* ``lengths`` (optional, ``(...,)`` samples) marks padded items of a batch of
  variable-length audio: only the first ``lengths[i]`` samples of item ``i``
  are metered. The K-filter is causal, so its output over those samples is the
  item's own; gating blocks and windows that reach past the end are dropped,
  and an item shorter than one block is one block at its real mean square. A
  padded item therefore measures what it measures alone.

The JAX twin of this module is :mod:`audiotree.dsp.loudness_jax`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from audiotree.dsp.biquads import sosfilt_blocks
from audiotree.validation import check_sample_rate

__all__ = [
    "ABSOLUTE_GATE_LUFS",
    "ABSOLUTE_GATE_POWER",
    "BLOCK_SEC",
    "BLOCK_STEPS",
    "CHANNEL_WEIGHTS",
    "LUFS_OFFSET",
    "MAX_CHANNELS",
    "MAX_K_WEIGHT_GAIN_DB",
    "RELATIVE_GATE_FACTOR",
    "RELATIVE_GATE_LU",
    "STEP_SEC",
    "gain_db_to_linear",
    "gate_few",
    "gated_from_block_power",
    "integrated_from_power",
    "integrated_loudness",
    "k_weighted_power",
    "k_weighting_sos",
    "measure",
    "shift_lufs",
    "windowed_from_power",
]

#: Channel weights G_i of BS.1770-4 for L, R, C, Ls, Rs.
CHANNEL_WEIGHTS: tuple[float, ...] = (1.0, 1.0, 1.0, 1.41, 1.41)
MAX_CHANNELS = len(CHANNEL_WEIGHTS)
#: The -0.691 dB offset of BS.1770 (makes a 997 Hz tone read its RMS level).
LUFS_OFFSET = -0.691
ABSOLUTE_GATE_LUFS = -70.0
RELATIVE_GATE_LU = -10.0
#: Gating block length and step, in seconds (400 ms blocks, 75 % overlap).
BLOCK_SEC = 0.4
STEP_SEC = 0.1
#: Steps per gating block (4): a loudness profile's 100 ms blocks make one gating block in fours.
BLOCK_STEPS = round(BLOCK_SEC / STEP_SEC)
#: An upper bound on what K-weighting can add to a signal's level: the high
#: shelf peaks just under +4 dB and the high-pass only removes energy.
MAX_K_WEIGHT_GAIN_DB = 4.1

#: The gates as mean squares (every gate here compares mean squares, never LUFS):
#:   -0.691 + 10 log10(ms) > -70   <=>   ms > 10 ** ((-70 + 0.691) / 10)
#:   l_j > L_abs - 10              <=>   ms_j > mean_abs * 10 ** (-10 / 10)
ABSOLUTE_GATE_POWER = 10.0 ** ((ABSOLUTE_GATE_LUFS - LUFS_OFFSET) / 10.0)
RELATIVE_GATE_FACTOR = 10.0 ** (RELATIVE_GATE_LU / 10.0)
# Window sums from at most this many shifted sub-block slices; beyond, cumsum.
MAX_SHIFTED_SLICES = 16

# BS.1770-4, Annex 1, Tables 1 and 2: the two K-weighting biquads at 48 kHz,
# as (b0, b1, b2), (1, a1, a2).
_TABLE_FS = 48000
_TABLE_SHELF = ((1.53512485958697, -2.69169618940638, 1.19839281085285),
                (1.0, -1.69065929318241, 0.73248077421585))
_TABLE_HIGHPASS = ((1.0, -2.0, 1.0),
                   (1.0, -1.99004745483398, 0.99007225036621))


# --------------------------------------------------------------------------
# K-weighting filter design
# --------------------------------------------------------------------------
#
# General analog biquad, with s' = s / (2 pi f0):
#
#     H(s') = (Vh s'^2 + Vb s'/Q + V0) / (s'^2 + s'/Q + 1)
#
# (Vh: gain at high frequencies, V0: gain at DC, Vb: band term). Its bilinear
# transform pre-warped at f0, i.e. s' -> (1/K) (z - 1)/(z + 1) with
# K = tan(pi f0 / fs), is, after multiplying through by K^2 (z + 1)^2:
#
#     a0 = 1 + K/Q + K^2
#     b  = [Vh + Vb K/Q + V0 K^2,  2 (V0 K^2 - Vh),  Vh - Vb K/Q + V0 K^2] / a0
#     a  = [1,  2 (K^2 - 1) / a0,  (1 - K/Q + K^2) / a0]
#
# Five digital coefficients <-> five analog parameters, so the transform can be
# inverted exactly: from the denominator, 1 + a1 + a2 = 4 K^2 / a0 and
# 1 - a1 + a2 = 4 / a0 give K and a0, and 1 - a2 = 2 (K/Q) / a0 gives Q; from
# the numerator, b0 - b1 + b2 = 4 Vh / a0, b0 + b1 + b2 = 4 V0 K^2 / a0 and
# b0 - b2 = 2 Vb (K/Q) / a0.


def _analog_from_digital(b, a, fs: float) -> tuple[float, float, float, float, float]:
    """Invert the pre-warped bilinear transform: (b, a) at fs -> (f0, Q, Vh, Vb, V0)."""
    b0, b1, b2 = (float(v) for v in b)
    _, a1, a2 = (float(v) for v in a)
    k2 = (1.0 + a1 + a2) / (1.0 - a1 + a2)
    k = math.sqrt(k2)
    a0 = 4.0 / (1.0 - a1 + a2)
    k_over_q = a0 * (1.0 - a2) / 2.0
    f0 = fs * math.atan(k) / math.pi
    q = k / k_over_q
    vh = a0 * (b0 - b1 + b2) / 4.0
    v0 = a0 * (b0 + b1 + b2) / (4.0 * k2)
    vb = a0 * (b0 - b2) / (2.0 * k_over_q)
    return f0, q, vh, vb, v0


def _digital_from_analog(params, fs: float) -> np.ndarray:
    """Pre-warped bilinear transform: (f0, Q, Vh, Vb, V0) -> SOS row [b0 b1 b2 1 a1 a2]."""
    f0, q, vh, vb, v0 = params
    k = math.tan(math.pi * f0 / fs)
    k2 = k * k
    a0 = 1.0 + k / q + k2
    return np.array([
        (vh + vb * k / q + v0 * k2) / a0,
        2.0 * (v0 * k2 - vh) / a0,
        (vh - vb * k / q + v0 * k2) / a0,
        1.0,
        2.0 * (k2 - 1.0) / a0,
        (1.0 - k / q + k2) / a0,
    ])


# Analog prototypes of the two K-weighting stages, recovered from the tables.
_SHELF_PROTOTYPE = _analog_from_digital(*_TABLE_SHELF, _TABLE_FS)
_HIGHPASS_PROTOTYPE = _analog_from_digital(*_TABLE_HIGHPASS, _TABLE_FS)
#: Lowest usable rate: the shelf's corner must lie below Nyquist.
_MIN_SAMPLE_RATE = 2.0 * _SHELF_PROTOTYPE[0]


def check_meter_rate(sample_rate) -> int:
    """A positive integer rate high enough for the K-weighting shelf; ``ValueError`` otherwise."""
    sr = check_sample_rate(sample_rate)
    if sr <= _MIN_SAMPLE_RATE:
        raise ValueError(
            f"sample_rate {sr} Hz is too low for K-weighting "
            f"(must exceed {_MIN_SAMPLE_RATE:.0f} Hz)")
    return sr


@functools.lru_cache(maxsize=64)
def k_weighting_sos_cached(sample_rate: int) -> np.ndarray:
    sos = np.stack([_digital_from_analog(_SHELF_PROTOTYPE, sample_rate),
                    _digital_from_analog(_HIGHPASS_PROTOTYPE, sample_rate)])
    sos.flags.writeable = False  # shared by every caller at this rate
    return sos


def k_weighting_sos(sample_rate: int) -> np.ndarray:
    """K-weighting filter of BS.1770-4 at ``sample_rate`` Hz, as second-order sections.

    Returns a read-only ``(2, 6)`` float64 array ``[[b0, b1, b2, 1, a1, a2], ...]``
    (shelf, then RLB high-pass), as :func:`scipy.signal.sosfilt` takes them. At 48 kHz it
    equals BS.1770-4 Tables 1 and 2 (to ~1e-14). Cached per rate; deterministic.
    """
    view = k_weighting_sos_cached(check_meter_rate(sample_rate)).view()
    view.flags.writeable = False  # protect the cached array from callers
    return view


# --------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------

def _check_audio(x, name: str = "x") -> np.ndarray:
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., C, T), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"{name} must be real-valued audio, got dtype {x.dtype}")
    check_channels_and_samples(x.shape, name)
    return x


def check_channels_and_samples(shape: tuple, name: str = "x") -> None:
    """1..5 channels on axis -2 and at least one sample (shared with the JAX engine)."""
    c, t = shape[-2:]
    if c == 0 or c > MAX_CHANNELS:
        raise ValueError(
            f"BS.1770 loudness supports 1..{MAX_CHANNELS} channels (L, R, C, Ls, Rs), "
            f"got {c} (shape {shape}); channels are axis -2")
    if t == 0:
        raise ValueError(f"{name} has no samples (T == 0, shape {shape})")


def _non_finite_error() -> ValueError:
    return ValueError("the input contains non-finite samples (NaN or Inf)")


def gating_geometry(sample_rate: int) -> tuple[int, int]:
    """(block, step) of the gating blocks in samples: 400 ms and 100 ms, rounded."""
    return round(BLOCK_SEC * sample_rate), round(STEP_SEC * sample_rate)


def window_geometry(sample_rate: int, window_sec: float, hop_sec: float | None) -> tuple[int, int]:
    """Validated (window, hop) in samples for the windowed measurements."""
    if not window_sec >= BLOCK_SEC:  # also rejects NaN
        raise ValueError(f"window_sec must be >= {BLOCK_SEC} s, got {window_sec!r}")
    if hop_sec is None:
        hop_sec = window_sec
    if not hop_sec > 0:
        raise ValueError(f"hop_sec must be > 0, got {hop_sec!r}")
    window = round(window_sec * sample_rate)
    hop = round(hop_sec * sample_rate)
    if hop < 1:
        raise ValueError(
            f"hop_sec={hop_sec!r} rounds to {hop} samples at {sample_rate} Hz; need >= 1")
    return window, hop


# --------------------------------------------------------------------------
# Power and block means
# --------------------------------------------------------------------------

def _k_filter(sos: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The K-filter along the last axis, in float64, from rest (a fresh array).

    NumPy only (:mod:`audiotree.dsp.biquads`): a metering worker never imports
    ``scipy.signal`` (~50 MB of RSS and ~1 s of CPU per process). Matches
    ``scipy.signal.sosfilt`` to ~1e-11 relative, at 0.75 to 1.05x its CPU time
    for 3 s excerpts at 16 to 96 kHz (PROFILE.md).
    """
    return sosfilt_blocks(sos, x)


def _weighted_power(x: np.ndarray, sample_rate: int) -> np.ndarray:
    """K-filter + channel-weighted square sum; x already validated. (..., C, T) -> (..., T)."""
    sos = k_weighting_sos_cached(sample_rate)
    with np.errstate(all="ignore"):
        # One pass filters both sections for every channel/item, in float64.
        y = _k_filter(sos, x)
        np.square(y, out=y)
        # The weighted sum lands in channel 0's row, in place: a fresh (..., T) array
        # (what ``weights @ y`` returns) costs more in page faults on a 3 s excerpt
        # than the K-filter itself (PROFILE.md, "Metering without SciPy").
        power = y[..., 0, :]
        for c in range(1, x.shape[-2]):
            row = y[..., c, :]
            if CHANNEL_WEIGHTS[c] != 1.0:
                np.multiply(row, CHANNEL_WEIGHTS[c], out=row)
            np.add(power, row, out=power)
        # One cheap reduction detects NaN/Inf anywhere (they propagate through
        # the filter, and the errstate keeps this silent).
        finite = np.isfinite(power.sum(axis=-1))
    if not np.all(finite):
        raise _non_finite_error()
    return power


def _sliding_sums(power: np.ndarray, window: int, hop: int) -> np.ndarray:
    """Sums of power over windows [i*hop, i*hop + window), i < (T - window)//hop + 1.

    Requires T >= window. Never materialises the windows: the signal is first
    summed in sub-blocks of ``d = gcd(window, hop)`` samples (a strided view,
    pairwise summation); each window is then ``window / d`` consecutive
    sub-blocks, added as a few shifted strided slices when that is at most
    ``MAX_SHIFTED_SLICES`` (e.g. 4 for the gating blocks), otherwise by
    differencing a float64 cumulative sum of the sub-blocks (windows more than
    ~150 dB below the preceding signal may then read exactly 0).
    """
    t = power.shape[-1]
    n_win = (t - window) // hop + 1
    d = math.gcd(window, hop)
    k_win, k_hop = window // d, hop // d
    n_sub = t // d
    sub = np.lib.stride_tricks.sliding_window_view(power, d, axis=-1)[..., ::d, :]
    sub = sub[..., :n_sub, :].sum(axis=-1)  # (..., n_sub)
    last = (n_win - 1) * k_hop + 1  # span of window starts, in sub-blocks
    if k_win <= MAX_SHIFTED_SLICES:
        out = sub[..., 0:last:k_hop].copy()
        for i in range(1, k_win):  # a handful of vectorised adds, not a loop over windows
            out += sub[..., i:i + last:k_hop]
        return out
    cs = np.zeros(sub.shape[:-1] + (n_sub + 1,), dtype=np.float64)
    np.cumsum(sub, axis=-1, out=cs[..., 1:])
    starts = np.arange(n_win) * k_hop
    # sub >= 0 makes cs non-decreasing, so differences are >= 0 (exactly 0 over
    # digital silence).
    return cs[..., starts + k_win] - cs[..., starts]


# power_to_lufs and gate take the array module ``xp`` (``numpy`` or
# ``jax.numpy``): the JAX engine gates with this very code, jit-compatibly
# (masks and sums, no boolean indexing).
def power_to_lufs(ms: np.ndarray, xp=np) -> np.ndarray:
    """-0.691 + 10 log10(ms), with -inf (and no warning) where ms <= 0."""
    positive = ms > 0
    safe = xp.where(positive, ms, 1.0)
    return xp.where(positive, LUFS_OFFSET + 10.0 * xp.log10(safe), -xp.inf)


def gate(block_ms: np.ndarray, xp=np, valid=None) -> np.ndarray:
    """Two-stage gating over the last axis of block mean squares: (..., J) -> (...,) LUFS.

    ``valid`` (same shape, bool) drops blocks that are not part of the audio.
    """
    above_abs = block_ms > ABSOLUTE_GATE_POWER
    if valid is not None:
        above_abs = above_abs & valid
    n_abs = xp.sum(above_abs, axis=-1)
    sum_abs = xp.sum(xp.where(above_abs, block_ms, 0.0), axis=-1)
    mean_abs = sum_abs / xp.maximum(n_abs, 1)
    keep = above_abs & (block_ms > (mean_abs * RELATIVE_GATE_FACTOR)[..., None])
    n_rel = xp.sum(keep, axis=-1)
    mean_rel = xp.sum(xp.where(keep, block_ms, 0.0), axis=-1) / xp.maximum(n_rel, 1)
    return xp.where(n_rel > 0, power_to_lufs(mean_rel, xp), -xp.inf)


def gate_few(block_ms) -> float:
    """:func:`gate` of one short sequence of block mean squares, in plain Python: gated LUFS (float).

    The same gates and thresholds, for the few dozen gating blocks of one
    window, where the vectorised form costs about 10x more (once per item of a
    ``loudest`` dataset over an index). ``-inf`` when every block is gated away.

    >>> round(gate_few([0.01] * 7), 3), gate_few([0.0, 1e-12])
    (-20.691, -inf)
    """
    kept = [ms for ms in block_ms if ms > ABSOLUTE_GATE_POWER]
    if not kept:
        return -math.inf
    floor = sum(kept) / len(kept) * RELATIVE_GATE_FACTOR
    kept = [ms for ms in kept if ms > floor]
    return LUFS_OFFSET + 10 * math.log10(sum(kept) / len(kept)) if kept else -math.inf


def starts_within(xp, lengths, count: int, size: int, hop: int):
    """``(..., count)`` bool: window ``i`` (``[i*hop, i*hop + size)``) lies within ``lengths``."""
    ends = xp.arange(count) * hop + size
    return ends <= xp.asarray(lengths)[..., None]


def masked_blocks(xp, power, lengths, block: int, step: int, sliding):
    """Gating-block mean squares and their validity for padded items.

    Returns ``(block_ms, valid)``, ``(..., J + 1)``: the ``J`` complete blocks of
    the padded axis (valid when they end within the item), then one block holding
    the mean square of the real samples, valid only for items shorter than a block.
    ``sliding(power, window, hop)`` is the engine's sliding-sum function.
    """
    t = power.shape[-1]
    lengths = xp.asarray(lengths)
    real = xp.arange(t) < lengths[..., None]
    short_ms = xp.sum(xp.where(real, power, 0.0), axis=-1) / xp.maximum(lengths, 1)
    short_valid = lengths < block
    if t >= block:
        full = sliding(power, block, step) / block
        valid = starts_within(xp, lengths, full.shape[-1], block, step)
        return (xp.concatenate([full, short_ms[..., None]], axis=-1),
                xp.concatenate([valid, short_valid[..., None]], axis=-1))
    return short_ms[..., None], short_valid[..., None]


def _check_lengths(lengths, power: np.ndarray) -> np.ndarray:
    lengths = np.asarray(lengths)
    if lengths.shape != power.shape[:-1]:
        raise ValueError(f"lengths has shape {lengths.shape}; expected one length per item, {power.shape[:-1]}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > power.shape[-1]):
        raise ValueError(f"lengths must be in [0, {power.shape[-1]}] samples, got {lengths.reshape(-1)[:8].tolist()}")
    return lengths.astype(np.int64)


def _integrated(power: np.ndarray, sample_rate: int, lengths=None) -> np.ndarray:
    block, step = gating_geometry(sample_rate)
    t = power.shape[-1]
    if lengths is not None:
        block_ms, valid = masked_blocks(np, power, _check_lengths(lengths, power), block, step, _sliding_sums)
        if not np.all(np.isfinite(block_ms)):
            raise _non_finite_error()
        return gate(block_ms, np, valid)
    if t < block:
        # Whole excerpt as one gating block at its mean square (== zero-padding
        # to 400 ms and rescaling to preserve the mean square).
        block_ms = power.mean(axis=-1, keepdims=True)
    else:
        block_ms = _sliding_sums(power, block, step) / block
    if not np.all(np.isfinite(block_ms)):
        raise _non_finite_error()
    return gate(block_ms)


def _windowed(power: np.ndarray, window: int, hop: int, lengths=None) -> np.ndarray:
    t = power.shape[-1]
    if t < window:
        return np.zeros(power.shape[:-1] + (0,), dtype=np.float64)
    ms = _sliding_sums(power, window, hop) / window
    if not np.all(np.isfinite(ms)):
        raise _non_finite_error()
    out = power_to_lufs(ms)
    if lengths is not None:  # windows reaching into padding read -inf, like silence
        out = np.where(starts_within(np, _check_lengths(lengths, power), out.shape[-1], window, hop), out, -np.inf)
    return out


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def k_weighted_power(x, sample_rate: int) -> np.ndarray:
    """Channel-weighted K-weighted instantaneous power.

    Args:
      x: audio ``(..., C, T)``, real (any float or int dtype; used as is, so
        pass floats in [-1, 1] for dBFS-referenced results), 1 <= C <= 5 in
        the order L, R, C, Ls, Rs.
      sample_rate: Hz, a positive integer.

    Returns:
      float64 ``(..., T)``: ``sum_c g_c * y_c[t] ** 2`` where ``y_c`` is channel
      ``c`` K-filtered (one pass in float64, zero initial state).

    Raises:
      ValueError: more than 5 channels, T == 0, or non-finite samples.
    """
    sr = check_meter_rate(sample_rate)
    return _weighted_power(_check_audio(x), sr)


def integrated_from_power(power, sample_rate: int) -> np.ndarray:
    """Gated integrated loudness from K-weighted power.

    Args:
      power: ``(..., T)`` non-negative power, as from :func:`k_weighted_power`.
      sample_rate: Hz.

    Returns:
      float64 ``(...,)`` in LUFS. 400 ms blocks every 100 ms (only complete
      blocks); excerpts shorter than 400 ms count as one block at their mean
      square. ``-inf`` when silent or when every block is gated away.

    Raises:
      ValueError: T == 0 or non-finite power.
    """
    sr = check_meter_rate(sample_rate)
    power = np.asarray(power, dtype=np.float64)
    if power.ndim < 1 or power.shape[-1] == 0:
        raise ValueError(f"power has no samples (shape {power.shape})")
    return _integrated(power, sr)


def gated_from_block_power(block_ms) -> np.ndarray:
    """BS.1770 two-stage gating of 400 ms gating-block mean squares.

    Args:
      block_ms: ``(..., J)`` non-negative K-weighted, channel-weighted mean
        square of each gating block (as :func:`integrated_from_power` forms
        them internally).

    Returns:
      float64 ``(...,)`` gated loudness in LUFS over the last axis: absolute
      gate at -70 LUFS, relative gate 10 LU below the absolutely gated mean;
      ``-inf`` when every block is gated away. Pure and vectorised.

    >>> import numpy as np
    >>> round(float(gated_from_block_power(np.full(7, 0.01))), 3)
    -20.691
    """
    block_ms = np.asarray(block_ms, dtype=np.float64)
    if block_ms.ndim < 1:
        raise ValueError(f"block_ms must have shape (..., J), got {block_ms.shape}")
    return gate(block_ms)


def windowed_from_power(power, sample_rate: int, window_sec: float = 0.4,
                        hop_sec: float | None = None) -> np.ndarray:
    """Ungated loudness of consecutive windows, from K-weighted power.

    Args:
      power: ``(..., T)`` K-weighted power.
      sample_rate: Hz.
      window_sec: window length in seconds, >= 0.4; ``w = round(window_sec * sr)``
        samples (0.4 = momentary, 3.0 = short-term loudness).
      hop_sec: hop in seconds, > 0 (default: ``window_sec``, i.e. no overlap);
        ``h = round(hop_sec * sr)`` samples, must be >= 1.

    Returns:
      float64 ``(..., W)`` in LUFS, ``W = (T - w) // h + 1`` (0 if T < w; a
      trailing partial window is dropped); window ``i`` covers samples
      ``[i*h, i*h + w)`` and reads ``-0.691 + 10 log10(mean power)``, ``-inf``
      when silent.

    Raises:
      ValueError: bad window/hop, or non-finite power.
    """
    sr = check_meter_rate(sample_rate)
    window, hop = window_geometry(sr, window_sec, hop_sec)
    power = np.asarray(power, dtype=np.float64)
    if power.ndim < 1:
        raise ValueError(f"power must have shape (..., T), got {power.shape}")
    return _windowed(power, window, hop)


def measure(x, sample_rate: int, *, window_sec: float = 0.4,
            hop_sec: float | None = None, lengths=None) -> tuple[np.ndarray, np.ndarray]:
    """Integrated and per-window loudness from a single K-weighting pass.

    Args:
      x: audio ``(..., C, T)``, 1 <= C <= 5 (L, R, C, Ls, Rs), full scale 1.0.
      sample_rate: Hz, positive integer.
      window_sec, hop_sec: see :func:`windowed_from_power`.
      lengths: optional ``(...,)`` real samples per item of a padded batch
        (see the module docstring); windows past an item's end read ``-inf``.

    Returns:
      ``(lufs, lufs_windows)``: float32 ``(...,)`` gated integrated loudness and
      float32 ``(..., W)`` ungated window loudness, in LUFS (``-inf`` for
      silence). Deterministic.

    Raises:
      ValueError: more than 5 channels, T == 0, non-finite samples, bad window.
    """
    sr = check_meter_rate(sample_rate)
    window, hop = window_geometry(sr, window_sec, hop_sec)
    power = _weighted_power(_check_audio(x), sr)
    lufs = _integrated(power, sr, lengths)
    lufs_windows = _windowed(power, window, hop, lengths)
    return lufs.astype(np.float32), lufs_windows.astype(np.float32)


def integrated_loudness(x, sample_rate: int, *, lengths=None) -> float | np.ndarray:
    """Gated integrated loudness (LUFS) of ``x``.

    ``x`` is ``(C, T)`` -> Python ``float``, ``(..., C, T)`` -> float64 array
    ``(...,)``, or a 1-D ``(T,)`` mono signal -> ``float``. ``-inf`` for silence.
    ``lengths`` meters only each item's first ``lengths`` samples.

    >>> import numpy as np
    >>> tone = np.sin(np.linspace(0, 2000, 48000)).astype(np.float32)[None]
    >>> padded = np.concatenate([tone, np.zeros_like(tone)], axis=-1)
    >>> round(integrated_loudness(tone, 48000), 3) == round(float(integrated_loudness(padded, 48000, lengths=np.array(48000))), 3)
    True
    """
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[None, :]
    sr = check_meter_rate(sample_rate)
    out = _integrated(_weighted_power(_check_audio(x), sr), sr, lengths)
    return float(out) if out.ndim == 0 else out


def gain_db_to_linear(gain_db):
    """Amplitude factor ``10 ** (gain_db / 20)`` (``-inf`` dB -> 0). Float or array."""
    out = np.power(10.0, np.asarray(gain_db, dtype=np.float64) / 20.0)
    return float(out) if out.ndim == 0 else out


def shift_lufs(lufs, gain_db):
    """Loudness after applying ``gain_db`` dB of gain: ``lufs + gain_db``.

    ``-inf`` (silence) stays ``-inf`` for any finite gain. Keeps float32 arrays
    float32; returns a Python float for scalar inputs.
    """
    lufs_arr = np.asarray(lufs)
    if not np.issubdtype(lufs_arr.dtype, np.floating):
        lufs_arr = lufs_arr.astype(np.float64)
    out = lufs_arr + np.asarray(gain_db, dtype=np.float64).astype(lufs_arr.dtype)
    return float(out) if out.ndim == 0 else out
