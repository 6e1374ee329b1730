"""Synthetic audio corpora for the demo, the test suite and the benchmarks.

Nothing is downloaded: every file is synthesised from a seed and encoded with
soundfile. Three groups shaped like real corpora:

* ``speech``: voiced, formant-filtered pulse trains with pauses;
* ``music``: chords of harmonic tones with slow amplitude envelopes;
* ``effects``: noise bursts and clicks separated by silence.

Every group mixes formats (WAV, FLAC, MP3, OGG/Vorbis), sample rates
(16 to 48 kHz) and channel counts, and files contain near-silent stretches so
loudness-based excerpt selection has something to do.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["CorpusSpec", "synthesize", "write_corpus", "DEMO_SPEC"]

GROUPS = ("speech", "music", "effects")
_FORMATS = (("wav", "WAV", "PCM_16"), ("flac", "FLAC", "PCM_16"), ("mp3", "MP3", "MPEG_LAYER_III"), ("ogg", "OGG", "VORBIS"))
_RATES = (16_000, 22_050, 44_100, 48_000)


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """How many files per group and how long they are (seconds)."""

    files_per_group: int = 12
    min_seconds: float = 1.0
    max_seconds: float = 12.0
    formats: Sequence[str] = ("wav", "flac", "mp3", "ogg")
    rates: Sequence[int] = _RATES
    seed: int = 0
    long_fraction: float = 0.0  # fraction of files drawn from [long_min, long_max]
    long_min: float = 30.0
    long_max: float = 120.0


# Files are at least 3.5 s, so the demo's 3 s excerpts never need padding.
DEMO_SPEC = CorpusSpec(files_per_group=10, min_seconds=3.5, max_seconds=10.0)


def _envelope(n: int, rate: int, rng: np.random.Generator, silence_fraction: float) -> np.ndarray:
    """A gate of loud segments and near-silent gaps, ramped to avoid clicks."""
    env = np.zeros(n, dtype=np.float32)
    pos = 0
    while pos < n:
        loud = int(rng.uniform(0.3, 1.5) * rate)
        quiet = int(rng.uniform(0.1, 1.0) * rate * silence_fraction / max(1e-3, 1 - silence_fraction))
        end = min(n, pos + loud)
        env[pos:end] = 1.0
        pos = end + quiet
    ramp = max(1, int(0.01 * rate))
    kernel = np.ones(ramp, dtype=np.float32) / ramp
    return np.convolve(env, kernel, mode="same").astype(np.float32)


def synthesize(group: str, seconds: float, rate: int, channels: int, rng: np.random.Generator) -> np.ndarray:
    """One signal of ``group``; returns float32 ``(frames, channels)`` in [-1, 1]."""
    n = max(1, int(round(seconds * rate)))
    t = np.arange(n, dtype=np.float64) / rate
    if group == "speech":
        f0 = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t))
        phase = 2 * np.pi * np.cumsum(f0) / rate
        pulses = np.sign(np.sin(phase)) * 0.5
        sig = np.zeros(n)
        for formant in rng.uniform([500, 1200, 2400], [900, 1800, 3200]):
            sig += np.sin(2 * np.pi * formant * t) * pulses
        sig *= 0.2
        env = _envelope(n, rate, rng, silence_fraction=0.3)
    elif group == "music":
        root = rng.uniform(110, 330)
        sig = np.zeros(n)
        for ratio in (1.0, 1.25, 1.5, 2.0):
            for harmonic in (1, 2, 3):
                sig += np.sin(2 * np.pi * root * ratio * harmonic * t + rng.uniform(0, 2 * np.pi)) / (harmonic * 4)
        sig *= 0.3 * (0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(0.1, 0.5) * t))
        env = _envelope(n, rate, rng, silence_fraction=0.2)
    elif group == "effects":
        sig = rng.standard_normal(n) * 0.25
        env = _envelope(n, rate, rng, silence_fraction=0.6)
    else:
        raise ValueError(f"Unknown group {group!r}; use one of {GROUPS}.")
    # Near-silence, not digital zero, in the gaps: like a real room.
    floor = rng.standard_normal(n) * 1e-4
    mono = (sig * env + floor).astype(np.float32)
    if channels == 1:
        return mono[:, None]
    spread = np.stack([mono * (1 - 0.2 * c / max(channels - 1, 1)) for c in range(channels)], axis=1)
    return np.clip(spread, -1, 1).astype(np.float32)


def write_corpus(root: str | os.PathLike, spec: CorpusSpec = CorpusSpec(), groups: Sequence[str] = GROUPS) -> dict[str, Path]:
    """Writes ``spec.files_per_group`` files per group under ``root/<group>/``.

    Deterministic for a given ``spec``. Returns ``{group: folder}``.
    """
    import soundfile

    root = Path(root)
    folders = {}
    for g_index, group in enumerate(groups):
        folder = root / group
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([spec.seed, g_index])
        for i in range(spec.files_per_group):
            ext = spec.formats[i % len(spec.formats)]
            _, fmt, subtype = next(f for f in _FORMATS if f[0] == ext)
            rate = int(spec.rates[(i // len(spec.formats) + g_index) % len(spec.rates)])
            channels = 1 + (i + g_index) % 2
            if spec.long_fraction and rng.uniform() < spec.long_fraction:
                seconds = rng.uniform(spec.long_min, spec.long_max)
            else:
                seconds = rng.uniform(spec.min_seconds, spec.max_seconds)
            data = synthesize(group, seconds, rate, channels, rng)
            path = folder / f"{group}_{i:03d}.{ext}"
            soundfile.write(path, data, rate, format=fmt, subtype=subtype)
        folders[group] = folder
    return folders
