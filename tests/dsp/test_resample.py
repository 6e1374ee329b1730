"""Tests for audiotree.dsp.resample (soxr) and audiotree.dsp.resample_jax (polyphase sinc)."""

from __future__ import annotations

import numpy as np
import pytest

from audiotree.dsp.resample import resample, resampled_length
from factories import tones

PAIRS = [(44100, 48000), (48000, 16000), (16000, 44100)]




def test_resample_package_reexport():
    import audiotree.dsp as dsp

    assert dsp.resample is resample


# --------------------------------------------------------------------------
# soxr path
# --------------------------------------------------------------------------

@pytest.mark.parametrize("old_sr, new_sr", PAIRS + [(8000, 22050), (22050, 8000)])
@pytest.mark.parametrize("length", [0, 1, 2, 3, 100, 1001, 44100])
def test_soxr_output_length_is_floor(old_sr, new_sr, length):
    x = np.ones((2, length), np.float32)
    y = resample(x, old_sr, new_sr)
    assert y.shape == (2, length * new_sr // old_sr)
    assert y.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int32])
def test_soxr_keeps_dtype(dtype):
    x = (tones(44100, 0.1, [440.0]) * 1000).astype(dtype)
    y = resample(x, 44100, 22050)
    assert y.dtype == dtype and y.shape == (1, 2205)


def test_soxr_other_dtypes_become_float32():
    y = resample(np.zeros((2, 100), np.float16), 16000, 8000)
    assert y.dtype == np.float32 and y.shape == (2, 50)


def test_soxr_is_accurate_on_tones():
    x = tones(44100, 1.0, [100.0, 1000.0, 15000.0])
    y = resample(x, 44100, 48000)
    ref = tones(48000, 1.0, [100.0, 1000.0, 15000.0])
    np.testing.assert_allclose(y[:, 500:-500], ref[:, 500:-500], atol=1e-3)


def test_soxr_axis_handling():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4410, 2)).astype(np.float32)
    y = resample(x, 44100, 16000, axis=1)
    assert y.shape == (3, 1600, 2) and y.flags.c_contiguous
    for i in range(3):
        for c in range(2):
            np.testing.assert_allclose(y[i, :, c], resample(x[i, :, c], 44100, 16000), atol=1e-6)
    # (..., C, T) with the default axis=-1 and negative axes
    z = resample(np.moveaxis(x, 1, -1), 44100, 16000)
    np.testing.assert_allclose(z, np.moveaxis(y, 1, -1), atol=1e-6)
    np.testing.assert_allclose(resample(x, 44100, 16000, axis=-2), y, atol=1e-6)
    with pytest.raises(ValueError):
        resample(x, 44100, 16000, axis=3)


def test_soxr_frames_channels_fast_path():
    rng = np.random.default_rng(1)
    frames = rng.standard_normal((48000, 2)).astype(np.float32)  # decoder layout
    y = resample(frames, 48000, 44100, axis=0)
    assert y.shape == (44100, 2) and y.dtype == np.float32 and y.flags.c_contiguous
    np.testing.assert_allclose(y, resample(frames.T, 48000, 44100).T, atol=1e-6)
    # a non-contiguous (frames, channels) view is handled too
    np.testing.assert_allclose(resample(frames.T.copy().T, 48000, 44100, axis=0), y, atol=1e-6)


def test_soxr_identity_at_equal_rates():
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    assert resample(x, 16000, 16000) is x
    assert resample(x, 16000, 16000, output_length=5) is x
    np.testing.assert_array_equal(resample(x, 16000, 16000, output_length=7)[:, 5:], 0)
    np.testing.assert_array_equal(resample(x, 16000, 16000, output_length=3), x[:, :3])


def test_soxr_output_length_pads_and_trims():
    x = tones(48000, 0.5, [440.0, 880.0])
    default = resample(x, 48000, 16000)
    longer = resample(x, 48000, 16000, output_length=default.shape[-1] + 50)
    shorter = resample(x, 48000, 16000, output_length=100)
    assert longer.shape == (2, default.shape[-1] + 50) and shorter.shape == (2, 100)
    np.testing.assert_array_equal(longer[:, : default.shape[-1]], default)
    np.testing.assert_array_equal(longer[:, default.shape[-1] + 2:], 0)
    np.testing.assert_array_equal(shorter, default[:, :100])
    with pytest.raises(ValueError):
        resample(x, 48000, 16000, output_length=-1)


@pytest.mark.parametrize("bad", [0, -16000, 16000.5, "16000", None, True, float("nan")])
def test_soxr_rejects_bad_rates(bad):
    x = np.zeros((1, 100), np.float32)
    with pytest.raises(ValueError):
        resample(x, bad, 16000)
    with pytest.raises(ValueError):
        resample(x, 16000, bad)


def test_soxr_rejects_bad_quality():
    with pytest.raises(ValueError):
        resample(np.zeros(10, np.float32), 16000, 8000, quality="best")


