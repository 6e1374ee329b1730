"""The mel spectrogram behind the preview cards."""

from __future__ import annotations

import numpy as np
import pytest

from audiotree.dsp.spectrogram import hz_to_mel, mel_spectrogram, mel_to_hz


def test_a_tone_lands_in_its_band_at_its_level():
    rate = 16000
    t = np.arange(rate) / rate
    for hz, amplitude in ((250.0, 1.0), (1000.0, 0.5), (5000.0, 0.1)):
        spec = mel_spectrogram(amplitude * np.sin(2 * np.pi * hz * t), rate, bands=64)
        level = spec.db.mean(axis=1)
        band = int(level.argmax())
        assert spec.edges_hz[band] <= hz * 1.02 and hz <= spec.edges_hz[band + 1] * 1.02
        assert level[band] == pytest.approx(20 * np.log10(amplitude), abs=1.5)
        # Far from the tone, the bands are far below it (Hann side lobes).
        far = np.abs(np.log(spec.band_hz / hz)) > 1.0
        assert level[far].max() < level[band] - 40


def test_shape_axes_and_silence():
    rate = 8000
    x = np.zeros((2, rate // 2), np.float32)  # stereo silence, 0.5 s
    spec = mel_spectrogram(x, rate, bands=40, window_seconds=0.032)
    assert spec.db.shape[0] == 40 and spec.db.dtype == np.float32
    assert spec.db.shape[1] == len(spec.times) and np.all(np.diff(spec.times) > 0)
    assert np.all(np.diff(spec.band_hz) > 0) and np.all(np.diff(spec.edges_hz) > 0)
    assert spec.edges_hz[-1] <= rate / 2 and (spec.db == -200).all()
    # Shorter than one window: one frame, no error.
    assert mel_spectrogram(np.ones(10), rate).db.shape[1] == 1
    np.testing.assert_allclose(mel_to_hz(hz_to_mel([0.0, 700.0, 8000.0])), [0.0, 700.0, 8000.0], rtol=1e-12)


def test_low_bands_of_a_short_fft_are_never_empty():
    rate = 8000
    t = np.arange(rate) / rate
    spec = mel_spectrogram(0.5 * np.sin(2 * np.pi * 60 * t), rate, bands=96, fmin=20, window_seconds=0.016)
    assert np.isfinite(spec.db).all() and (spec.db > -200).all()


@pytest.mark.parametrize("kwargs, match", [
    ({"bands": 0}, "bands"), ({"fmin": 5000.0}, "fmin"), ({"window_seconds": 0}, "window_seconds"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mel_spectrogram(np.zeros(1000), 8000, **kwargs)
    with pytest.raises(ValueError, match="shape"):
        mel_spectrogram(np.zeros((1, 2, 3)), 8000)
