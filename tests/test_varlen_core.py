"""Variable-length batches: ``lengths``, ``mask()``, padding in ``AudioTree.batch``,
masked loudness (NumPy and JAX) and transforms that never touch the padding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import audiotree.transforms as T
import audiotree.transforms.jax as TJ
from audiotree import AudioTree
from audiotree.dsp.loudness import integrated_loudness, measure
from audiotree.dsp.loudness_jax import integrated_loudness_jax, measure_jax
from audiotree.transforms import kernels as NK
from audiotree.transforms.jax import kernels as JK
from audiotree.sources import Output

SR = 16000


def _noise(samples: int, channels: int = 1, seed: int = 0, amp: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((channels, samples)) * amp).astype(np.float32)


def _item(samples: int, seed: int = 0, channels: int = 1, **kw) -> AudioTree:
    return AudioTree.create(_noise(samples, channels, seed), SR, filepath=f"/d/{seed}.wav", **kw)


def _batch(lengths=(4000, 16000, 9000, 300), channels: int = 1) -> AudioTree:
    return AudioTree.batch([_item(n, seed=i, channels=channels) for i, n in enumerate(lengths)])


# ---------------------------------------------------------------- container
def test_batch_pads_to_longest_and_fills_lengths():
    batch = _batch()
    assert batch.waveform.shape == (4, 1, 16000)
    assert batch.lengths.dtype == np.int32 and batch.lengths.tolist() == [4000, 16000, 9000, 300]
    assert np.all(batch.waveform[0, :, 4000:] == 0) and np.any(batch.waveform[0, :, :4000] != 0)
    assert batch.filepath == [f"/d/{i}.wav" for i in range(4)]
    mask = batch.mask()
    assert mask.shape == (4, 1, 16000) and mask.dtype == bool
    assert mask.sum(axis=(1, 2)).tolist() == [4000, 16000, 9000, 300]


def test_pad_to_a_fixed_edge_and_rebatching():
    batch = AudioTree.batch([_item(100), _item(200, seed=1)], pad_to=256)
    assert batch.waveform.shape == (2, 1, 256) and batch.lengths.tolist() == [100, 200]
    again = AudioTree.batch([batch, _item(50, seed=2)])  # a padded batch keeps its lengths
    assert again.lengths.tolist() == [100, 200, 50] and again.waveform.shape == (3, 1, 256)
    with pytest.raises(ValueError, match="more than pad_to=150"):
        AudioTree.batch([_item(100), _item(200, seed=1)], pad_to=150)


def test_fixed_length_batches_keep_lengths_none():
    batch = AudioTree.batch([_item(100), _item(100, seed=1)])
    assert batch.lengths is None
    assert batch.mask().all() and batch.mask().shape == (2, 1, 100)
    assert batch.full_lengths().tolist() == [100, 100]


def test_short_reads_without_padding_now_batch(tmp_path):
    """pad_mode=None used to fail in numpy's concatenate; now it pads and records lengths."""
    import soundfile as sf

    paths = []
    for i, seconds in enumerate((0.3, 0.5)):
        path = tmp_path / f"{i}.wav"
        sf.write(path, _noise(int(seconds * SR), seed=i).T, SR)
        paths.append(path)
    items = [AudioTree.from_file(p, duration=1.0, pad_mode=None) for p in paths]
    batch = AudioTree.batch(items)
    assert batch.lengths.tolist() == [int(0.3 * SR), int(0.5 * SR)]


def test_indexing_split_and_mini_batches_carry_lengths():
    batch = _batch()
    assert batch[1].lengths.tolist() == [16000]
    assert [b.lengths.tolist() for b in batch.split(2)] == [[4000, 16000], [9000, 300]]
    mini = batch.reshape_mini_batches(2)
    assert mini.lengths.shape == (2, 2) and mini.mask().shape == (2, 2, 1, 16000)
    assert mini.flatten_mini_batches().lengths.tolist() == batch.lengths.tolist()


