"""The audio edits (downmix, gain) and the streaming window meter, in NumPy and JAX."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from audiotree.dsp.edits import apply_gain_db, downmix, gain_to_target, shift_loudness
from audiotree.dsp.loudness import integrated_loudness
from audiotree.dsp.window_meter import WindowMeter
from factories import chirp, noise, sine


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_downmix_is_the_channel_mean_on_either_axis(channels):
    frames = noise((100, channels), seed=channels)
    np.testing.assert_allclose(downmix(frames, axis=1), frames.mean(axis=1, keepdims=True), rtol=1e-6, atol=1e-7)
    batch = noise((2, channels, 50), seed=9)
    out = downmix(batch, axis=-2)
    assert out.shape == (2, 1, 50) and out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(downmix(jnp.asarray(batch), axis=-2)), out, rtol=1e-6, atol=1e-7)
    if channels == 1:
        assert downmix(frames, axis=1) is frames


def test_gain_and_loudness_shift_agree_with_measuring_again():
    x = sine(48000, 2.0, channels=2)[None] * 0.1
    lufs = np.array([integrated_loudness(x[0], 48000)], np.float32)
    gain_db = gain_to_target(np, lufs, -20.0)
    y = apply_gain_db(np, x, gain_db)
    assert y.dtype == x.dtype
    new_lufs, windows = shift_loudness(np, lufs, None, gain_db)
    assert windows is None
    assert abs(float(new_lufs[0]) - integrated_loudness(y[0], 48000)) < 0.01
    assert abs(float(new_lufs[0]) + 20.0) < 1e-4


def test_silence_is_never_boosted_and_the_cap_holds():
    gains = gain_to_target(np, np.array([-np.inf, -40.0]), -20.0, max_gain_db=6.0)
    assert gains.tolist() == [0.0, 6.0]


def test_streaming_meter_equals_metering_each_window_of_the_whole_signal():
    rate, window = 16000, 8000
    x = chirp(6 * window, rate, 2, seed=3).astype(np.float64)
    meter = WindowMeter(rate, channels=2, window=window)
    streamed = np.concatenate([meter.push(x[: 2 * window]), meter.push(x[2 * window :])])
    whole = WindowMeter(rate, channels=2, window=window).push(x)
    np.testing.assert_allclose(streamed, whole, atol=1e-4)
    assert streamed.shape == (6,) and streamed.dtype == np.float32


def test_streaming_meter_refuses_partial_windows_and_too_many_channels():
    meter = WindowMeter(16000, channels=1, window=100)
    with pytest.raises(ValueError, match="whole windows"):
        meter.push(np.zeros((150, 1)))
    with pytest.raises(ValueError, match="at most 5 channels"):
        WindowMeter(16000, channels=6, window=100)
