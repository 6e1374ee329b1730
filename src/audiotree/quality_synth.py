"""Synthetic files with known degradations, for the quality columns' tests and benchmark.

Every case is made with NumPy from a seed (resampled with soxr) and comes with
the truth its quality columns should read (:mod:`audiotree.dsp.quality`):

* ``upsampled-8k`` / ``-16k`` / ``-22k``: white noise at the lower rate,
  resampled to 44.1 kHz: ``bandwidth_hz`` is the lower rate's Nyquist;
* ``noise``, ``music``: white noise and a synthetic mix of tones whose
  frequencies reach Nyquist, native at 44.1 kHz: full band;
* ``clipped-0.3`` / ``-0.5`` / ``-0.7``: a bass-heavy mix clipped at that level
  (the true share: samples of the mix at or beyond it);
* ``dc``: the music mix plus a constant offset;
* ``white-S`` / ``pink-S`` (``S`` in 0, 10, 20, 30 dB): a voiced, speech-like
  signal with pauses, plus white or pink noise (pink: 1/f power above
  20 Hz) at that SNR over the whole file;
* ``silent-80``: 20 % of the music mix, then 80 % digital silence.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["QualityCase", "quality_cases", "RATE"]

#: The rate of every case (the upsampled ones end there).
RATE = 44_100


@dataclasses.dataclass(frozen=True)
class QualityCase:
    """One synthetic file: ``samples`` ``(n, channels)`` float32 at :data:`RATE`, and ``truth``."""

    name: str
    samples: np.ndarray
    truth: dict


def _tones(n: int, rate: int, rng: np.random.Generator, low: float, high: float, count: int, tilt: float) -> np.ndarray:
    t = np.arange(n) / rate
    out = np.zeros(n)
    for f in rng.uniform(low, high, count):
        out += (f / 1000.0) ** -tilt * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    return out


def _speechlike(n: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """A 150 Hz harmonic voice in 3 Hz syllables (half of the time voiced, half paused)."""
    t = np.arange(n) / rate
    syllable = np.sin(2 * np.pi * 3 * t)
    voice = sum(np.sin(2 * np.pi * 150 * h * t + rng.uniform(0, 2 * np.pi)) / h for h in range(1, 20))
    return voice * np.maximum(syllable, 0.0)


def _pink(n: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(n))
    return np.fft.irfft(spectrum / np.sqrt(np.maximum(np.fft.rfftfreq(n, 1.0 / rate), 20.0)), n)


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).reshape(-1, 1)


def quality_cases(seconds: float = 10.0, seed: int = 0) -> list[QualityCase]:
    """The cases (see the module), each ``seconds`` long, from ``seed``.

    >>> [c.name for c in quality_cases(1.0)][:4]
    ['upsampled-8k', 'upsampled-16k', 'upsampled-22k', 'noise']
    """
    import soxr

    rng = np.random.default_rng(seed)
    n = int(round(seconds * RATE))
    cases = []
    for low in (8_000, 16_000, 22_050):
        noise = 0.1 * rng.standard_normal(int(round(seconds * low)))
        up = soxr.resample(noise, low, RATE)
        cases.append(QualityCase(f"upsampled-{low // 1000}k", _col(up), {"bandwidth_hz": low / 2}))
    cases.append(QualityCase("noise", _col(0.1 * rng.standard_normal(n)), {"bandwidth_hz": RATE / 2}))
    music = _tones(n, RATE, rng, 60.0, 0.99 * RATE / 2, 40, 0.5)
    music *= 0.5 / np.abs(music).max()
    cases.append(QualityCase("music", _col(music), {"bandwidth_hz": RATE / 2}))
    bass = _tones(n, RATE, rng, 40.0, 400.0, 6, 0.0)
    bass *= 0.95 / np.abs(bass).max()
    for level in (0.3, 0.5, 0.7):
        share = float(np.mean(np.abs(bass) >= level))
        cases.append(QualityCase(f"clipped-{level}", _col(np.clip(bass, -level, level)), {"clip_share": share}))
    cases.append(QualityCase("dc", _col(music + 0.01), {"dc_offset": 0.01}))
    for kind in ("white", "pink"):
        for snr in (0, 10, 20, 30):
            voice = _speechlike(n, RATE, rng)
            noise = rng.standard_normal(n) if kind == "white" else _pink(n, RATE, rng)
            noise *= np.sqrt(np.mean(voice ** 2) / np.mean(noise ** 2) / 10 ** (snr / 10))
            mix = voice + noise
            cases.append(QualityCase(f"{kind}-{snr}", _col(0.3 * mix / np.abs(mix).max()), {"snr_db": float(snr)}))
    voiced = int(0.2 * n)
    silent = np.zeros(n)
    silent[:voiced] = music[:voiced]
    cases.append(QualityCase("silent-80", _col(silent), {"silence_share": 0.8}))
    return cases
