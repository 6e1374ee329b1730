"""Seed derivation: how one user seed becomes the independent streams of a pipeline.

Every random choice in audiotree is a pure function of a user seed and the
position it is made at (a global item index, an epoch, a group name), never of
a global RNG or of how many workers read the data. The derivations live here,
once, so that the dataset builders, the mixer and the PyTorch samplers agree.

Streams are 31-bit (``& 0x7FFFFFFF``) because Grain seeds are signed 32-bit.

>>> derive_streams(0, None) == derive_streams(0, None)
True
>>> derive_streams(0, 5)[0] == derive_streams(0, None)[0]  # excerpt_seed leaves the order alone
True
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from audiotree.validation import is_int

__all__ = [
    "SEED_MASK",
    "check_seed",
    "derive_seed_pair",
    "derive_streams",
    "derive_group_seed",
    "epoch_rng",
]

SEED_MASK = 0x7FFFFFFF


def check_seed(name: str, seed: Any) -> int:
    """``seed`` as a non-negative ``int``; ``ValueError`` naming ``name`` otherwise."""
    if not is_int(seed) or seed < 0:
        raise ValueError(f"{name} must be a non-negative int, got {seed!r}.")
    return int(seed)


def derive_seed_pair(seed: int) -> tuple[int, int]:
    """(shuffle stream, excerpt stream) seeds from one user seed, using its full width.

    >>> a, b = derive_seed_pair(2**40)
    >>> (a, b) != derive_seed_pair(0)
    True
    """
    words = np.random.SeedSequence(int(seed)).generate_state(2, dtype=np.uint32)
    return int(words[0]) & SEED_MASK, int(words[1]) & SEED_MASK


def derive_streams(shuffle_seed: int, excerpt_seed: int | None) -> tuple[int, int]:
    """(shuffle stream, excerpt stream); ``excerpt_seed``, when given, sets the excerpt stream."""
    shuffle_stream, excerpt_stream = derive_seed_pair(shuffle_seed)
    if excerpt_seed is not None:
        excerpt_stream = derive_seed_pair(excerpt_seed)[1]
    return shuffle_stream, excerpt_stream


def derive_group_seed(base: int, name: str, role: str) -> int:
    """A seed that depends on a group's *name*, so adding groups changes nothing else.

    >>> derive_group_seed(0, "speech", "shuffle") == derive_group_seed(0, "speech", "shuffle")
    True
    """
    entropy = [int(base), zlib.crc32(name.encode("utf-8")), zlib.crc32(role.encode("utf-8"))]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0]) & SEED_MASK


def epoch_rng(seed: int, position: int) -> np.random.Generator:
    """The generator for one epoch (or block) ``position`` of a stream seeded ``seed``.

    >>> epoch_rng(3, 1).permutation(4).tolist() == epoch_rng(3, 1).permutation(4).tolist()
    True
    """
    return np.random.default_rng([int(seed), int(position)])
