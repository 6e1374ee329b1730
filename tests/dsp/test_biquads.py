"""The NumPy block filter against SciPy's ``sosfilt`` (the reference it replaces in the meter)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import butter, sosfilt

from audiotree.dsp import loudness as L
from audiotree.dsp.biquads import BLOCK, ROWS, sosfilt_blocks


def _relative_error(got, want) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000, 88200, 96000, 192000])
def test_k_weighting_matches_sosfilt_at_every_rate(rate):
    sos = L.k_weighting_sos(rate)
    x = (0.3 * np.random.default_rng(rate).standard_normal((2, rate * 2 + 17))).astype(np.float32)
    got = sosfilt_blocks(sos, x)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert _relative_error(got, sosfilt(np.array(sos), x.astype(np.float64), axis=-1)) < 1e-9


@pytest.mark.parametrize("length", [0, 1, 5, BLOCK - 1, BLOCK, BLOCK + 1, BLOCK * ROWS, BLOCK * ROWS * 3 + 7, 100_000])
def test_any_length_and_leading_axes(length):
    sos = butter(6, 0.1, output="sos")  # three sections, poles near the unit circle
    x = np.random.default_rng(length).standard_normal((3, 2, length))
    got = sosfilt_blocks(sos, x)
    assert got.shape == x.shape
    if length:
        assert _relative_error(got, sosfilt(sos, x, axis=-1)) < 1e-9


def test_chunks_with_carried_state_equal_the_whole_signal():
    sos = np.array(L.k_weighting_sos(44100))
    x = np.random.default_rng(1).standard_normal((2, 50_000))
    whole = sosfilt_blocks(sos, x)
    state = np.zeros((2, 4))
    parts = []
    for cut in np.array_split(np.arange(x.shape[-1]), [1, 64, 1000, 1001, 30_000]):
        y, state = sosfilt_blocks(sos, x[:, cut], zi=state)
        parts.append(y)
    np.testing.assert_allclose(np.concatenate(parts, axis=-1), whole, rtol=0, atol=1e-10 * np.abs(whole).max())
    _, scipy_state = sosfilt(sos, x, axis=-1, zi=np.zeros((2, 2, 2)))
    # Same realisation as SciPy (transposed direct form II): the states agree too.
    np.testing.assert_allclose(state, scipy_state.transpose(1, 0, 2).reshape(2, 4), rtol=1e-9, atol=1e-12)


def test_deterministic_and_input_untouched():
    sos = L.k_weighting_sos(48000)
    x = np.random.default_rng(2).standard_normal((1, 9999)).astype(np.float32)
    before = x.copy()
    a, b = sosfilt_blocks(sos, x), sosfilt_blocks(sos, x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(x, before)


def test_rejects_bad_sections():
    with pytest.raises(ValueError, match="sections, 6"):
        sosfilt_blocks(np.ones((2, 5)), np.zeros(10))
    with pytest.raises(ValueError, match="normalised"):
        sosfilt_blocks(np.array([[1.0, 0, 0, 2.0, 0, 0]]), np.zeros(10))
