"""Tests for audiotree.dsp.loudness (NumPy) and audiotree.dsp.loudness_jax (JAX).

Reference cases are the synthesisable minimum-requirement signals of EBU
Tech 3341 (1 kHz sine tones, "dBFS" = peak level of each channel's sine); an
independent oracle is libloudness (the ``loudness`` package).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.signal import sosfilt

from audiotree.dsp import loudness as L

RATES = (44100, 48000)


# --------------------------------------------------------------------------
# signal helpers
# --------------------------------------------------------------------------

def tone_segments(segments, sr, freq=1000.0, channels=2):
    """Phase-continuous sine; segments = [(dBFS, seconds), ...] -> (channels, T) float32."""
    lengths = [round(sec * sr) for _, sec in segments]
    amp = np.concatenate([np.full(n, 10.0 ** (db / 20.0)) for (db, _), n in zip(segments, lengths)])
    t = np.arange(amp.size) / sr
    x = amp * np.sin(2 * np.pi * freq * t)
    return np.repeat(x[None, :], channels, axis=0).astype(np.float32)


def colored_noise(rng, shape, sr, exponent):
    """Noise with power spectrum ~ 1/f**exponent (1 = pink, 2 = red), peak 0.5."""
    white = rng.standard_normal(shape)
    spec = np.fft.rfft(white, axis=-1)
    f = np.fft.rfftfreq(shape[-1], 1.0 / sr)
    f[0] = f[1]
    x = np.fft.irfft(spec / f ** (exponent / 2.0), n=shape[-1], axis=-1)
    x -= x.mean(axis=-1, keepdims=True)
    return 0.5 * x / np.abs(x).max(axis=(-2, -1), keepdims=True)


def program_batch(sr, seconds=3.0, seed=0):
    """(4, 2, T) float32: pink noise, red noise, fading pink noise, tone mix with pauses."""
    rng = np.random.default_rng(seed)
    t_len = round(seconds * sr)
    t = np.arange(t_len) / sr
    pink = colored_noise(rng, (2, t_len), sr, 1.0)
    red = colored_noise(rng, (2, t_len), sr, 2.0)
    fading = colored_noise(rng, (2, t_len), sr, 1.0) * np.geomspace(1.0, 10 ** (-40 / 20), t_len)
    notes = (0.2 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 659.3 * t + 1.0)
             + 0.05 * np.sin(2 * np.pi * 3520 * t)) * (np.sin(2 * np.pi * 0.7 * t) > -0.3)
    music = np.stack([notes, 0.8 * np.roll(notes, 37)])
    return np.stack([pink, red, fading, music]).astype(np.float32)


def mean_square_loudness(ms):
    return -0.691 + 10 * np.log10(ms)


def reference_integrated(power, sr):
    """Literal BS.1770-4 gating, one block at a time, in the loudness domain (1-D power)."""
    block, step = round(0.4 * sr), round(0.1 * sr)
    blocks = [power[s:s + block].mean() for s in range(0, power.size - block + 1, step)]
    loud = [mean_square_loudness(z) if z > 0 else -np.inf for z in blocks]
    kept = [z for z, l in zip(blocks, loud) if l > -70.0]
    if not kept:
        return -np.inf
    rel = mean_square_loudness(np.mean(kept)) - 10.0
    kept = [z for z, l in zip(blocks, loud) if l > -70.0 and l > rel]
    return mean_square_loudness(np.mean(kept)) if kept else -np.inf


# --------------------------------------------------------------------------
# K-weighting
# --------------------------------------------------------------------------

# ITU-R BS.1770-4 Annex 1, Table 1 (shelf) and Table 2 (RLB high-pass), 48 kHz.
BS1770_TABLE_48K = np.array([
    [1.53512485958697, -2.69169618940638, 1.19839281085285, 1.0, -1.69065929318241, 0.73248077421585],
    [1.0, -2.0, 1.0, 1.0, -1.99004745483398, 0.99007225036621],
])


def test_k_weighting_48k_reproduces_bs1770_tables():
    sos = L.k_weighting_sos(48000)
    assert sos.shape == (2, 6) and sos.dtype == np.float64
    np.testing.assert_allclose(sos, BS1770_TABLE_48K, rtol=0, atol=1e-12)


def test_k_weighting_sos_is_cached_and_read_only():
    a = L.k_weighting_sos(44100)
    with pytest.raises(ValueError):
        a[0, 0] = 0.0
    np.testing.assert_array_equal(a, L.k_weighting_sos(44100))


@pytest.mark.parametrize("sr", [16000, 22050, 44100, 88200, 96000, 192000])
def test_k_weighting_other_rates_follow_the_analog_response(sr):
    from scipy.signal import sosfreqz

    freqs = np.array([20.0, 38.0, 100.0, 997.0, 1681.0, 3000.0, 6000.0])
    _, h48 = sosfreqz(BS1770_TABLE_48K, worN=freqs, fs=48000)
    _, h = sosfreqz(L.k_weighting_sos(sr), worN=freqs, fs=sr)
    db48, db = 20 * np.log10(np.abs(h48)), 20 * np.log10(np.abs(h))
    # bilinear warping only matters far from DC and at low rates
    tol = 0.08 if sr < 44100 else 0.02
    np.testing.assert_allclose(db, db48, atol=tol)
    # a stable filter with a 1 kHz gain of ~ +0.69 dB (what -0.691 compensates)
    assert np.all(np.abs(np.roots([1.0, *L.k_weighting_sos(sr)[1, 4:]])) < 1)
    assert abs(db[3] - 0.691) < 0.06


def test_k_weighted_power_matches_per_channel_filtering():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 4000)).astype(np.float32)
    p = L.k_weighted_power(x, 48000)
    assert p.shape == (2, 4000) and p.dtype == np.float64
    sos = np.array(L.k_weighting_sos(48000))
    weights = [1.0, 1.0, 1.0, 1.41, 1.41]
    for b in range(2):
        expected = sum(w * sosfilt(sos, x[b, c].astype(np.float64)) ** 2 for c, w in enumerate(weights))
        np.testing.assert_allclose(p[b], expected, rtol=1e-9, atol=1e-12 * expected.max())


def test_k_weighted_power_sums_channels_in_place_without_touching_the_input():
    # The weighted sum is accumulated into the filter's own output buffer: the caller's
    # float64 audio (which the filter could alias) must come back unchanged, and
    # mono power is exactly the squared K-filter output (weight 1).
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4800)) * 0.1
    before = x.copy()
    p = L.k_weighted_power(x, 48000)
    np.testing.assert_array_equal(x, before)
    sos = np.array(L.k_weighting_sos(48000))
    np.testing.assert_allclose(L.k_weighted_power(x[:1], 48000), sosfilt(sos, x[0]) ** 2, rtol=1e-9, atol=1e-15)
    expected = sum(sosfilt(sos, x[c]) ** 2 for c in range(3))
    np.testing.assert_allclose(p, expected, rtol=1e-9, atol=1e-15)
    lufs, windows = L.measure(x, 48000)
    np.testing.assert_array_equal(x, before)


# --------------------------------------------------------------------------
# EBU Tech 3341 minimum requirements (integrated loudness, +-0.1 LU)
# --------------------------------------------------------------------------

TECH3341_INTEGRATED = {
    "case1_-23dBFS": ([(-23.0, 20.0)], -23.0),
    "case2_-33dBFS": ([(-33.0, 20.0)], -33.0),
    "case3_relative_gate": ([(-36.0, 10.0), (-23.0, 60.0), (-36.0, 10.0)], -23.0),
    "case4_absolute_gate": ([(-72.0, 10.0), (-36.0, 10.0), (-23.0, 60.0), (-36.0, 10.0), (-72.0, 10.0)], -23.0),
    "case5_relative_gate_inclusion": ([(-26.0, 20.0), (-20.0, 20.1), (-26.0, 20.0)], -23.0),
}


@pytest.mark.parametrize("sr", RATES)
@pytest.mark.parametrize("case", sorted(TECH3341_INTEGRATED))
def test_tech3341_stereo_cases(case, sr):
    segments, expected = TECH3341_INTEGRATED[case]
    x = tone_segments(segments, sr)
    assert L.integrated_loudness(x, sr) == pytest.approx(expected, abs=0.1)
    lufs, _ = L.measure(x, sr)
    assert lufs.dtype == np.float32 and lufs.shape == ()
    assert float(lufs) == pytest.approx(expected, abs=0.1)


@pytest.mark.parametrize("sr", RATES)
def test_tech3341_case6_five_channels(sr):
    # L, R at -28 dBFS, C at -24 dBFS, Ls, Rs at -30 dBFS -> -23.0 LUFS
    levels = [-28.0, -28.0, -24.0, -30.0, -30.0]
    x = np.concatenate([tone_segments([(db, 20.0)], sr, channels=1) for db in levels])
    assert L.integrated_loudness(x, sr) == pytest.approx(-23.0, abs=0.1)
    # without the 1.41 surround weights it would read ~ -23.8
    assert L.integrated_loudness(x[:3], sr) < -24.0


@pytest.mark.parametrize("sr", RATES)
def test_tech3341_short_term_and_momentary_windows(sr):
    # Tech 3341 case 9 style: -20 / -30 dBFS alternating 1.34 s / 1.66 s; every
    # 3 s window holds one period -> short-term -23.0 LUFS.
    x = tone_segments([(-20.0, 1.34), (-30.0, 1.66)] * 5, sr)
    _, short_term = L.measure(x, sr, window_sec=3.0, hop_sec=0.1)
    assert short_term.shape == ((x.shape[-1] - 3 * sr) // round(0.1 * sr) + 1,)
    np.testing.assert_allclose(short_term, -23.0, atol=0.1)
    # momentary: -20 / -30 dBFS alternating 0.18 s / 0.22 s -> every 400 ms window at -23.0
    x = tone_segments([(-20.0, 0.18), (-30.0, 0.22)] * 25, sr)
    _, momentary = L.measure(x, sr, window_sec=0.4, hop_sec=0.1)
    np.testing.assert_allclose(momentary[1:], -23.0, atol=0.1)


def test_absolute_gate():
    sr = 48000
    assert L.integrated_loudness(tone_segments([(-69.0, 2.0)], sr), sr) == pytest.approx(-69.0, abs=0.1)
    assert L.integrated_loudness(tone_segments([(-71.0, 2.0)], sr), sr) == -np.inf
    # 5 s at -71 dBFS then 1 s at -60 dBFS: the -71 blocks fail only the absolute
    # gate (the relative one alone would keep them and read about -65 LUFS)
    x = tone_segments([(-71.0, 5.0), (-60.0, 1.0)], sr)
    got = L.integrated_loudness(x, sr)
    assert got == pytest.approx(reference_integrated(L.k_weighted_power(x, sr), sr), abs=1e-9)
    assert -61.0 < got < -60.0


@pytest.mark.parametrize("sr", [22050, 44100])
def test_vectorised_gating_matches_literal_definition(sr):
    x = program_batch(sr, seconds=4.0, seed=11)
    x[3] *= 10 ** (-35 / 20)  # push the tone mix partly under the absolute gate
    power = L.k_weighted_power(x, sr)
    got = L.integrated_from_power(power, sr)
    expected = [reference_integrated(p, sr) for p in power]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_gain_shifts_loudness_exactly():
    sr = 44100
    x = program_batch(sr, seconds=2.0)
    lufs, win = L.measure(x, sr)
    gain_db = -7.5
    lufs2, win2 = L.measure(x * L.gain_db_to_linear(gain_db), sr)
    np.testing.assert_allclose(lufs2, L.shift_lufs(lufs, gain_db), atol=2e-4)
    np.testing.assert_allclose(win2, L.shift_lufs(win, gain_db), atol=2e-4)


def test_helpers():
    assert L.gain_db_to_linear(-6.0) == pytest.approx(0.501187, rel=1e-5)
    assert L.gain_db_to_linear(-np.inf) == 0.0
    assert L.shift_lufs(-np.inf, 12.0) == -np.inf
    assert L.shift_lufs(-23.0, 3.0) == pytest.approx(-20.0)
    out = L.shift_lufs(np.array([-np.inf, -30.0], np.float32), 5.0)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [-np.inf, -25.0])


# --------------------------------------------------------------------------
# windows
# --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "seconds, window_sec, hop_sec, expected_w",
    [(2.35, 0.4, None, 5), (2.35, 0.5, 0.25, 8), (2.35, 1.0, 0.3, 5), (0.39, 0.4, None, 0),
     (3.0, 3.0, None, 1), (2.35, 0.4, 0.0371, 53), (2.35, 0.4, 1.0, 2), (4.0, 3.0, 0.1, 11)],
)
def test_window_count_and_values(seconds, window_sec, hop_sec, expected_w):
    sr = 48000
    x = program_batch(sr, seconds=seconds)[:2]
    lufs, win = L.measure(x, sr, window_sec=window_sec, hop_sec=hop_sec)
    assert lufs.shape == (2,) and win.shape == (2, expected_w) and win.dtype == np.float32
    # brute force from the power
    power = L.k_weighted_power(x, sr)
    w = round(window_sec * sr)
    h = round((hop_sec if hop_sec is not None else window_sec) * sr)
    for i in range(expected_w):
        expected = mean_square_loudness(power[:, i * h:i * h + w].mean(axis=-1))
        np.testing.assert_allclose(win[:, i], expected, atol=1e-4)
    np.testing.assert_array_equal(win, L.windowed_from_power(power, sr, window_sec, hop_sec).astype(np.float32))


@pytest.mark.parametrize("kwargs", [dict(window_sec=0.3), dict(window_sec=0.399), dict(hop_sec=0.0),
                                    dict(hop_sec=-0.1), dict(hop_sec=1e-6)])
def test_window_parameter_validation(kwargs):
    x = np.zeros((2, 48000), np.float32)
    with pytest.raises(ValueError):
        L.measure(x, 48000, **kwargs)
    with pytest.raises(ValueError):
        L.windowed_from_power(np.zeros(48000), 48000, **kwargs)


def test_stationary_signal_windows_power_mean_equals_integrated():
    sr = 44100
    rng = np.random.default_rng(3)
    x = colored_noise(rng, (2, 10 * sr), sr, 1.0).astype(np.float32)
    lufs, win = L.measure(x, sr, window_sec=0.4)
    power_mean = mean_square_loudness(np.mean(10 ** ((win.astype(np.float64) + 0.691) / 10)))
    assert power_mean == pytest.approx(float(lufs), abs=0.02)


# --------------------------------------------------------------------------
# edge cases and validation
# --------------------------------------------------------------------------

def test_silence_is_minus_inf_without_warnings():
    sr = 48000
    x = np.zeros((3, 2, sr), np.float32)
    x[1, :, : sr // 2] = tone_segments([(-23.0, 0.5)], sr)  # half silent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lufs, win = L.measure(x, sr)
        short = L.measure(np.zeros((2, 100), np.float32), sr)
        tiny = L.integrated_loudness(np.full((1, sr), 1e-30), sr)
    assert lufs[0] == -np.inf and lufs[2] == -np.inf and np.isfinite(lufs[1])
    assert np.all(win[0] == -np.inf) and not np.any(np.isnan(win))
    assert short[0] == -np.inf and short[1].shape == (0,)
    assert tiny == -np.inf


@pytest.mark.parametrize("sr", RATES)
def test_short_excerpt_is_one_block_at_its_mean_square(sr):
    x = tone_segments([(-23.0, 0.25)], sr)
    power = L.k_weighted_power(x, sr)
    expected = mean_square_loudness(power.mean())
    # zero-padded to 400 ms and rescaled to keep the mean square: same thing
    padded = np.zeros(round(0.4 * sr))
    padded[: power.size] = power * padded.size / power.size
    assert L.integrated_from_power(power, sr) == pytest.approx(expected, abs=1e-9)
    assert L.integrated_from_power(padded, sr) == pytest.approx(expected, abs=1e-9)
    lufs, win = L.measure(x, sr)
    assert float(lufs) == pytest.approx(expected, abs=1e-4)
    assert float(lufs) == pytest.approx(-23.0, abs=0.2)
    assert win.shape == (0,)
    # a single sample works too
    assert np.isfinite(L.integrated_loudness(x[:, 300:301], sr))


def test_batched_equals_individual():
    sr = 44100
    x = program_batch(sr, seconds=2.0).reshape(2, 2, 2, -1)
    lufs, win = L.measure(x, sr, window_sec=0.5, hop_sec=0.25)
    assert lufs.shape == (2, 2) and win.shape[:2] == (2, 2)
    for i in range(2):
        for j in range(2):
            single, single_win = L.measure(x[i, j], sr, window_sec=0.5, hop_sec=0.25)
            assert lufs[i, j] == single
            np.testing.assert_array_equal(win[i, j], single_win)
    # integrated_loudness: float for one item, array for a batch, mono 1-D accepted
    assert isinstance(L.integrated_loudness(x[0, 0], sr), float)
    assert L.integrated_loudness(x, sr).shape == (2, 2)
    assert isinstance(L.integrated_loudness(x[0, 0, 0], sr), float)


def test_too_many_channels_and_empty_input():
    with pytest.raises(ValueError, match="channels"):
        L.measure(np.zeros((6, 48000), np.float32), 48000)
    with pytest.raises(ValueError, match="channels"):
        L.k_weighted_power(np.zeros((2, 6, 100)), 48000)
    with pytest.raises(ValueError):
        L.measure(np.zeros((2, 0), np.float32), 48000)
    with pytest.raises(ValueError):
        L.integrated_loudness(np.zeros((2, 0)), 48000)
    with pytest.raises(ValueError):
        L.integrated_from_power(np.zeros((3, 0)), 48000)
    for bad_sr in (0, -48000, 44100.5, 1000):
        with pytest.raises(ValueError):
            L.measure(np.zeros((2, 100)), bad_sr)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_raise_without_warnings(bad):
    x = np.zeros((2, 2, 48000), np.float32)
    x[1, 0, 1234] = bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="non-finite"):
            L.measure(x, 48000)
        with pytest.raises(ValueError, match="non-finite"):
            L.integrated_loudness(x, 48000)
        with pytest.raises(ValueError, match="non-finite"):
            L.integrated_from_power(np.where(np.arange(100) == 3, bad, 1.0), 48000)


# --------------------------------------------------------------------------
# independent oracle: libloudness
# --------------------------------------------------------------------------

@pytest.mark.parametrize("sr", RATES)
def test_matches_libloudness_on_noise(sr):
    loudness = pytest.importorskip("loudness")
    rng = np.random.default_rng(sr)
    t = np.arange(20 * sr) / sr
    # amplitude-modulated pink noise: spreads block loudness over many LU, so
    # libloudness's 0.1 LU histogram quantisation averages out
    x = colored_noise(rng, (2, t.size), sr, 1.0) * (0.55 + 0.45 * np.sin(2 * np.pi * 0.13 * t))
    x = x.astype(np.float32)
    ours = L.integrated_loudness(x, sr)
    theirs = loudness.integrated_loudness(np.ascontiguousarray(x.T), sr)
    assert ours == pytest.approx(theirs, abs=0.05)


# --------------------------------------------------------------------------
# JAX engine
# --------------------------------------------------------------------------

jax = pytest.importorskip("jax")
from audiotree.dsp.loudness_jax import integrated_loudness_jax, k_weighting_ir, measure_jax  # noqa: E402


@pytest.mark.parametrize("sr", [16000, 44100, 48000, 96000])
def test_jax_matches_numpy_on_program_material(sr):
    x = program_batch(sr, seconds=3.0, seed=sr)
    ref, ref_win = L.measure(x, sr, window_sec=0.5, hop_sec=0.25)
    got, got_win = measure_jax(x, sr, window_sec=0.5, hop_sec=0.25)
    assert got.dtype == np.float32 and got.shape == ref.shape and got_win.shape == ref_win.shape
    assert np.all(np.isfinite(ref))
    np.testing.assert_allclose(np.asarray(got), ref, atol=0.05)
    np.testing.assert_allclose(np.asarray(got_win), ref_win, atol=0.05)


def test_jax_impulse_response_truncation_is_negligible():
    for sr in (16000, 48000):
        ir = k_weighting_ir(sr)
        assert 0.05 <= ir.size / sr <= 0.2
        full = sosfilt(np.array(L.k_weighting_sos(sr)), np.r_[1.0, np.zeros(sr - 1)])
        np.testing.assert_allclose(ir, full[: ir.size], rtol=0, atol=1e-12)
        assert np.sum(full[ir.size:] ** 2) < 1e-12 * np.sum(full ** 2)


def test_jax_under_jit_and_vmap():
    sr = 44100
    x = program_batch(sr, seconds=2.0, seed=5)
    ref, ref_win = L.measure(x, sr)
    jitted = jax.jit(lambda a: measure_jax(a, sr))
    got, got_win = jitted(x)
    np.testing.assert_allclose(np.asarray(got), ref, atol=0.05)
    np.testing.assert_allclose(np.asarray(got_win), ref_win, atol=0.05)
    v, v_win = jax.vmap(lambda a: measure_jax(a, sr))(x)
    np.testing.assert_allclose(np.asarray(v), ref, atol=0.05)
    np.testing.assert_allclose(np.asarray(v_win), ref_win, atol=0.05)
    vi = jax.jit(jax.vmap(lambda a: integrated_loudness_jax(a, sr)))(x)
    np.testing.assert_allclose(np.asarray(vi), ref, atol=0.05)


def test_jax_gating_silence_short_and_channels():
    sr = 48000
    segments, expected = TECH3341_INTEGRATED["case4_absolute_gate"]
    x = tone_segments(segments, sr)
    assert float(integrated_loudness_jax(x, sr)) == pytest.approx(expected, abs=0.1)
    five = np.concatenate([tone_segments([(db, 2.0)], sr, channels=1)
                           for db in (-28.0, -28.0, -24.0, -30.0, -30.0)])
    assert float(integrated_loudness_jax(five, sr)) == pytest.approx(-23.0, abs=0.1)
    lufs, win = measure_jax(np.zeros((2, 2, sr), np.float32), sr)
    assert np.all(np.asarray(lufs) == -np.inf) and np.all(np.asarray(win) == -np.inf)
    short = tone_segments([(-23.0, 0.25)], sr)
    lufs, win = measure_jax(short, sr)
    assert float(lufs) == pytest.approx(float(L.measure(short, sr)[0]), abs=0.01) and win.shape == (0,)
    with pytest.raises(ValueError, match="channels"):
        measure_jax(np.zeros((6, 1000), np.float32), sr)
    with pytest.raises(ValueError):
        measure_jax(np.zeros((2, 0), np.float32), sr)
    with pytest.raises(ValueError):
        measure_jax(np.zeros((2, 1000), np.float32), sr, window_sec=0.2)


def test_jax_odd_rate_uses_reduce_window_path():
    sr = 11025  # 100 ms is 1102.5 samples: gating window is not a multiple of the step
    x = program_batch(sr, seconds=3.0, seed=9)
    ref, ref_win = L.measure(x, sr, window_sec=0.45, hop_sec=0.1)
    got, got_win = measure_jax(x, sr, window_sec=0.45, hop_sec=0.1)
    np.testing.assert_allclose(np.asarray(got), ref, atol=0.05)
    got_win = np.asarray(got_win)
    # windows over the pauses of the tone mix hold only the filter tail (below
    # -100 LUFS: float noise for a float32 engine); compare the audible ones
    audible = ref_win > -100
    np.testing.assert_array_equal(got_win > -100, audible)
    assert audible.mean() > 0.5
    np.testing.assert_allclose(got_win[audible], ref_win[audible], atol=0.05)


def test_k_filter_matches_public_sosfilt():
    """The NumPy K-filter gives scipy.signal.sosfilt's output to rounding."""
    import numpy as np
    from scipy.signal import sosfilt

    from audiotree.dsp import loudness as L

    sos = L.k_weighting_sos(44100)
    x = np.random.default_rng(5).standard_normal((3, 2, 5000)).astype(np.float32)
    want = sosfilt(np.array(sos), x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(L._k_filter(sos, x), want, rtol=0, atol=1e-10 * np.abs(want).max())


def test_metering_never_imports_scipy_signal():
    """Workers that meter must not pay for SciPy (issue 27): the meter, the streaming meter and resampling."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "import audiotree.dsp, audiotree.sources\n"
        "from audiotree.dsp import integrated_loudness, measure, resample\n"
        "from audiotree.dsp.window_meter import WindowMeter\n"
        "resample(np.zeros((4410, 1), np.float32), 44100, 16000, axis=0)\n"
        "x = np.sin(np.arange(48000) / 48000 * 2 * np.pi * 997).astype(np.float32)[None]\n"
        "measure(np.repeat(x, 2, axis=0), 48000)\n"
        "WindowMeter(48000, channels=1, window=4800).push(x.T)\n"
        "print(round(float(integrated_loudness(x, 48000)), 1))\n"
        "assert 'scipy.signal' not in sys.modules, 'scipy.signal was imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert -4.0 < float(out.stdout.strip()) < -2.0  # a full-scale 997 Hz sine is -3.01 LUFS


def test_the_scalar_gate_is_the_vectorised_gate():
    # gate_few is the per-item form of the one BS.1770 gate: it must agree with it on every input,
    # including blocks right at the absolute gate, all-silent windows and a single block.
    rng = np.random.default_rng(7)
    at_gate = L.ABSOLUTE_GATE_POWER
    cases = [[0.0], [at_gate], [at_gate * (1 + 1e-12)], [0.0] * 5, [1e-2] * 7,
             [at_gate * 0.5, at_gate * 2.0, 1e-3, 1e-4]]
    for n in (1, 3, 27, 100):
        cases.append((10.0 ** rng.uniform(-10, 0, n)).tolist())
        cases.append(np.where(rng.random(n) < 0.5, 0.0, 10.0 ** rng.uniform(-8, -1, n)).tolist())
    for blocks in cases:
        expected = float(L.gated_from_block_power(np.array(blocks)))
        got = L.gate_few(blocks)
        assert got == pytest.approx(expected, abs=1e-9) or (got == expected == -np.inf), blocks