def test_mask_under_jit_and_vmap():
    batch = jax.tree_util.tree_map(jnp.asarray, _batch())
    compiled = jax.jit(lambda t: (t.mask(), jnp.sum(t.waveform * t.mask(), axis=-1)))
    mask, _ = compiled(batch)
    assert isinstance(mask, jax.Array) and mask.shape == (4, 1, 16000)
    assert np.asarray(mask).sum(axis=(1, 2)).tolist() == [4000, 16000, 9000, 300]
    # Traced lengths: the same compiled function serves other lengths of the same shape.
    other = batch.replace(lengths=jnp.asarray([1, 2, 3, 4], jnp.int32))
    assert np.asarray(compiled(other)[0]).sum(axis=(1, 2)).tolist() == [1, 2, 3, 4]
    per_item = jax.vmap(lambda w, n: jnp.arange(w.shape[-1]) < n)(batch.waveform, batch.lengths)
    np.testing.assert_array_equal(np.asarray(per_item), np.asarray(mask)[:, 0])
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda t: t.mask())(batch)), np.asarray(mask))
    # Built inside jit from traced lengths (checked by shape only; values are checked eagerly).
    built = jax.jit(lambda w, n: AudioTree.create(w, SR, lengths=n).mask())(batch.waveform, batch.lengths)
    np.testing.assert_array_equal(np.asarray(built), np.asarray(mask))
    with pytest.raises(ValueError, match="disagree"):
        AudioTree.create(batch.waveform, SR, lengths=jnp.asarray([1, 2, 3, 16001]))


def test_create_zeroes_padding_and_validates_lengths():
    x = np.ones((2, 1, 10), np.float32)
    tree = AudioTree.create(x, SR, lengths=[10, 4])
    assert tree.waveform[1, 0, 4:].sum() == 0 and tree.waveform[1, 0, :4].sum() == 4
    with pytest.raises(ValueError, match=r"every length must be in \[0, 10\]"):
        AudioTree.create(x, SR, lengths=[11, 4])
    with pytest.raises(ValueError, match="one length"):
        AudioTree.create(x, SR, lengths=[10, 4, 3])
    with pytest.raises(ValueError, match="integers"):
        AudioTree.create(x, SR, lengths=[9.5, 4])
    with pytest.raises(ValueError, match="token-only"):
        AudioTree.create(None, SR, lengths=[1])
    bad = AudioTree(waveform=x, sample_rate=SR, lengths=np.array([3, 40]))  # the raw constructor validates nothing
    with pytest.raises(ValueError, match="disagree with the waveform"):
        AudioTree.batch([bad, bad])


def test_batch_errors_name_the_problem():
    with pytest.raises(ValueError, match="channel counts"):
        AudioTree.batch([_item(100), _item(120, seed=1, channels=2)])
    with pytest.raises(ValueError, match="shapes past the batch axis differ"):
        AudioTree.batch([_item(100).replace_extras(tokens=np.zeros((1, 3))),
                         _item(120, seed=1).replace_extras(tokens=np.zeros((1, 5)))])


def test_resample_scales_lengths_and_keeps_padding_silent():
    batch = _batch((1600, 16000))
    for tree in (batch, jax.tree_util.tree_map(jnp.asarray, batch)):
        out = tree.resample(8000)
        assert np.asarray(out.lengths).tolist() == [800, 8000]
        assert np.all(np.asarray(out.waveform)[0, :, 800:] == 0)


def test_write_keeps_only_real_samples(tmp_path):
    import soundfile as sf

    path = _batch((300, 1000))[0].write(tmp_path / "a.wav")
    assert sf.info(path).frames == 300


