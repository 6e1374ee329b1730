"""NumPy vs JAX: same drawn parameters, same result; plus jit and vmap.

Each backend draws parameters in one place and hands them to a kernel of the
same name (``audiotree.transforms.kernels`` / ``audiotree.transforms.jax.kernels``).
Here the parameters are drawn once with NumPy and fed to both kernels.

Tolerances (absolute, on noise of RMS 0.1 / peaks ~0.4; measured maxima in brackets):
* exact transforms (gain, sign, channels, roll, trim, peak scaling): 1e-5  [~1e-7]
* phase transforms (STFT float64 in NumPy vs float32 in JAX): 1e-5  [~1.2e-7]
* resampling (soxr vs windowed sinc) on a 440 Hz tone with 20 ms fades: 1e-4
  [~1.6e-5]; the two filters differ more at hard signal edges (~2e-3 within
  the first and last few ms of an unfaded tone)
* volume_norm when it has to measure (IIR vs FIR meter): 0.05 LU on lufs and
  the matching gain on the waveform  [< 1e-5 LU]; with cached lufs: 1e-5
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import audiotree.transforms.jax as TJ
from audiotree.core import ARRAY_FIELDS, AudioTree
from audiotree.transforms import kernels as NK
from audiotree.transforms.jax import kernels as JK
from test_transforms_support import SR, SumCodec, arr, as_backend, make_tree

SHAPES = [(1, 1), (1, 2), (2, 2), (5, 1), (5, 2)]
NOT_TRANSFORMS = {"map_transform", "random_transform", "AudioCodec", "LatentAudioCodec"}
EXACT = 1e-5


def _items(tree):
    return tree.waveform.shape[:-2]


# name -> (draw(rng, tree) -> kwargs for the kernel, tolerance)
PARITY = {
    "identity": (lambda rng, t: {}, EXACT),
    "mono": (lambda rng, t: {}, EXACT),
    "stereo": (lambda rng, t: {}, EXACT),
    "trim": (lambda rng, t: {"length": float(rng.choice([0.25, 0.5, 0.75])), "mode": str(rng.choice(["wrap", "constant", "reflect"]))}, EXACT),
    "rescale_audio": (lambda rng, t: {}, EXACT),
    "peak_norm": (lambda rng, t: {}, EXACT),
    "volume_change": (lambda rng, t: {"gain_db": rng.uniform(-12, 12, _items(t))}, EXACT),
    "volume_norm": (lambda rng, t: {"target_lufs": rng.uniform(-30, -14, _items(t))}, EXACT),
    "invert_phase": (lambda rng, t: {}, EXACT),
    "swap_stereo": (lambda rng, t: {}, EXACT),
    "corrupt_phase": (
        lambda rng, t: {"phase": rng.uniform(-np.pi, np.pi, _items(t) + (t.num_channels, 257)), "frame_length": 512,
                        "hop_factor": 0.3, "keep_lufs": bool(rng.integers(2))},
        EXACT,
    ),
    "shift_phase": (lambda rng, t: {"angle": rng.uniform(-np.pi, np.pi, _items(t))}, EXACT),
    "roll": (lambda rng, t: {"shift": rng.integers(-3000, 3000, _items(t)), "mode": str(rng.choice(["wrap", "constant"]))}, EXACT),
    "resample": (lambda rng, t: {"sample_rate": int(rng.choice([4000, 11025, 16000]))}, None),  # tested separately
    "encode_with_codec": (lambda rng, t: {"codec": SumCodec()}, EXACT),
    "encode_latents": (lambda rng, t: {"codec": SumCodec()}, EXACT),
}


def test_every_shared_name_has_parity_coverage():
    assert set(PARITY) | NOT_TRANSFORMS == set(TJ.__all__), "add the new transform to PARITY"
    for name in PARITY:
        assert callable(getattr(NK, name)) and callable(getattr(JK, name)), name


def assert_trees_close(a: AudioTree, b: AudioTree, atol: float, what: str = ""):
    assert a.sample_rate == b.sample_rate, what
    for field in ARRAY_FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), f"{what}: {field} present in one backend only"
        if x is not None:
            assert np.shape(x) == np.shape(y), f"{what}: {field}"
            np.testing.assert_allclose(arr(x), arr(y), atol=atol, rtol=0, err_msg=f"{what}: {field}")
    assert set(a._metadata) == set(b._metadata), what
    assert a.filepath == b.filepath


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{c}" for b, c in SHAPES])
@pytest.mark.parametrize("name", sorted(n for n, (_, tol) in PARITY.items() if tol is not None))
def test_kernels_agree(name, shape):
    draw, tol = PARITY[name]
    rng = np.random.default_rng([zlib.crc32(name.encode()), *shape])
    tree = make_tree(*shape, samples=2048, seed=shape[0] * 10 + shape[1])
    kwargs = draw(rng, tree)
    a = getattr(NK, name)(tree, **kwargs)
    b = getattr(JK, name)(as_backend(tree, "jax"), **kwargs)
    assert a.backend == "numpy" and b.backend in ("jax", "numpy")
    assert_trees_close(a, b, tol, f"{name} {shape}")


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{c}" for b, c in SHAPES])
def test_volume_norm_with_measurement_agrees_within_meter_tolerance(shape):
    tree = make_tree(*shape, samples=8000, derived=False, seed=sum(shape))
    target = np.random.default_rng(0).uniform(-30, -14, shape[0])
    a, b = NK.volume_norm(tree, target), JK.volume_norm(tree, target)
    np.testing.assert_allclose(arr(a.lufs), arr(b.lufs), atol=0.05)
    np.testing.assert_allclose(arr(a.lufs_windows), arr(b.lufs_windows), atol=0.05)
    peaks_a, peaks_b = np.abs(arr(a.waveform)).max(axis=(-2, -1)), np.abs(arr(b.waveform)).max(axis=(-2, -1))
    ratio_db = 20 * np.log10(peaks_b / peaks_a)
    assert np.all(np.abs(ratio_db) < 0.05), ratio_db


@pytest.mark.parametrize("new_rate", [4000, 11025, 16000, 44100])
@pytest.mark.parametrize("channels", [1, 2])
def test_resample_agrees_on_a_tone(new_rate, channels):
    n = np.arange(SR)
    fade = np.minimum(1.0, np.minimum(n, SR - 1 - n) / (0.02 * SR))  # 20 ms linear fades
    tone = (0.5 * fade * np.sin(2 * np.pi * 440 * n / SR)).astype(np.float32)
    tree = AudioTree.create(np.tile(tone, (2, channels, 1)), SR)
    a = NK.resample(tree, sample_rate=new_rate)
    b = JK.resample(as_backend(tree, "jax"), sample_rate=new_rate)
    assert a.waveform.shape == b.waveform.shape == (2, channels, new_rate)
    assert np.abs(arr(a.waveform) - arr(b.waveform)).max() < 1e-4


# ================================================================== jit
def _jittable(tree):
    """JAX leaves only (string extras cannot cross jit)."""
    tree = as_backend(tree, "jax")
    return tree.replace(extras={"label": tree.extras["label"]})


JIT_CASES = [
    TJ.identity(),
    TJ.mono(),
    TJ.stereo(scope=["b"]),
    TJ.resample(4000),
    TJ.trim(0.3, mode="reflect"),
    TJ.rescale_audio(),
    TJ.peak_norm(),
    TJ.volume_change(-6, 6, prob=0.5),
    TJ.volume_norm(-24, -18),
    TJ.invert_phase(prob=0.5, split_seed=False),
    TJ.swap_stereo(scope=["a"]),
    TJ.corrupt_phase(frame_length=512, prob=0.5),
    TJ.shift_phase(keep_lufs=True),
    TJ.roll(-0.1, 0.1, mode="constant", prob=0.5),
]


def test_jit_cases_cover_every_jax_transform():
    names = {t.name for t in JIT_CASES}
    assert names == set(TJ.__all__) - NOT_TRANSFORMS - {"encode_with_codec", "encode_latents"}


@pytest.mark.parametrize("transform", JIT_CASES, ids=lambda t: t.name)
def test_jax_transforms_run_under_jit(transform):
    tree = _jittable(make_tree(batch=4, channels=2, samples=2048))
    element = tree
    if transform.scope is not None:  # dict elements for the scoped cases
        element = {"a": tree, "b": tree.replace(waveform=tree.waveform[:, :1])}
    key = jax.random.key(3)

    def step(el, k):
        if hasattr(transform, "random_map"):
            return transform.random_map(el, k)
        return transform.map(el)

    eager = step(element, key)
    jitted = jax.jit(step)(element, key)
    if isinstance(element, AudioTree):
        eager, jitted = {"tree": eager}, {"tree": jitted}
    assert set(eager) == set(jitted)
    for name in eager:
        assert_trees_close(eager[name], jitted[name], 1e-5, f"{transform!r} {name}")
        assert isinstance(jitted[name].waveform, jax.Array)


def test_numpy_and_jax_transforms_follow_their_own_draws_but_share_the_kernel():
    """The transform equals its kernel fed with the drawn parameters (JAX, jitted)."""
    tree = _jittable(make_tree(batch=4, samples=2048))
    key = jax.random.key(0)
    out = jax.jit(lambda t, k: TJ.volume_change(-6, 6).random_map(t, k))(tree, key)
    gains = 20 * np.log10(np.abs(arr(out.waveform)).max(axis=(-2, -1)) / np.abs(arr(tree.waveform)).max(axis=(-2, -1)))
    direct = JK.volume_change(tree, jnp.asarray(gains))
    np.testing.assert_allclose(arr(direct.waveform), arr(out.waveform), atol=1e-5)


# ================================================================= vmap
@pytest.mark.parametrize(
    "transform",
    [TJ.volume_change(-6, 6, prob=0.5), TJ.roll(-0.05, 0.05), TJ.corrupt_phase(frame_length=256), TJ.trim(0.2), TJ.mono()],
    ids=lambda t: t.name,
)
@pytest.mark.slow
def test_jax_transforms_vmap_over_mini_batches(transform):
    tree = _jittable(make_tree(batch=6, channels=2, samples=1024))
    mini = tree.reshape_mini_batches(2)  # (3, 2, C, T)
    keys = jax.random.split(jax.random.key(7), 3)

    def step(t, k):
        if hasattr(transform, "random_map"):
            return transform.random_map(t, k)
        return transform.map(t)

    batched = jax.jit(jax.vmap(step))(mini, keys)
    reference = jax.jit(step)
    for m in range(3):
        one = jax.tree.map(lambda a: a[m], mini)
        expected = reference(one, keys[m])
        got = jax.tree.map(lambda a: a[m], batched)
        assert_trees_close(expected, got, 1e-5, f"{transform!r} slice {m}")


def test_vmap_over_single_items_draws_per_item():
    tree = _jittable(make_tree(batch=5, channels=1, samples=512, derived=False))
    keys = jax.random.split(jax.random.key(1), 5)
    out = jax.vmap(lambda t, k: TJ.volume_change(-6, 6).random_map(t, k))(tree, keys)
    gains = 20 * np.log10(np.abs(arr(out.waveform)).max(axis=(-2, -1)) / np.abs(arr(tree.waveform)).max(axis=(-2, -1)))
    assert np.all(np.abs(gains) <= 6 + 1e-4) and np.std(gains) > 0.5
