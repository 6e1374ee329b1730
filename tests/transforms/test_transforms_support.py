"""Shared helpers for the transform tests (no tests here).

Also hosts module-level custom transforms and codecs, so they are importable by
qualified name: that is what the standard ``pickle`` (and spawned Grain
workers) need.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import audiotree.transforms as T
import audiotree.transforms.jax as TJ
from audiotree.core import AudioTree
from audiotree.transforms import kernels as NK
from audiotree.transforms.base import map_transform, random_transform
from audiotree.transforms.jax import kernels as JK

SR = 8000
NAMESPACES = {"numpy": T, "jax": TJ}
KERNELS = {"numpy": NK, "jax": JK}


def make_tree(batch: int = 3, channels: int = 2, samples: int = 4096, *, sr: int = SR, seed: int = 0,
              derived: bool = True, amplitude: float = 0.1) -> AudioTree:
    """Noise with every field populated (derived fields fake but well-shaped)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((batch, channels, samples)) * amplitude).astype(np.float32)
    tree = AudioTree.create(
        x,
        sr,
        pitch=np.arange(batch, dtype=np.float32) + 60,
        extras={"label": np.arange(batch, dtype=np.int32), "name": [f"item{i}" for i in range(batch)]},
        filepath=[f"/data/f{i}.wav" for i in range(batch)],
        offset=np.arange(batch, dtype=np.float64) * 0.5,
    )
    if derived:
        tree = tree.replace(
            lufs=np.linspace(-30, -20, batch).astype(np.float32),
            lufs_windows=np.tile(np.linspace(-30, -20, batch, dtype=np.float32)[:, None], (1, 3)),
            codes=np.ones((batch, 4, 5), dtype=np.int32),
            latents=np.ones((batch, 8, 5), dtype=np.float32),
        )
    return tree


def as_backend(tree: AudioTree, backend: str) -> AudioTree:
    """The same tree with JAX array leaves (for ``backend == "jax"``); strings untouched."""
    if backend == "numpy":
        return tree

    def convert(x):
        return jnp.asarray(x) if isinstance(x, np.ndarray) else x

    return jax.tree.map(convert, tree)


def new_rng(backend: str, seed: int = 0):
    return np.random.default_rng(seed) if backend == "numpy" else jax.random.key(seed)


def arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def apply(transform, element, backend: str, seed: int = 0):
    """Applies a random or map transform with the backend's kind of rng."""
    if isinstance(transform, T.base.RandomTransform):
        return transform.random_map(element, new_rng(backend, seed))
    return transform.map(element)


def item_gain_db(before: AudioTree, after: AudioTree) -> np.ndarray:
    """Per-item gain in dB recovered from the waveform energy."""
    a = (arr(before.waveform) ** 2).sum(axis=(-2, -1))
    b = (arr(after.waveform) ** 2).sum(axis=(-2, -1))
    return 10 * np.log10(b / a)


@pytest.fixture(params=["numpy", "jax"])
def backend(request) -> str:
    return request.param


# ------------------------------------------------------- custom transforms
@random_transform
def random_crop(audio_tree: AudioTree, rng, samples: int = 100) -> AudioTree:
    """A shape-changing random transform (for the prob < 1 guard)."""
    return audio_tree.replace(waveform=audio_tree.waveform[..., :samples])


@random_transform
def add_offset(audio_tree: AudioTree, rng, value: float, scale: float = 1.0) -> AudioTree:
    """Adds ``value * scale`` to the waveform (``value`` is required)."""
    return audio_tree.replace(waveform=audio_tree.waveform + value * scale)


@map_transform
def double(audio_tree: AudioTree) -> AudioTree:
    """Multiplies the waveform by 2."""
    return audio_tree.replace_audio(waveform=audio_tree.waveform * 2)


def suffix_aug(path: list) -> str:
    """A picklable callable output_key."""
    return f"{path[-1]}_aug"


class SumCodec:
    """A toy codec: codes are the per-channel sums, latents the per-channel means."""

    def __repr__(self) -> str:
        return "SumCodec()"

    def encode(self, audio: AudioTree):
        return np.asarray(audio.waveform).sum(axis=-1).astype(np.float32)

    def encode_to_latent(self, audio: AudioTree):
        return np.asarray(audio.waveform).mean(axis=-1, keepdims=True)


def namespace(backend: str) -> types.ModuleType:
    return NAMESPACES[backend]