# ---------------------------------------------------------------- loudness
@pytest.mark.parametrize("samples", [2000, 6400, 16000, 23456])
def test_padding_is_never_metered(samples):
    x = _noise(samples, channels=2, seed=samples)
    padded = np.zeros((2, 40000), np.float32)
    padded[:, :samples] = x
    alone, alone_windows = measure(x, SR)
    masked, masked_windows = measure(padded, SR, lengths=np.asarray(samples))
    assert abs(float(alone) - float(masked)) < 1e-6
    w = alone_windows.shape[-1]
    np.testing.assert_allclose(masked_windows[:w], alone_windows, atol=1e-6)
    assert np.all(np.isneginf(masked_windows[w:]))
    unmasked = float(measure(padded, SR)[0])
    assert abs(unmasked - float(alone)) > 0.5  # padding changes an unmasked measurement
    jax_masked, jax_windows = measure_jax(jnp.asarray(padded), SR, lengths=jnp.asarray(samples))
    assert abs(float(jax_masked) - float(alone)) < 1e-3
    np.testing.assert_allclose(np.asarray(jax_windows)[:w], alone_windows, atol=1e-3)
    assert abs(float(integrated_loudness_jax(padded, SR, jnp.asarray(samples))) - float(alone)) < 1e-3
    assert abs(float(integrated_loudness(padded, SR, lengths=np.asarray(samples))) - integrated_loudness(x, SR)) < 1e-6


def test_replace_lufs_of_a_batch_matches_each_item_alone():
    lengths = (4000, 16000, 9000, 300)
    batch = _batch(lengths)
    alone = [float(measure(_noise(n, seed=i), SR)[0]) for i, n in enumerate(lengths)]
    np.testing.assert_allclose(batch.replace_lufs().lufs, alone, atol=1e-6)
    jitted = jax.jit(lambda t: t.replace_lufs().lufs)(jax.tree_util.tree_map(jnp.asarray, batch))
    np.testing.assert_allclose(np.asarray(jitted), alone, atol=1e-3)
    empty = batch.replace(lengths=np.array([0, 16000, 9000, 300], np.int32))
    assert np.isneginf(empty.replace_lufs().lufs[0])


def test_normalize_lufs_of_padded_items_matches_alone():
    lengths = (4000, 16000)
    batch = _batch(lengths).normalize_lufs(-23.0)
    for i, n in enumerate(lengths):
        alone = _item(n, seed=i).normalize_lufs(-23.0)
        np.testing.assert_allclose(batch.waveform[i, :, :n], alone.waveform[0], rtol=1e-5, atol=1e-7)
        assert np.all(batch.waveform[i, :, n:] == 0)


# -------------------------------------------------------------- transforms
def _rng_for(backend: str, seed: int = 0):
    return np.random.default_rng(seed) if backend == "numpy" else jax.random.key(seed)


TRANSFORMS = [
    ("volume_norm", dict(min_db=-30, max_db=-20)),
    ("volume_change", dict(min_db=-6, max_db=6)),
    ("corrupt_phase", dict(frame_length=512)),
    ("shift_phase", {}),
    ("roll", dict(min_seconds=-0.2, max_seconds=0.2)),
    ("roll", dict(min_seconds=-0.2, max_seconds=0.2, mode="constant")),
    ("invert_phase", dict(prob=0.5)),
    ("peak_norm", {}),
    ("resample", dict(sample_rate=8000)),
]


@pytest.mark.parametrize("backend", ["numpy", "jax"])
@pytest.mark.parametrize("name,params", TRANSFORMS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TRANSFORMS)])
def test_transforms_never_augment_padding(backend, name, params):
    namespace = T if backend == "numpy" else TJ
    batch = _batch((4000, 16000, 9000, 4100), channels=2)
    tree = batch if backend == "numpy" else jax.tree_util.tree_map(jnp.asarray, batch)
    transform = getattr(namespace, name)(**params)
    out = transform(tree, _rng_for(backend)) if hasattr(transform, "random_map") else transform(tree)
    x, n = np.asarray(out.waveform), np.asarray(out.lengths)
    for i in range(4):
        assert np.all(x[i, :, n[i]:] == 0), f"{name} wrote into the padding of item {i}"
        assert np.any(x[i, :, : n[i]] != 0)


