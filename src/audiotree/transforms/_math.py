"""The per-item math of every transform, written once against an array module.

Each function takes ``xp`` (``numpy`` or ``jax.numpy``) and *explicit*
parameters (gains, shifts, phases: never an RNG), so the NumPy kernels
(:mod:`audiotree.transforms.kernels`) and the JAX kernels
(:mod:`audiotree.transforms.jax.kernels`) are the same algorithm and differ
only in the array library, its precision (NumPy works in float64 where it
matters, JAX in float32) and the loudness/resampling engines they plug in.

Padded batches (``tree.lengths`` set): padding is never metered (the meter
gets ``lengths``), never moved into the audio (``roll`` wraps each item within
its own length) and is zero again after every transform (see
:func:`audiotree.transforms.base`), so no augmentation leaks into it.

Shapes: a waveform is ``(*lead, C, T)``; ``lead`` (usually ``(B,)``) indexes
the *items*, and every per-item parameter has shape ``lead`` (or, for
``corrupt_phase``, ``lead + (C, F)``). Inside ``jax.vmap`` over items,
``lead`` is ``()``. Everything here is trace-safe: guards look only at static
shapes and Python parameters, never at array values.

This module does not import ``jax``; from ``audiotree.dsp`` it takes only the
array-library-agnostic edits (:mod:`audiotree.dsp.edits`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from audiotree.core import AudioTree
from audiotree.dsp.edits import apply_gain_db, gain_to_target, shift_loudness
from audiotree.transforms import _checks

LUFS_FIELDS = ("lufs", "lufs_windows")


def _op(xp: Any, fn: Callable, static: tuple = ()) -> Callable:
    """``fn`` bound to ``xp``; for JAX, also ``jax.jit``-compiled (static ``static``).

    Compiling the array math once per shape makes eager JAX calls fast; under
    an outer ``jax.jit`` the inner jit is simply inlined.
    """
    if xp is np:
        return functools.partial(fn, np)
    return _jitted(fn, static)


@functools.lru_cache(maxsize=None)
def _jitted(fn: Callable, static: tuple) -> Callable:
    import jax
    import jax.numpy as jnp

    return jax.jit(functools.partial(fn, jnp), static_argnums=static)


def item_shape(tree: AudioTree) -> tuple:
    """The per-item parameter shape: ``waveform.shape[:-2]``, else ``(batch_size,)``."""
    if tree.waveform is not None:
        return tuple(np.shape(tree.waveform)[:-2])
    return (tree.batch_size,)


def phase_shape(tree: AudioTree, frame_length: int) -> tuple:
    """The shape of ``corrupt_phase``'s phases: ``item_shape + (C, frame_length // 2 + 1)``."""
    if tree.waveform is None:
        raise ValueError("corrupt_phase needs a waveform; this AudioTree is token-only.")
    return item_shape(tree) + (int(np.shape(tree.waveform)[-2]), int(frame_length) // 2 + 1)


def roll_bounds(tree: AudioTree, min_seconds: float, max_seconds: float) -> tuple[int, int]:
    """``roll``'s shift range in samples, both ends inclusive."""
    return int(round(min_seconds * tree.sample_rate)), int(round(max_seconds * tree.sample_rate))


def waveform(xp: Any, tree: AudioTree, name: str) -> Any:
    if tree.waveform is None:
        raise ValueError(f"{name} needs a waveform; this AudioTree is token-only.")
    x = xp.asarray(tree.waveform)
    if x.ndim < 2:
        raise ValueError(f"{name} needs a waveform shaped (..., C, T), got shape {tuple(x.shape)}.")
    return x


def _finish(xp: Any, y: Any) -> Any:
    return np.ascontiguousarray(y) if xp is np else y


def per_item(xp: Any, value: Any, shape: tuple, name: str, dtype: Any = None) -> Any:
    """``value`` as an array broadcast to ``shape`` (``ValueError`` if it cannot be)."""
    p = xp.asarray(value) if dtype is None else xp.asarray(value, dtype=dtype)
    try:
        return xp.broadcast_to(p, shape)
    except ValueError:
        raise ValueError(
            f"{name} has shape {tuple(p.shape)}; expected one value per item, shape {shape}."
        ) from None


# --------------------------------------------------------------------- level
def gain(xp: Any, tree: AudioTree, gain_db: Any, name: str = "volume_change") -> AudioTree:
    """Scales each item by ``10 ** (gain_db / 20)``.

    ``lufs``/``lufs_windows`` (when present) shift by the gain, float32;
    ``codes``/``latents`` are cleared.
    """
    x = waveform(xp, tree, name)
    lead = x.shape[:-2]
    g = per_item(xp, gain_db, lead, "gain_db", dtype=np.float64 if xp is np else None)
    if xp is not np and not xp.issubdtype(g.dtype, xp.floating):
        g = g.astype(xp.float32)
    y = _op(xp, apply_gain_db)(x, g)
    lufs, windows = shift_loudness(xp, tree.lufs, tree.lufs_windows, g)
    return tree.replace_audio(keep=LUFS_FIELDS, waveform=y, lufs=lufs, lufs_windows=windows)


def ensure_lufs(xp: Any, tree: AudioTree, measure: Callable) -> AudioTree:
    """Measures ``lufs``/``lufs_windows`` with ``measure`` unless ``lufs`` is present."""
    if tree.lufs is not None:
        return tree
    x = waveform(xp, tree, "volume_norm")
    lufs, windows = measure(x, tree.sample_rate, tree.lengths)
    return tree.replace(lufs=lufs, lufs_windows=windows)


def volume_norm(xp: Any, tree: AudioTree, target_lufs: Any, measure: Callable) -> AudioTree:
    """Gains each item to ``target_lufs`` (measuring with ``measure`` if ``lufs`` is None).

    Items whose loudness is not finite (silence) get 0 dB.
    """
    x = waveform(xp, tree, "volume_norm")
    lead = x.shape[:-2]
    tree = ensure_lufs(xp, tree, measure)
    lufs = xp.asarray(tree.lufs)
    target = per_item(xp, target_lufs, lead, "target_lufs", dtype=np.float64 if xp is np else None)
    return gain(xp, tree, gain_to_target(xp, lufs, target), name="volume_norm")


def peak_scale(xp: Any, tree: AudioTree, floor: float, name: str) -> AudioTree:
    """Divides each item by ``max(peak over C and T, floor)``; derived fields cleared."""
    x = waveform(xp, tree, name)
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        return tree
    y = _op(xp, _peak_scale_array, (1,))(x, float(floor))
    return tree.replace_audio(waveform=y)


def _peak_scale_array(xp: Any, x: Any, floor: float) -> Any:
    scale = xp.maximum(xp.max(xp.abs(x), axis=(-2, -1)), floor)
    return (x / scale[..., None, None]).astype(x.dtype)


# ---------------------------------------------------------- sign / channels
def invert(xp: Any, tree: AudioTree) -> AudioTree:
    x = waveform(xp, tree, "invert_phase")
    return tree.replace_audio(keep=LUFS_FIELDS, waveform=-x)


def swap(xp: Any, tree: AudioTree) -> AudioTree:
    x = waveform(xp, tree, "swap_stereo")
    channels = x.shape[-2]
    if channels == 1:
        return tree
    if channels != 2:
        raise ValueError(f"swap_stereo needs mono or stereo audio, got {channels} channels.")
    return tree.replace_audio(keep=LUFS_FIELDS, waveform=_finish(xp, xp.flip(x, axis=-2)))


def mono(xp: Any, tree: AudioTree) -> AudioTree:
    x = waveform(xp, tree, "mono")
    if x.shape[-2] == 1:
        return tree
    return tree.replace(waveform=x).to_mono("average")


def stereo(xp: Any, tree: AudioTree) -> AudioTree:
    x = waveform(xp, tree, "stereo")
    if x.shape[-2] == 2:
        return tree
    return tree.replace(waveform=x).to_stereo()


# ----------------------------------------------------------------- time
def roll(xp: Any, tree: AudioTree, shift: Any, mode: str) -> AudioTree:
    """Shifts each item by ``shift`` samples (positive = later); see ``roll``."""
    _checks.check_roll_mode(mode)
    x = waveform(xp, tree, "roll")
    lead, length = x.shape[:-2], x.shape[-1]
    s = per_item(xp, shift, lead, "shift").astype(xp.int32)
    meta = tree.provenance
    if "offset" in meta:
        # A rolled item no longer starts at its recorded offset: mark it unknown
        # (NaN) per item, keeping the key so rolled and unrolled items batch.
        meta["offset"] = xp.where(s.reshape(-1) != 0, xp.nan, xp.asarray(meta["offset"]).reshape(-1)).reshape(
            xp.asarray(meta["offset"]).shape
        )
    keep = ("lufs",) if mode == "wrap" else ()
    if length == 0:
        return tree.replace_audio(keep=keep, _metadata=meta)
    if tree.lengths is not None:
        y = _op(xp, _roll_within_array, (3,))(x, s, xp.asarray(tree.lengths), mode)
    else:
        y = _op(xp, _roll_array, (2,))(x, s, mode)
    return tree.replace_audio(keep=keep, waveform=_finish(xp, y), _metadata=meta)


def _roll_within_array(xp: Any, x: Any, s: Any, lengths: Any, mode: str) -> Any:
    """``_roll_array`` of each item's first ``lengths`` samples; padding stays zero."""
    t = x.shape[-1]
    n = xp.maximum(lengths, 1)[..., None].astype(xp.int32)
    pos = xp.arange(t, dtype=xp.int32)
    src = pos - s[..., None]
    inside = pos < lengths[..., None]
    idx = src % n if mode == "wrap" else xp.clip(src, 0, n - 1)
    idx = xp.where(inside, idx, 0)
    y = xp.take_along_axis(x, xp.broadcast_to(idx[..., None, :], x.shape), axis=-1)
    valid = inside if mode == "wrap" else inside & (src >= 0) & (src < n)
    return xp.where(valid[..., None, :], y, xp.zeros((), dtype=x.dtype))


def _roll_array(xp: Any, x: Any, s: Any, mode: str) -> Any:
    length = x.shape[-1]
    src = xp.arange(length, dtype=xp.int32) - s[..., None]
    idx = src % length if mode == "wrap" else xp.clip(src, 0, length - 1)
    y = xp.take_along_axis(x, xp.broadcast_to(idx[..., None, :], x.shape), axis=-1)
    if mode == "constant":
        valid = (src >= 0) & (src < length)
        y = xp.where(valid[..., None, :], y, xp.zeros((), dtype=x.dtype))
    return y


def trim(xp: Any, tree: AudioTree, length: float, mode: str) -> AudioTree:
    """Cuts or right-pads to ``round(length * sample_rate)`` samples."""
    _checks.check_trim(length, mode)
    x = waveform(xp, tree, "trim")
    target, current = int(round(float(length) * tree.sample_rate)), x.shape[-1]
    if target == current:
        return tree
    if tree.lengths is not None:
        # A padded batch: cutting shortens items past the target, growing adds
        # padding (zeros), never repeated audio, whatever ``mode`` says.
        lengths = xp.minimum(xp.asarray(tree.lengths), target).astype(xp.int32)
        y = x[..., :target] if target < current else xp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, target - current)])
        return tree.replace_audio(waveform=_finish(xp, y), lengths=lengths)
    if target < current:
        y = x[..., :target]
    else:
        widths = [(0, 0)] * (x.ndim - 1) + [(0, target - current)]
        y = xp.pad(x, widths, mode=mode if current > 0 else "constant")
    return tree.replace_audio(waveform=_finish(xp, y))


