"""Mel (log-frequency) spectrograms for looking at audio.

Made for pictures (the preview page), not as model features: one short NumPy
function, a Hann-windowed STFT whose power is pooled into triangular bands
equally spaced on the mel scale (``mel = 2595 * log10(1 + f / 700)``), so low
frequencies get as much room as high ones. Deterministic; float64 inside.

Levels are in dB relative to full scale: the STFT is scaled so that a
full-scale sine (peak 1.0) reads 0 dB in the band that holds it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from audiotree.validation import is_int

__all__ = ["MelSpectrogram", "mel_spectrogram", "hz_to_mel", "mel_to_hz"]

_SILENCE_DB = -200.0  # floor for log of zero power (digital silence)


def hz_to_mel(hz):
    """Mel value(s) of frequencies in Hz (the O'Shaughnessy formula)."""
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def mel_to_hz(mel):
    """Frequencies in Hz of mel value(s); the inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


@dataclasses.dataclass(frozen=True)
class MelSpectrogram:
    """A mel spectrogram of one (mono) signal.

    Attributes:
      db: ``(bands, frames)`` float32 power in dB re full scale (``-200`` for silence).
      times: ``(frames,)`` centre of each frame in seconds from the first sample.
      band_hz: ``(bands,)`` centre frequency of each band in Hz, increasing.
      edges_hz: ``(bands + 1,)`` band boundaries for drawing (geometric midpoints).
      hop_seconds: time between frames.
    """

    db: np.ndarray
    times: np.ndarray
    band_hz: np.ndarray
    edges_hz: np.ndarray
    hop_seconds: float


def _filterbank(freqs: np.ndarray, centres_mel: np.ndarray) -> np.ndarray:
    """Triangular weights ``(bands, bins)`` on the mel axis, each row summing to 1.

    A band narrower than the bin spacing (low bands of a short FFT) would catch no
    bin at all; it takes the nearest bin instead, so no row is empty.
    """
    bins_mel = hz_to_mel(freqs)
    lower, centre, upper = centres_mel[:-2], centres_mel[1:-1], centres_mel[2:]
    rising = (bins_mel[None, :] - lower[:, None]) / (centre - lower)[:, None]
    falling = (upper[:, None] - bins_mel[None, :]) / (upper - centre)[:, None]
    weights = np.clip(np.minimum(rising, falling), 0.0, None)
    empty = weights.sum(axis=1) <= 0
    if empty.any():
        nearest = np.abs(freqs[None, :] - mel_to_hz(centre[empty])[:, None]).argmin(axis=1)
        weights[np.flatnonzero(empty), nearest] = 1.0
    return weights / weights.sum(axis=1, keepdims=True)


def mel_spectrogram(
    x,
    sample_rate: int,
    *,
    bands: int = 64,
    fmin: float = 40.0,
    fmax: float | None = None,
    window_seconds: float = 0.032,
    hop_seconds: float | None = None,
) -> MelSpectrogram:
    """Mel spectrogram of ``x``: ``(T,)`` or ``(C, T)`` (channels are averaged).

    Args:
      x: samples (float, full scale 1.0).
      sample_rate: Hz.
      bands: number of mel bands between ``fmin`` and ``fmax``.
      fmin, fmax: frequency range in Hz (``fmax`` defaults to Nyquist).
      window_seconds: Hann window length (rounded up to a power-of-two FFT).
      hop_seconds: frame step; default a quarter of the window.

    Returns:
      A :class:`MelSpectrogram`; a signal shorter than one window is zero-padded
      to one frame.

    >>> import numpy as np
    >>> t = np.arange(16000) / 16000
    >>> spec = mel_spectrogram(np.sin(2 * np.pi * 1000 * t), 16000, bands=32)
    >>> spec.db.shape[0], float(spec.band_hz[spec.db.mean(axis=1).argmax()]) // 100
    (32, 9.0)
    >>> round(float(spec.db.max()))  # a full-scale sine reads about 0 dB
    0
    """
    if not is_int(bands) or bands < 1:
        raise ValueError(f"bands must be an int >= 1, got {bands!r}.")
    rate = int(sample_rate)
    if rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate!r}.")
    nyquist = rate / 2
    fmax = nyquist if fmax is None else min(float(fmax), nyquist)
    if not 0 <= fmin < fmax:
        raise ValueError(f"Need 0 <= fmin < fmax <= sample_rate / 2, got fmin={fmin}, fmax={fmax}.")
    if not window_seconds > 0:
        raise ValueError(f"window_seconds must be > 0, got {window_seconds!r}.")
    samples = np.asarray(x, dtype=np.float64)
    if samples.ndim == 2:
        samples = samples.mean(axis=0)
    if samples.ndim != 1:
        raise ValueError(f"x must be (T,) or (C, T), got shape {np.shape(x)}.")
    window = max(8, int(round(window_seconds * rate)))
    n_fft = 1 << math.ceil(math.log2(window))
    hop = max(1, int(round((window_seconds / 4 if hop_seconds is None else hop_seconds) * rate)))
    if samples.size < window:
        samples = np.pad(samples, (0, window - samples.size))
    frames = np.lib.stride_tricks.sliding_window_view(samples, window)[::hop]
    hann = np.hanning(window + 2)[1:-1]  # no zero end points: every sample counts
    spectrum = np.fft.rfft(frames * hann, n=n_fft, axis=1)
    # A sine of peak A has |X| = A * sum(w) / 2 at its bin: scale so that it reads A.
    power = (np.abs(spectrum) * (2.0 / hann.sum())) ** 2
    freqs = np.fft.rfftfreq(n_fft, 1.0 / rate)
    centres_mel = np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), bands + 2)
    # Pool by the largest bin (not the mean) so a tone keeps its level in a wide band.
    weights = _filterbank(freqs, centres_mel)
    pooled = np.stack([(power[:, w > 0] * (w[w > 0] / w.max())).max(axis=1) for w in weights])
    with np.errstate(divide="ignore"):
        db = np.maximum(10.0 * np.log10(pooled), _SILENCE_DB)
    band_hz = mel_to_hz(centres_mel[1:-1])
    edges = np.empty(bands + 1)
    edges[1:-1] = np.sqrt(band_hz[:-1] * band_hz[1:])
    edges[0] = max(fmin, band_hz[0] ** 2 / edges[1]) if bands > 1 else fmin
    edges[-1] = min(fmax, band_hz[-1] ** 2 / edges[-2]) if bands > 1 else fmax
    edges[0] = max(edges[0], 1e-3)
    times = (np.arange(frames.shape[0]) * hop + window / 2) / rate
    return MelSpectrogram(db=db.astype(np.float32), times=times, band_hz=band_hz, edges_hz=edges,
                          hop_seconds=hop / rate)