def test_volume_norm_meters_real_samples_only():
    batch = _batch((4000, 16000), channels=2)
    out = T.volume_norm(min_db=-20, max_db=-20)(batch, np.random.default_rng(0))
    np.testing.assert_allclose(out.lufs, [-20, -20], atol=1e-4)
    np.testing.assert_allclose(out.replace(lufs=None).replace_lufs().lufs, [-20, -20], atol=1e-3)
    out_j = TJ.volume_norm(min_db=-20, max_db=-20)(jax.tree_util.tree_map(jnp.asarray, batch), jax.random.key(0))
    np.testing.assert_allclose(np.asarray(out_j.lufs), [-20, -20], atol=1e-3)


def test_roll_wraps_each_item_within_its_length():
    item = np.arange(1, 6, dtype=np.float32)
    batch = AudioTree.batch([AudioTree.create(item, SR), AudioTree.create(np.ones(8, np.float32), SR)])
    for kernels in (NK, JK):
        out = kernels.roll(batch, np.array([2, 0]), "wrap")
        assert np.asarray(out.waveform)[0, 0].tolist() == [4, 5, 1, 2, 3, 0, 0, 0]
        out = kernels.roll(batch, np.array([-1, 0]), "constant")
        assert np.asarray(out.waveform)[0, 0].tolist() == [2, 3, 4, 5, 0, 0, 0, 0]


@pytest.mark.parametrize("name,kwargs", [
    ("roll", {"shift": np.array([300, -700, 5, 0]), "mode": "wrap"}),
    ("roll", {"shift": np.array([300, -700, 5, 0]), "mode": "constant"}),
    ("volume_norm", {"target_lufs": np.array([-20.0, -25, -30, -18])}),
    ("trim", {"length": 0.5, "mode": "wrap"}),
    ("trim", {"length": 1.5, "mode": "wrap"}),
])
def test_numpy_and_jax_kernels_agree_on_padded_batches(name, kwargs):
    batch = _batch((4000, 16000, 9000, 2100), channels=2)
    a = getattr(NK, name)(batch, **kwargs).zero_padding()
    b = getattr(JK, name)(jax.tree_util.tree_map(jnp.asarray, batch), **kwargs).zero_padding()
    np.testing.assert_array_equal(np.asarray(a.lengths), np.asarray(b.lengths))
    np.testing.assert_allclose(np.asarray(a.waveform), np.asarray(b.waveform), atol=1e-4)
    if name == "trim":
        assert np.asarray(a.lengths).max() <= a.samples


def test_trim_of_a_padded_batch_adds_padding_not_audio():
    batch = _batch((4000, 8000))
    out = T.trim(length=1.0, mode="wrap")(batch)
    assert out.waveform.shape[-1] == SR and out.lengths.tolist() == [4000, 8000]
    assert np.all(out.waveform[1, :, 8000:] == 0)
    cut = T.trim(length=0.3)(batch)
    assert cut.lengths.tolist() == [4000, 4800]


# ------------------------------------------------------------ whole files
@pytest.fixture()
def whole_files(tmp_path):
    import soundfile as sf

    out = []
    for i, (seconds, ext) in enumerate([(0.4, "wav"), (1.3, "flac"), (2.2, "ogg")]):
        path = tmp_path / f"w{i}.{ext}"
        sf.write(path, _noise(int(seconds * SR), channels=2, seed=i).T, SR)
        out.append(str(path))
    return out


def test_full_strategy_reads_whole_files_with_lengths(whole_files):
    from audiotree.excerpts.config import ExcerptConfig

    rng = np.random.default_rng(0)
    for path, seconds in zip(whole_files, (0.4, 1.3, 2.2)):
        tree = AudioTree.excerpt(path, rng, None, excerpt=ExcerptConfig(strategy="full"), sample_rate=SR)
        assert abs(tree.samples - seconds * SR) <= 2 and tree.lengths.tolist() == [tree.samples]
        capped = AudioTree.excerpt(path, rng, None, excerpt=ExcerptConfig(strategy="full", crop_to=1.0),
                                   sample_rate=SR)
        assert capped.samples == min(tree.samples, SR) and capped.lengths.tolist() == [capped.samples]
        np.testing.assert_array_equal(capped.waveform, tree.waveform[..., : capped.samples])


