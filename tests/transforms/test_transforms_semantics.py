"""What each transform does, its derived-field policy and its guards, in both backends."""

from __future__ import annotations

import numpy as np
import pytest

from audiotree.core import DERIVED_FIELDS
from test_transforms_support import (  # noqa: F401  (backend is a fixture)
    KERNELS,
    SR,
    apply,
    arr,
    as_backend,
    backend,
    item_gain_db,
    make_tree,
    namespace,
)


def _run(backend, transform, tree, seed=0):
    return apply(transform, as_backend(tree, backend), backend, seed)


def _present(tree):
    return {f for f in DERIVED_FIELDS if getattr(tree, f) is not None}


# ===================================================== derived-field policy
ALL = set(DERIVED_FIELDS)
LUFS = {"lufs", "lufs_windows"}
POLICY = [
    ("identity", {}, 2, ALL),
    ("mono", {}, 2, set()),
    ("stereo", {}, 1, set()),
    ("resample", {"sample_rate": 4000}, 2, set()),
    ("trim", {"length": 0.25}, 2, set()),
    ("rescale_audio", {}, 2, set()),
    ("peak_norm", {}, 2, set()),
    ("volume_change", {"min_db": -3, "max_db": 3}, 2, LUFS),
    ("volume_norm", {"min_db": -20, "max_db": -10}, 2, LUFS),
    ("invert_phase", {}, 2, LUFS),
    ("swap_stereo", {}, 2, LUFS),
    ("corrupt_phase", {}, 2, set()),
    ("corrupt_phase", {"keep_lufs": True}, 2, LUFS),
    ("shift_phase", {}, 2, set()),
    ("shift_phase", {"keep_lufs": True}, 2, LUFS),
    ("roll", {"min_seconds": 0.01, "max_seconds": 0.02}, 2, {"lufs"}),
    ("roll", {"max_seconds": 0.02, "mode": "constant"}, 2, set()),
]


@pytest.mark.parametrize("name, kwargs, channels, kept", POLICY, ids=[f"{p[0]}-{i}" for i, p in enumerate(POLICY)])
def test_derived_field_policy(name, kwargs, channels, kept, backend):
    tree = make_tree(channels=channels)
    out = _run(backend, getattr(namespace(backend), name)(**kwargs), tree)
    assert _present(out) == kept
    # non-derived labels, extras and provenance are never touched
    np.testing.assert_array_equal(arr(out.pitch), arr(tree.pitch))
    assert out.extras["name"] == tree.extras["name"]
    assert out.filepath == tree.filepath


def test_no_op_transforms_return_the_tree_itself(backend):
    ns = namespace(backend)
    mono, stereo = make_tree(channels=1), make_tree(channels=2)
    assert _run(backend, ns.identity(), stereo).waveform is not None
    for transform, tree in [
        (ns.mono(), mono),
        (ns.stereo(), stereo),
        (ns.resample(SR), stereo),
        (ns.trim(4096 / SR), stereo),
        (ns.swap_stereo(), mono),
    ]:
        t = as_backend(tree, backend)
        assert apply(transform, t, backend) is t, transform


