"""Signal and tree factories shared by the test modules (import as ``from factories import ...``).

Every test generates its own audio: these build the few signals the suite
needs (tones, noise, a chirp) and the trees and files made of them, so each
test module does not re-write its own.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np


def sine(rate: int, seconds: float, *, freq: float = 997.0, amp: float = 0.5, phase: float = 0.0,
         channels: int = 1) -> np.ndarray:
    """A sine of ``freq`` Hz, ``(channels, round(seconds * rate))`` float32 (every channel equal)."""
    t = np.arange(int(round(seconds * rate))) / rate
    x = amp * np.sin(2 * np.pi * freq * t + phase)
    return np.repeat(x[None, :], channels, axis=0).astype(np.float32)


def tones(rate: int, seconds: float, freqs: Sequence[float], *, amp: float = 0.4, phase: float = 0.3) -> np.ndarray:
    """One sine per frequency: ``(len(freqs), T)`` float32."""
    return np.concatenate([sine(rate, seconds, freq=f, amp=amp, phase=phase) for f in freqs])


def noise(shape: Sequence[int], *, seed: int = 0, amplitude: float = 0.1) -> np.ndarray:
    """White Gaussian noise of standard deviation ``amplitude``, float32."""
    return (np.random.default_rng(seed).standard_normal(tuple(shape)) * amplitude).astype(np.float32)


def chirp(frames: int, rate: int, channels: int, *, seed: int = 0) -> np.ndarray:
    """Chirp (80 Hz -> rate/5) plus white noise, ``(frames, channels)`` float32, peak < 0.8.

    Broadband and never periodic, so a misplaced seek or a wrong sample shows up.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / rate
    f1 = rate / 5
    sweep = np.sin(2 * np.pi * (80 * t + (f1 - 80) * t**2 / (2 * t[-1])))
    cols = [0.45 * np.roll(sweep, 37 * c) + 0.1 * rng.standard_normal(frames) for c in range(channels)]
    return np.clip(np.stack(cols, axis=1), -0.8, 0.8).astype(np.float32)


def noise_tree(batch: int = 3, channels: int = 2, samples: int = 800, rate: int = 8000, *, seed: int = 0,
               amplitude: float = 0.1, **fields: Any):
    """A ``(batch, channels, samples)`` noise AudioTree with provenance (``f{i}.wav``, group ``grp``)."""
    from audiotree import AudioTree

    return AudioTree.create(
        noise((batch, channels, samples), seed=seed, amplitude=amplitude), rate,
        filepath=[f"f{i}.wav" for i in range(batch)], source="grp", offset=np.arange(batch, dtype=float), **fields,
    )


def write_audio(path: str | os.PathLike, frames: np.ndarray, rate: int, *, subtype: str | None = None) -> str:
    """Writes ``(n, C)`` frames with soundfile (format from the extension); returns the path."""
    import soundfile

    soundfile.write(path, frames, rate, subtype=subtype)
    return os.fspath(path)


def tone_file(path: str | os.PathLike, *, rate: int = 16000, seconds: float = 2.0, channels: int = 1,
              freq: float = 440.0, amp: float = 0.3, subtype: str | None = None) -> str:
    """A file holding a sine tone; returns its path."""
    return write_audio(path, sine(rate, seconds, freq=freq, amp=amp, channels=channels).T, rate, subtype=subtype)