def test_whole_file_datasets(whole_files):
    from audiotree.sources import ExcerptConfig, create_audio_dataset, create_balanced_audio_dataset

    ds = create_audio_dataset(filepaths=whole_files, duration=None, shuffle=False, sample_rate=SR, output=Output(mono=False))
    items = [ds[i] for i in range(3)]
    assert [it.samples for it in items] == [it.lengths[0] for it in items]
    batch = AudioTree.batch(items)
    assert batch.waveform.shape[:2] == (3, 2) and batch.lengths.tolist() == [it.samples for it in items]
    same = create_audio_dataset(filepaths=whole_files, excerpt=ExcerptConfig(strategy="full"), shuffle=False,
                                sample_rate=SR, output=Output(mono=False))
    assert same[1].samples == items[1].samples
    mixed = create_balanced_audio_dataset(
        sources={"a": whole_files[:2], "b": whole_files[2:]}, excerpt=ExcerptConfig(strategy="full", crop_to=1.0),
        sample_rate=SR,
    )
    assert all(mixed[i].samples <= SR and mixed[i].lengths is not None for i in range(6))


def test_whole_file_bad_input(whole_files):
    from audiotree.sources import ExcerptConfig, create_audio_dataset

    with pytest.raises(ValueError, match="only applies to strategy='full'"):
        ExcerptConfig(crop_to=2.0)
    with pytest.raises(ValueError, match="positive number of seconds"):
        ExcerptConfig(strategy="full", crop_to=-1)
    with pytest.raises(ValueError, match="search does not apply"):
        ExcerptConfig(strategy="full", search="bias_early")
    with pytest.raises(ValueError, match="duration=2.0 does not apply"):
        create_audio_dataset(filepaths=whole_files, duration=2.0, excerpt=ExcerptConfig(strategy="full"))
    with pytest.raises(ValueError, match="loudest' needs duration"):
        create_audio_dataset(filepaths=whole_files, duration=None, excerpt=ExcerptConfig(strategy="loudest"))
    from audiotree.excerpts.strategies import select_clip

    with pytest.raises(ValueError, match="takes no duration"):
        select_clip(whole_files[0], np.random.default_rng(0), duration=1.0, excerpt=ExcerptConfig(strategy="full"))


def test_tree_writer_keeps_lengths(tmp_path):
    from audiotree import TreeWriter
    from audiotree.sources import TreeDataSource

    batch = _batch((300, 1000, 700))
    with TreeWriter(tmp_path / "ds", 3) as writer:
        writer.write(batch)
    source = TreeDataSource(tmp_path / "ds")
    assert [source[i].lengths.tolist() for i in range(3)] == [[300], [1000], [700]]
    again = AudioTree.batch([source[i] for i in range(3)])
    np.testing.assert_array_equal(again.waveform, batch.waveform)
    assert again.lengths.tolist() == [300, 1000, 700]


def test_audio_writer_writes_only_real_samples(tmp_path):
    import soundfile as sf

    from audiotree import AudioWriter
    from audiotree.sources import AudioDataSource

    batch = _batch((300, 1000, 700))
    with AudioWriter(tmp_path / "out") as writer:
        paths = writer.write(batch)
    assert [sf.info(p).frames for p in paths] == [300, 1000, 700]
    source = AudioDataSource(tmp_path / "out")
    back = AudioTree.batch([source[i] for i in range(3)])
    assert back.lengths.tolist() == [300, 1000, 700]
    np.testing.assert_allclose(back.waveform, batch.waveform, atol=1e-4)  # 16-bit PCM
