"""Randomness of a transform: one stream per leaf, and the ``prob`` mask over items.

A NumPy ``np.random.Generator`` is split into child generators, a JAX key with
``jax.random.split``; the mask comes from a second, independent stream, so
changing ``prob`` never changes the parameter draws. :func:`select_items`
keeps the transformed value only where the mask is True, field by field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from audiotree.core import ARRAY_FIELDS, AudioTree

__all__ = ["is_generator", "split_rng", "draw_mask", "mask_shape", "select_items"]


def is_generator(rng: Any) -> bool:
    return isinstance(rng, np.random.Generator)


def split_rng(rng: Any, count: int, split: bool, with_mask: bool) -> tuple[list, list]:
    """Per-leaf parameter streams and prob-mask streams (``None`` when unused)."""
    if is_generator(rng):
        n_draw = count if split else 1
        seeds = rng.integers(0, 2**63, size=n_draw, dtype=np.int64)
        mask_seeds = rng.integers(0, 2**63, size=n_draw, dtype=np.int64) if with_mask else None
        if not split:
            seeds = np.repeat(seeds, count)
            mask_seeds = None if mask_seeds is None else np.repeat(mask_seeds, count)
        streams = [np.random.Generator(np.random.PCG64(int(s))) for s in seeds]
        masks = (
            [np.random.Generator(np.random.PCG64(int(s))) for s in mask_seeds]
            if with_mask
            else [None] * count
        )
        return streams, masks
    if rng is None or not isinstance(rng, (jax.Array, np.ndarray)):
        raise TypeError(
            f"random_map needs an np.random.Generator or a JAX PRNG key, got {type(rng).__name__}."
        )
    key, mask_key = jax.random.split(rng)
    if split:
        keys = list(jax.random.split(key, count))
        mask_keys = list(jax.random.split(mask_key, count)) if with_mask else [None] * count
    else:
        keys = [key] * count
        mask_keys = [mask_key if with_mask else None] * count
    return keys, mask_keys


def draw_mask(stream: Any, prob: float, shape: tuple) -> Any:
    if is_generator(stream):
        return stream.random(shape) < prob
    return jax.random.bernoulli(stream, prob, shape)


# ============================================================== prob mask
def mask_shape(tree: AudioTree) -> tuple:
    if tree.waveform is not None:
        return tuple(np.shape(tree.waveform)[:-2])
    return (tree.batch_size,)


def is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, jax.Array))


def pick(mask: Any, new: Any, old: Any, name: str) -> Any:
    if new is None or old is None:
        return None
    if new is old:
        return new
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: pick(mask, v, old[k], f"{name}[{k!r}]") for k, v in new.items() if k in old}
    if is_array(new) and is_array(old):
        if np.shape(new) != np.shape(old):
            raise ValueError(
                f"This transform changes {name} from shape {tuple(np.shape(old))} to {tuple(np.shape(new))}; "
                "a shape-changing transform cannot use prob < 1 (use prob=1)."
            )
        extra = np.ndim(new) - np.ndim(mask)
        if extra < 0 or np.shape(new)[: np.ndim(mask)] != np.shape(mask):
            raise ValueError(f"{name} has no leading item axes {np.shape(mask)} to apply the prob mask to.")
        use_jax = any(isinstance(v, jax.Array) for v in (mask, new, old))
        xp = jax.numpy if use_jax else np
        m = xp.reshape(mask, tuple(np.shape(mask)) + (1,) * extra)
        return xp.where(m, new, old).astype(new.dtype)
    if isinstance(new, (list, str)) and isinstance(old, (list, str)):
        if new == old:
            return new
        try:
            flags = np.asarray(mask).reshape(-1)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
            raise ValueError(f"Cannot select string leaf {name} per item under jit; use prob=1.") from None
        a = [new] if isinstance(new, str) else list(new)
        b = [old] if isinstance(old, str) else list(old)
        if len(a) != len(b) or len(a) != flags.size:
            raise ValueError(f"String leaf {name} does not have one entry per item; use prob=1.")
        return [x if f else y for x, y, f in zip(a, b, flags)]
    return new


def select_items(mask: Any, new: AudioTree, old: AudioTree) -> AudioTree:
    """Per item: the field of ``new`` where ``mask`` is True, else of ``old``."""
    if new.sample_rate != old.sample_rate:
        raise ValueError(
            f"This transform changes the sample rate ({old.sample_rate} -> {new.sample_rate}); "
            "a shape-changing transform cannot use prob < 1 (use prob=1)."
        )
    updates = {f: pick(mask, getattr(new, f), getattr(old, f), f) for f in ARRAY_FIELDS}
    updates["extras"] = pick(mask, new.extras, old.extras, "extras") or {}
    updates["_metadata"] = pick(mask, new.provenance, old.provenance, "_metadata") or {}
    return dataclasses.replace(new, **updates)


# ============================================================ validation
