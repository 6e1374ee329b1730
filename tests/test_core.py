"""AudioTree: construction, indexing, batching, pytree behaviour, derived fields."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import soundfile

from audiotree import AudioTree
from audiotree.core import ARRAY_FIELDS, DERIVED_FIELDS, LABEL_FIELDS, PYTREE_FIELDS
from factories import noise_tree, sine
from helpers import run_code


_tree = noise_tree


def test_field_tuples():
    assert PYTREE_FIELDS[0] == "waveform" and "sample_rate" not in PYTREE_FIELDS
    assert LABEL_FIELDS == ("lufs", "lufs_windows", "pitch", "velocity", "note_duration", "codes", "latents")
    assert set(DERIVED_FIELDS) <= set(ARRAY_FIELDS)


def test_create_shapes_and_provenance():
    assert AudioTree.create(np.zeros(10), 8000).waveform.shape == (1, 1, 10)
    assert AudioTree.create(np.zeros((2, 10)), 8000).waveform.shape == (1, 2, 10)
    with pytest.raises(ValueError, match="reshape_mini_batches"):
        AudioTree.create(np.zeros((1, 1, 2, 10)), 8000)
    t = _tree()
    assert t.filepath == ["f0.wav", "f1.wav", "f2.wav"]
    assert t.source == ["grp"] * 3
    np.testing.assert_array_equal(t.offset, [0, 1, 2])
    with pytest.raises(ValueError, match="2 filepath for a batch of 3"):
        AudioTree.create(np.zeros((3, 1, 4)), 8000, filepath=["a", "b"])
    with pytest.raises(ValueError, match="provenance encoding limit"):
        AudioTree.create(np.zeros((1, 1, 4)), 8000, filepath="x" * 1025)
    with pytest.raises(TypeError, match="np.asarray"):
        AudioTree.create(np.zeros((1, 1, 4)), 8000, extras={"bad": [1, 2]})
    with pytest.raises(ValueError):
        AudioTree.create(np.zeros((3, 1, 4)), 8000, offset=np.zeros((3, 1)))


def test_unicode_provenance_round_trips():
    t = AudioTree.create(np.zeros((1, 1, 4)), 8000, filepath="dossier/çà/音声.wav")
    assert t.filepath == ["dossier/çà/音声.wav"]


def test_indexing_keeps_batch_axis():
    t = _tree(batch=4)
    for key in (1, np.int64(1), np.array(1), jnp.array(1)):
        item = t[key]
        assert item.waveform.shape == (1, 2, 800) and item.filepath == ["f1.wav"]
    assert t[-1].filepath == ["f3.wav"]
    assert t[1:3].filepath == ["f1.wav", "f2.wav"]
    assert t[[3, 0]].filepath == ["f3.wav", "f0.wav"]
    assert t[np.array([True, False, True, False])].filepath == ["f0.wav", "f2.wav"]
    with pytest.raises(IndexError):
        t[4]
    assert [x.filepath[0] for x in t] == ["f0.wav", "f1.wav", "f2.wav", "f3.wav"]
    assert len(t) == t.batch_size == 4


def test_string_extras_index_and_batch():
    t = AudioTree.create(np.zeros((2, 1, 4)), 8000, extras={"text": ["a", "b"], "n": np.array([1, 2])})
    assert t[1].extras["text"] == ["b"]
    with pytest.raises(IndexError):
        t[np.array([True])]
    one = AudioTree.create(np.zeros((1, 1, 4)), 8000, extras={"text": "c", "n": np.array([3])})
    b = AudioTree.batch([t, one])
    assert b.extras["text"] == ["a", "b", "c"]
    np.testing.assert_array_equal(b.extras["n"], [1, 2, 3])


def test_batch_structures_and_errors():
    t = _tree(batch=1)
    b = AudioTree.batch([{"src": t, "tgt": t, "label": np.array([1]), "name": "x"}] * 4)
    assert b["src"].waveform.shape == (4, 2, 800)
    np.testing.assert_array_equal(b["label"], [1, 1, 1, 1])
    assert b["name"] == ["x"] * 4
    assert AudioTree.batch([(t, 1), (t, 2)])[1] == [1, 2]
    with pytest.raises(ValueError, match="at least one item"):
        AudioTree.batch([])
    other_rate = AudioTree.create(np.zeros((1, 2, 800), np.float32), 16000)
    with pytest.raises(ValueError):
        AudioTree.batch([AudioTree.create(np.zeros((1, 2, 800), np.float32), 8000), other_rate])
    jt = jax.device_put(t)
    assert AudioTree.batch([jt, t]).backend == "jax"


def test_pytree_jit_vmap_device_put():
    t = _tree()
    leaves, treedef = jax.tree_util.tree_flatten(t)
    assert all(isinstance(leaf, np.ndarray) for leaf in leaves)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert rebuilt.sample_rate == 8000 and rebuilt.filepath == t.filepath

    @jax.jit
    def gain(tree):
        return tree.replace(waveform=tree.waveform * 2)

    out = gain(t)
    assert out.backend == "jax" and out.filepath == t.filepath
    np.testing.assert_allclose(out.waveform, t.waveform * 2, rtol=1e-6)
    energy = jax.vmap(lambda item: jnp.sum(item.waveform ** 2))(t)
    assert energy.shape == (3,)
    on_device = jax.device_put(t)
    assert on_device.device == jax.devices("cpu")[0]
    assert t.device is None and t.backend == "numpy"
    mixed = t.replace(lufs=jnp.zeros(3))
    assert mixed.backend == "mixed"
    with pytest.raises(ValueError):
        mixed.device
    # Different sample rates are different tree definitions (static field).
    assert jax.tree_util.tree_structure(t) != jax.tree_util.tree_structure(t.replace(sample_rate=16000))


def test_pickle_round_trip():
    t = _tree()
    back = pickle.loads(pickle.dumps(t))
    assert back.filepath == t.filepath and back.sample_rate == t.sample_rate
    np.testing.assert_array_equal(back.waveform, t.waveform)


def test_replace_and_extras():
    t = _tree()
    with pytest.raises(TypeError):
        t.replace(not_a_field=1)
    t2 = t.replace_extras(mel=np.zeros((3, 4)))
    assert "mel" in t2.extras and "mel" not in t.extras
    with pytest.raises(ValueError):
        t.replace_audio(keep=("waveform",))


def test_split_filter_minibatches():
    t = _tree(batch=4)
    parts = t.split(2)
    assert [p.filepath for p in parts] == [["f0.wav", "f1.wav"], ["f2.wav", "f3.wav"]]
    with pytest.raises(ValueError):
        t.split(3)
    with pytest.raises(ValueError):
        t.split(0)
    kept = t.filter(lambda item: item.offset[0] >= 2)
    assert kept.filepath == ["f2.wav", "f3.wav"]
    empty = t.filter(lambda item: False)
    assert empty.batch_size == 0 and empty.filepath == []
    mb = t.replace_extras(text=["a", "b", "c", "d"]).reshape_mini_batches(2)
    assert mb.waveform.shape == (2, 2, 2, 800)
    assert mb.filepath == [["f0.wav", "f1.wav"], ["f2.wav", "f3.wav"]]
    assert mb.extras["text"] == [["a", "b"], ["c", "d"]]
    flat = mb.flatten_mini_batches()
    assert flat.filepath == t.filepath and flat.extras["text"] == ["a", "b", "c", "d"]
    with pytest.raises(ValueError):
        mb.reshape_mini_batches(1)
    with pytest.raises(ValueError):
        t.flatten_mini_batches()
    with pytest.raises(ValueError):
        mb.filter(lambda x: True)
    with pytest.raises(ValueError):
        mb.write("x.wav")


def test_channels():
    t = _tree(lufs=np.zeros(3, np.float32), codes=np.zeros((3, 4)))
    mono = t.to_mono()
    assert mono.num_channels == 1 and mono.lufs is None and mono.codes is None
    np.testing.assert_allclose(mono.waveform[:, 0], t.waveform.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(t.to_mono("right").waveform[:, 0], t.waveform[:, 1])
    with pytest.raises(ValueError):
        mono.to_mono("middle")
    assert mono.to_mono() is mono
    assert mono.to_stereo().num_channels == 2
    assert t.to_stereo() is t
    with pytest.raises(ValueError):
        _tree(channels=3).to_stereo()
    with pytest.raises(ValueError):
        _tree(channels=3).to_mono("left")


def test_write_round_trip(tmp_path):
    t = _tree(batch=1, channels=2)
    path = t.write(tmp_path / "x.wav", subtype="FLOAT")
    data, rate = soundfile.read(path, dtype="float32")
    assert rate == 8000
    np.testing.assert_array_equal(data.T, t.waveform[0])
    assert soundfile.info(t.write(tmp_path / "y.wav")).subtype == "PCM_16"
    with pytest.raises(ValueError, match="batch_size == 1"):
        _tree(batch=2).write(tmp_path / "z.wav")
    with pytest.raises(ValueError, match="needs a waveform"):
        AudioTree(None, 8000, codes=np.zeros((1, 3))).write(tmp_path / "z.wav")


def test_token_only_tree():
    t = AudioTree.create(None, 8000, codes=np.zeros((5, 3), np.int32), filepath="a")
    assert t.batch_size == 5 and t.filepath == ["a"] * 5
    assert AudioTree.batch([t, t]).codes.shape == (10, 3)
    with pytest.raises(ValueError):
        AudioTree(None, 8000).batch_size


def test_repr_is_short():
    text = repr(_tree())
    assert "waveform=(3, 2, 800)" in text and len(text) < 300


# ------------------------------------------------------------------ loudness
def _tone(batch=2, channels=2, rate=16000, seconds=2.0, amps=(0.5, 0.05)):
    rows = [sine(rate, seconds, amp=a, channels=channels) for a in amps[:batch]]
    return AudioTree.create(np.stack(rows), rate, codes=np.zeros((batch, 3)))


def test_replace_lufs_engines_and_devices():
    t = _tone()
    by_numpy = t.replace_lufs()
    assert by_numpy.lufs.dtype == np.float32 and by_numpy.lufs.shape == (2,)
    assert by_numpy.lufs_windows.shape == (2, 5)
    by_jax = t.replace_lufs(engine="jax")
    assert isinstance(by_jax.lufs, np.ndarray)  # results follow the waveform's library
    np.testing.assert_allclose(by_jax.lufs, by_numpy.lufs, atol=0.05)
    on_cpu = t.replace_lufs(device="cpu", engine="jax")
    assert isinstance(on_cpu.lufs, np.ndarray)
    jt = jax.device_put(t).replace_lufs()
    assert isinstance(jt.lufs, jax.Array)
    # The tone 20 dB quieter reads 20 LU lower.
    assert abs((by_numpy.lufs[0] - by_numpy.lufs[1]) - 20.0) < 0.01
    with pytest.raises(ValueError):
        t.replace_lufs(engine="torch")
    with pytest.raises(ValueError):
        t.replace_lufs(device="quantum")
    with pytest.raises(TypeError):
        t.replace_lufs(device=3)
    with pytest.raises(ValueError):
        t.replace_lufs(0.2)
    with pytest.raises(ValueError):
        AudioTree(None, 8000, codes=np.zeros((1, 2))).replace_lufs()
    mini = t.reshape_mini_batches(1).replace_lufs()
    assert mini.lufs.shape == (2, 1) and mini.lufs_windows.shape == (2, 1, 5)


def test_normalize_lufs_keeps_silence_and_clears_codes():
    t = _tone()
    silent = t.replace(waveform=np.concatenate([t.waveform[:1], np.zeros_like(t.waveform[:1])]))
    out = silent.normalize_lufs(-23.0)
    assert abs(float(out.lufs[0]) + 23.0) < 1e-4 and np.isneginf(out.lufs[1])
    assert np.all(out.waveform[1] == 0) and out.codes is None
    remeasured = out.replace_lufs()
    assert abs(float(remeasured.lufs[0]) + 23.0) < 0.01
    capped = t.normalize_lufs(0.0, max_gain_db=3.0)
    np.testing.assert_allclose(capped.lufs - t.replace_lufs().lufs, [3.0, 3.0], atol=1e-4)
    jax_out = jax.device_put(t).normalize_lufs(-20.0)
    np.testing.assert_allclose(np.asarray(jax_out.lufs), [-20.0, -20.0], atol=0.05)


def test_resample_both_backends_clears_derived():
    t = _tone(rate=16000).replace_lufs()
    up = t.resample(48000)
    assert up.sample_rate == 48000 and up.samples == 96000 and up.lufs is None and up.codes is None
    assert t.resample(16000) is t
    jup = jax.device_put(t).resample(48000)
    assert isinstance(jup.waveform, jax.Array) and jup.samples == 96000
    mid = slice(4800, -4800)
    np.testing.assert_allclose(np.asarray(jup.waveform)[..., mid], up.waveform[..., mid], atol=5e-3)
    assert abs(float(up.replace_lufs().lufs[0]) - float(t.lufs[0])) < 0.05


def test_import_audiotree_stays_light():

    code = (
        "import sys, audiotree, audiotree.sources, audiotree.core\n"
        "heavy = [m for m in ('librosa', 'numba', 'flax', 'torch', 'av', 'matplotlib') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    assert run_code(code).strip() == "[]"


def test_batch_refuses_a_label_present_in_only_some_items():
    a = AudioTree.create(np.zeros((1, 1, 4), np.float32), 16000, lufs=np.array([-20.0], np.float32))
    b = AudioTree.create(np.zeros((1, 1, 4), np.float32), 16000)
    with pytest.raises(ValueError, match="'lufs' is set for 1 of 2 items"):
        AudioTree.batch([a, b])