# ================================================================ level
def test_volume_change_gain_is_exact(backend):
    tree = make_tree()
    out = _run(backend, namespace(backend).volume_change(20.0, 20.0), tree)
    np.testing.assert_allclose(arr(out.waveform), arr(tree.waveform) * 10.0, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(arr(out.lufs), arr(tree.lufs) + 20.0, atol=1e-5)
    np.testing.assert_allclose(arr(out.lufs_windows), arr(tree.lufs_windows) + 20.0, atol=1e-5)
    assert out.waveform.dtype == np.float32 and out.lufs.dtype == np.float32


def test_volume_change_draws_one_gain_per_item_in_range(backend):
    tree = make_tree(batch=32, samples=128)
    gains = item_gain_db(tree, _run(backend, namespace(backend).volume_change(-6.0, 3.0), tree))
    assert np.all(gains >= -6.0 - 1e-4) and np.all(gains <= 3.0 + 1e-4)
    assert np.std(gains) > 1.0


def test_volume_change_shifts_windows_even_without_lufs(backend):
    tree = make_tree().replace(lufs=None)
    out = _run(backend, namespace(backend).volume_change(6.0, 6.0), tree)
    assert out.lufs is None
    np.testing.assert_allclose(arr(out.lufs_windows), arr(tree.lufs_windows) + 6.0, atol=1e-5)


def test_volume_norm_measures_and_hits_the_target(backend):
    tree = make_tree(batch=3, samples=8000, derived=False)
    out = _run(backend, namespace(backend).volume_norm(-20.0, -20.0), tree)
    np.testing.assert_allclose(arr(out.lufs), -20.0, atol=1e-4)
    remeasured = out.replace(lufs=None, lufs_windows=None).replace_lufs()
    np.testing.assert_allclose(arr(remeasured.lufs), -20.0, atol=0.05)
    assert out.lufs_windows.shape[0] == 3


def test_volume_norm_trusts_cached_lufs_and_skips_silence(backend):
    tree = make_tree(batch=3)
    x = tree.waveform.copy()
    x[2] = 0.0
    tree = tree.replace(waveform=x, lufs=np.array([-30.0, -24.0, -np.inf], np.float32))
    out = _run(backend, namespace(backend).volume_norm(-20.0, -20.0), tree)
    np.testing.assert_allclose(item_gain_db(tree[:2], out[:2]), [10.0, 4.0], atol=1e-4)
    np.testing.assert_array_equal(arr(out.waveform[2]), 0.0)
    assert np.isneginf(arr(out.lufs)[2])


def test_rescale_audio_only_scales_down_loud_items(backend):
    tree = make_tree(batch=2, channels=1, samples=8, derived=False)
    x = np.zeros((2, 1, 8), np.float32)
    x[0, 0, 3], x[1, 0, 5] = 2.0, -0.5
    out = _run(backend, namespace(backend).rescale_audio(), tree.replace(waveform=x))
    np.testing.assert_allclose(arr(out.waveform[0]).max(), 1.0, atol=1e-7)
    np.testing.assert_allclose(arr(out.waveform[1]), x[1], atol=1e-7)


def test_peak_norm_sets_each_peak_to_one_and_keeps_silence(backend):
    tree = make_tree(batch=3)
    x = tree.waveform.copy()
    x[1] *= 7.0
    x[2] = 0.0
    out = _run(backend, namespace(backend).peak_norm(), tree.replace(waveform=x))
    peaks = np.abs(arr(out.waveform)).max(axis=(-2, -1))
    np.testing.assert_allclose(peaks[:2], 1.0, atol=1e-6)
    assert peaks[2] == 0.0 and np.all(np.isfinite(arr(out.waveform)))


# ============================================================ sign / channels
def test_invert_phase_negates(backend):
    tree = make_tree()
    out = _run(backend, namespace(backend).invert_phase(), tree)
    np.testing.assert_array_equal(arr(out.waveform), -arr(tree.waveform))
    np.testing.assert_array_equal(arr(out.lufs), arr(tree.lufs))


def test_swap_stereo_swaps_and_rejects_surround(backend):
    tree = make_tree(channels=2)
    out = _run(backend, namespace(backend).swap_stereo(), tree)
    np.testing.assert_array_equal(arr(out.waveform), arr(tree.waveform)[:, ::-1])
    with pytest.raises(ValueError, match="channels"):
        _run(backend, namespace(backend).swap_stereo(), make_tree(channels=3))


def test_mono_and_stereo(backend):
    ns = namespace(backend)
    tree = make_tree(channels=2)
    out = _run(backend, ns.mono(), tree)
    np.testing.assert_allclose(arr(out.waveform), arr(tree.waveform).mean(axis=1, keepdims=True), atol=1e-7)
    back = _run(backend, ns.stereo(), out.replace(waveform=np.asarray(out.waveform)))
    assert back.num_channels == 2
    np.testing.assert_array_equal(arr(back.waveform[:, 0]), arr(back.waveform[:, 1]))
    with pytest.raises(ValueError, match="channels"):
        _run(backend, ns.stereo(), make_tree(channels=3))


def test_token_only_tree_raises_a_clear_error(backend):
    tree = make_tree().replace(waveform=None)
    with pytest.raises(ValueError, match="waveform"):
        _run(backend, namespace(backend).invert_phase(), tree)


# ================================================================== time
def test_roll_kernel_matches_np_roll(backend):
    tree = make_tree(batch=3, channels=2, samples=64)
    shifts = np.array([0, 5, -7])
    kernels = KERNELS[backend]
    wrapped = kernels.roll(as_backend(tree, backend), shifts, "wrap")
    zeroed = kernels.roll(as_backend(tree, backend), shifts, "constant")
    for i, s in enumerate(shifts):
        expected = np.roll(tree.waveform[i], s, axis=-1)
        np.testing.assert_array_equal(arr(wrapped.waveform[i]), expected)
        if s > 0:
            expected[:, :s] = 0
        elif s < 0:
            expected[:, s:] = 0
        np.testing.assert_array_equal(arr(zeroed.waveform[i]), expected)
    # Rolled items lose their recorded offset (NaN); the unrolled one keeps it.
    for out in (wrapped, zeroed):
        offsets = arr(out.offset)
        assert offsets[0] == arr(tree.offset)[0] and np.isnan(offsets[1:]).all()


def test_roll_draws_whole_sample_shifts_in_range(backend):
    tree = make_tree(batch=16, channels=1, samples=256, derived=False)
    x = np.zeros_like(tree.waveform)
    x[:, :, 100] = 1.0
    out = _run(backend, namespace(backend).roll(-0.002, 0.003), tree.replace(waveform=x))  # [-16, 24] samples
    shifts = np.argmax(arr(out.waveform)[:, 0], axis=-1) - 100
    assert np.all(shifts >= -16) and np.all(shifts <= 24) and len(set(shifts.tolist())) > 3
    fixed = _run(backend, namespace(backend).roll(0.001, 0.001), tree.replace(waveform=x))
    assert np.all(np.argmax(arr(fixed.waveform)[:, 0], axis=-1) == 108)


def test_zero_roll_is_identity_on_the_audio(backend):
    tree = make_tree()
    out = _run(backend, namespace(backend).roll(), tree)
    np.testing.assert_array_equal(arr(out.waveform), arr(tree.waveform))
    np.testing.assert_array_equal(arr(out.offset), arr(tree.offset))  # nothing moved
    assert out.lufs is not None


@pytest.mark.parametrize("mode, expected", [("wrap", [0, 1, 2, 0, 1, 2, 0]), ("constant", [0, 1, 2, 0, 0, 0, 0])])
def test_trim_pads_and_cuts(mode, expected, backend):
    tree = make_tree(batch=1, channels=1, samples=3, sr=10, derived=False)
    tree = tree.replace(waveform=np.arange(3, dtype=np.float32)[None, None])
    longer = _run(backend, namespace(backend).trim(0.7, mode=mode), tree)
    np.testing.assert_array_equal(arr(longer.waveform[0, 0]), expected)
    shorter = _run(backend, namespace(backend).trim(0.2), tree)
    np.testing.assert_array_equal(arr(shorter.waveform[0, 0]), [0, 1])


def test_resample_changes_rate_and_length(backend):
    tree = make_tree(samples=4000)
    out = _run(backend, namespace(backend).resample(16000), tree)
    assert out.sample_rate == 16000 and out.samples == 8000
    assert out.filepath == tree.filepath


# ================================================================= phase
def test_phase_transforms_with_zero_amount_reconstruct(backend):
    ns = namespace(backend)
    tree = make_tree(samples=4096)
    for transform in (ns.corrupt_phase(amount=0.0, frame_length=512, hop_factor=0.25), ns.shift_phase(amount=0.0)):
        out = _run(backend, transform, tree)
        assert out.waveform.shape == tree.waveform.shape and out.waveform.dtype == np.float32
        np.testing.assert_allclose(arr(out.waveform), arr(tree.waveform), atol=1e-5)


def test_corrupt_phase_is_per_channel_and_shift_phase_is_per_item(backend):
    ns = namespace(backend)
    tree = make_tree(batch=2, channels=2, samples=4096, derived=False)
    x = tree.waveform.copy()
    x[:, 1] = x[:, 0]  # identical channels
    tree = tree.replace(waveform=x)
    corrupted = _run(backend, ns.corrupt_phase(), tree)
    assert np.max(np.abs(arr(corrupted.waveform[:, 0]) - arr(corrupted.waveform[:, 1]))) > 1e-2
    shifted = _run(backend, ns.shift_phase(), tree)
    np.testing.assert_allclose(arr(shifted.waveform[:, 0]), arr(shifted.waveform[:, 1]), atol=1e-6)
    assert np.max(np.abs(arr(shifted.waveform) - x)) > 1e-2
    energy = (arr(shifted.waveform) ** 2).sum(axis=(-2, -1)) / (x.astype(np.float64) ** 2).sum(axis=(-2, -1))
    np.testing.assert_allclose(energy, 1.0, atol=0.01)


def test_phase_transforms_need_a_full_frame(backend):
    ns = namespace(backend)
    short = make_tree(samples=1000)
    with pytest.raises(ValueError, match="frame_length"):
        _run(backend, ns.shift_phase(), short)
    with pytest.raises(ValueError, match="frame_length"):
        _run(backend, ns.corrupt_phase(frame_length=2048), short)
    assert _run(backend, ns.corrupt_phase(frame_length=256), short).samples == 1000


# ================================================================ guards
@pytest.mark.parametrize(
    "name, kwargs, match",
    [
        ("volume_change", {"min_db": 6, "max_db": 0}, "greater than"),
        ("volume_norm", {"min_db": -10, "max_db": -20}, "greater than"),
        ("volume_change", {"min_db": float("nan")}, "finite"),
        ("roll", {"min_seconds": 1, "max_seconds": 0}, "greater than"),
        ("roll", {"mode": "reflect"}, "Unknown roll mode"),
        ("corrupt_phase", {"amount": -1}, "amount"),
        ("corrupt_phase", {"hop_factor": 0.0}, "hop_factor"),
        ("corrupt_phase", {"hop_factor": 0.75}, "hop_factor"),
        ("corrupt_phase", {"frame_length": 4, "hop_factor": 0.1}, "hop of 0"),
        ("corrupt_phase", {"frame_length": 1}, "frame_length"),
        ("corrupt_phase", {"window": "no-such-window"}, "window"),
        ("corrupt_phase", {"keep_lufs": "yes"}, "keep_lufs"),
        ("shift_phase", {"amount": -0.5}, "amount"),
        ("trim", {"length": 0}, "length"),
        ("trim", {"mode": "mirror"}, "pad mode"),
        ("resample", {}, "sample_rate"),
        ("resample", {"sample_rate": -8000}, "sample_rate"),
        ("resample", {"sample_rate": 8000.5}, "sample_rate"),
    ],
)
def test_range_guards_raise_value_error(name, kwargs, match, backend):
    with pytest.raises(ValueError, match=match):
        getattr(namespace(backend), name)(**kwargs)


def test_guards_also_hold_in_the_kernels(backend):
    kernels, tree = KERNELS[backend], as_backend(make_tree(), backend)
    with pytest.raises(ValueError, match="Unknown roll mode"):
        kernels.roll(tree, np.zeros(3, int), "reflect")
    with pytest.raises(ValueError, match="sample_rate"):
        kernels.resample(tree, None)
    with pytest.raises(ValueError, match="hop_factor"):
        kernels.corrupt_phase(tree, np.zeros((3, 2, 1025)), hop_factor=0.9)
    with pytest.raises(ValueError, match="per item"):
        kernels.volume_change(tree, np.zeros(4))


def test_volume_norm_with_prob_measures_every_item(backend):
    tree = make_tree(batch=12, channels=1, samples=4000, derived=False)
    out = _run(backend, namespace(backend).volume_norm(-20.0, -20.0, prob=0.5), tree, seed=4)
    assert out.lufs is not None and out.lufs_windows is not None
    measured = arr(KERNELS[backend].ensure_lufs(as_backend(tree, backend)).lufs)
    lufs = arr(out.lufs)
    selected = np.abs(lufs + 20.0) < 1e-4
    assert 0 < selected.sum() < 12
    np.testing.assert_allclose(lufs[~selected], measured[~selected], atol=1e-5)
    np.testing.assert_array_equal(arr(out.waveform)[~selected], tree.waveform[~selected])