def resample(xp: Any, tree: AudioTree, sample_rate: Any) -> AudioTree:
    rate = _checks.check_resample_rate(sample_rate)
    x = waveform(xp, tree, "resample")
    if rate == tree.sample_rate:
        return tree
    return tree.replace(waveform=x).resample(rate)


# ---------------------------------------------------------------- phase
def overlap_add(xp: Any, frames: Any, hop: int, total: int) -> Any:
    """Sums frames ``(..., n, N)`` placed every ``hop`` samples into ``(..., total)``.

    Each frame is cut into ``K = ceil(N / hop)`` hop-sized segments; segment
    ``k`` of every frame lands on a contiguous, non-overlapping run, so the sum
    is ``K`` shifted adds (no scatter), identical in NumPy and JAX.
    """
    n, size = frames.shape[-2:]
    lead = frames.shape[:-2]
    k_segments = -(-size // hop)
    if k_segments * hop > size:
        frames = xp.pad(frames, [(0, 0)] * (frames.ndim - 1) + [(0, k_segments * hop - size)])
    segments = frames.reshape(lead + (n, k_segments, hop))
    out = None
    for k in range(k_segments):
        part = segments[..., :, k, :].reshape(lead + (n * hop,))
        part = xp.pad(part, [(0, 0)] * len(lead) + [(k * hop, (k_segments - 1 - k) * hop)])
        out = part if out is None else out + part
    return out[..., :total]


def rotate_phases(xp: Any, x: Any, phase: Any, frame_length: int, hop: int, window: Any) -> Any:
    """STFT (centred, zero-padded) -> multiply bins by ``exp(i * phase)`` -> ISTFT.

    ``x`` is ``(*lead, C, T)``; ``phase`` broadcasts to ``(*lead, C, F)`` with
    ``F = frame_length // 2 + 1`` and is shared by all frames. The inverse is a
    windowed overlap-add divided by the summed squared window, so a zero phase
    reconstructs ``x`` to rounding error. Output has ``x``'s shape and dtype.
    NumPy computes in float64, JAX in float32.
    """
    length = x.shape[-1]
    _checks.check_frame_fits(length, frame_length)
    pad, n_frames, total = _checks.stft_geometry(length, frame_length, hop)
    w = _checks.stft_window(window, frame_length)
    wss = overlap_add(np, np.broadcast_to(w * w, (n_frames, frame_length)), hop, total)
    inv = np.where(wss > 1e-10, 1.0 / np.maximum(wss, 1e-10), 0.0)

    work = np.float64 if xp is np else (x.dtype if xp.issubdtype(x.dtype, xp.floating) else xp.float32)
    xw = x.astype(work)
    padded = xp.pad(xw, [(0, 0)] * (x.ndim - 1) + [(pad, total - length - pad)])
    index = np.arange(n_frames)[:, None] * hop + np.arange(frame_length)[None, :]
    wa = xp.asarray(w, dtype=work)
    spec = xp.fft.rfft(padded[..., index] * wa, axis=-1)          # (*lead, C, n, F)
    lead_c = x.shape[:-1]
    bins = frame_length // 2 + 1
    ph = per_item(xp, phase, lead_c + (bins,), "phase").astype(work)
    spec = spec * xp.exp(1j * ph)[..., None, :]
    frames = xp.fft.irfft(spec, n=frame_length, axis=-1) * wa
    y = overlap_add(xp, frames, hop, total) * xp.asarray(inv, dtype=work)
    return _finish(xp, y[..., pad : pad + length].astype(x.dtype))


def phase(xp: Any, tree: AudioTree, phase_values: Any, *, hop_factor: float, frame_length: int,
          window: Any, keep_lufs: bool, name: str) -> AudioTree:
    hop = _checks.stft_hop(frame_length, hop_factor)
    _checks.check_keep_lufs(keep_lufs)
    x = waveform(xp, tree, name)
    if isinstance(window, list):
        window = tuple(window)
    y = _op(xp, rotate_phases, (2, 3, 4))(x, phase_values, int(frame_length), hop, window)
    keep = LUFS_FIELDS if keep_lufs else ()
    return tree.replace_audio(keep=keep, waveform=y)