# --------------------------------------------------------------------------
# JAX polyphase resampler
# --------------------------------------------------------------------------

jax = pytest.importorskip("jax")
from audiotree.dsp.resample_jax import polyphase_kernel, resample_jax  # noqa: E402

#: Max abs difference to soxr HQ on tones up to 0.8 of the lower Nyquist,
#: 50 ms away from the edges (measured ~1e-4 at the highest tone, ~1e-5 below).
JAX_SOXR_TOL = 5e-4


@pytest.mark.parametrize("old_sr, new_sr", PAIRS)
def test_jax_matches_soxr_on_tones(old_sr, new_sr):
    nyquist = min(old_sr, new_sr) / 2
    freqs = [60.0, 440.0, 1234.5, 0.3 * nyquist, 0.6 * nyquist, 0.8 * nyquist]
    x = tones(old_sr, 1.0, freqs)
    ours = np.asarray(resample_jax(x, old_sr, new_sr))
    theirs = resample(x, old_sr, new_sr)
    assert ours.shape == theirs.shape == (len(freqs), new_sr)
    edge = new_sr // 20
    assert np.abs(ours - theirs)[:, edge:-edge].max() < JAX_SOXR_TOL
    # and both are close to the analytic tone
    truth = tones(new_sr, 1.0, freqs)
    assert np.abs(ours - truth)[:, edge:-edge].max() < JAX_SOXR_TOL


def test_jax_jit_batch_and_dtype():
    x = tones(44100, 0.25, [440.0, 3000.0, 5000.0, 7000.0]).reshape(2, 2, -1)
    direct = resample_jax(x, 44100, 48000)
    jitted = jax.jit(lambda a: resample_jax(a, 44100, 48000))(x)
    assert direct.shape == (2, 2, 12000) and direct.dtype == np.float32
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(direct), atol=1e-6)
    flat = resample_jax(x.reshape(4, -1), 44100, 48000)
    np.testing.assert_allclose(np.asarray(flat).reshape(2, 2, -1), np.asarray(direct), atol=1e-6)
    vmapped = jax.vmap(lambda a: resample_jax(a, 44100, 48000))(x)
    np.testing.assert_allclose(np.asarray(vmapped), np.asarray(direct), atol=1e-6)


def test_jax_lengths_full_and_output_length():
    x = np.zeros((3, 1001), np.float32)
    floor_len, ceil_len = 1001 * 160 // 441, -(-1001 * 160 // 441)
    assert floor_len != ceil_len
    assert resample_jax(x, 44100, 16000).shape == (3, floor_len)
    assert resample_jax(x, 44100, 16000, full=True).shape == (3, ceil_len)
    assert resample_jax(x, 44100, 16000, output_length=ceil_len).shape == (3, ceil_len)
    assert resample_jax(x, 44100, 16000, output_length=0).shape == (3, 0)
    assert resample_jax(np.zeros((2, 0), np.float32), 44100, 16000).shape == (2, 0)
    assert resampled_length(1001, 44100, 16000, full=True) == ceil_len
    with pytest.raises(ValueError):
        resample_jax(x, 44100, 16000, output_length=ceil_len + 1)
    with pytest.raises(ValueError):
        resample_jax(x, 44100, 16000, output_length=-1)
    with pytest.raises(ValueError):
        resample_jax(x, 44100, 16000, output_length=10, full=True)
    with pytest.raises(ValueError):
        resample_jax(x, 0, 16000)
    with pytest.raises(ValueError):
        resample_jax(x, 44100, 16000, rolloff=1.5)


def test_jax_output_length_is_a_prefix():
    x = tones(16000, 0.3, [440.0])
    full = np.asarray(resample_jax(x, 16000, 44100, full=True))
    part = np.asarray(resample_jax(x, 16000, 44100, output_length=1000))
    np.testing.assert_allclose(part, full[:, :1000], atol=1e-6)


def test_jax_identity_and_dc():
    x = tones(16000, 0.1, [440.0])
    np.testing.assert_array_equal(np.asarray(resample_jax(x, 16000, 16000)), x)
    dc = np.full((1, 4410), 0.5, np.float32)
    y = np.asarray(resample_jax(dc, 44100, 48000))
    np.testing.assert_allclose(y[:, 200:-200], 0.5, atol=1e-5)


def test_jax_kernel_structure_and_anti_aliasing():
    kernel, up, down, pad = polyphase_kernel(44100, 48000)
    assert (up, down) == (160, 147) and kernel.dtype == np.float64
    np.testing.assert_allclose(kernel.sum(axis=1), 1.0, atol=1e-12)  # unit DC gain per phase
    # a 12 kHz tone is above the 8 kHz Nyquist of the output: it must be removed
    x = tones(48000, 0.5, [12000.0], amp=1.0)
    y = np.asarray(resample_jax(x, 48000, 16000))
    assert np.abs(y[:, 400:-400]).max() < 1e-3
