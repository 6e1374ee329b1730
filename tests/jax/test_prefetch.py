"""``audiotree.jax.prefetch_to_device`` on 2 CPU devices (a fresh interpreter with forced host devices)."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from helpers import run_script

_SCRIPT = textwrap.dedent(
    """
    import os
    import threading

    import grain
    import jax
    import numpy as np
    import soundfile
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from audiotree import AudioTree
    from audiotree.jax import prefetch_to_device
    from audiotree.sources import create_audio_dataset

    assert len(jax.devices()) == 2, jax.devices()
    os.makedirs("files", exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(6):
        soundfile.write(f"files/f{k}.flac", (0.1 * rng.standard_normal(16000 * 2)).astype(np.float32), 16000)
    ds = create_audio_dataset("files", num_epochs=None, sample_rate=16000, duration=0.5)
    sync = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)

    def host():
        return iter(ds.to_iter_dataset(sync).batch(4, batch_fn=AudioTree.batch))

    def same(a, b):
        # Device leaves follow JAX's dtype rules (float64 -> float32 unless x64 is on).
        la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
        return len(la) == len(lb) and all(
            np.array_equal(np.asarray(x), np.asarray(y).astype(np.asarray(x).dtype)) for x, y in zip(la, lb))

    expected = [next(it) for it in [host()] for _ in range(8)]
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))

    # Same batches, same pytree type, jax.Array leaves split over both devices.
    it = prefetch_to_device(host(), size=2, sharding=sharding)
    got = [next(it) for _ in range(3)]
    assert all(type(b) is AudioTree for b in got)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(got[0]))
    assert got[0].waveform.sharding == sharding and len(got[0].waveform.sharding.device_set) == 2
    assert got[0].waveform.addressable_shards[0].data.shape == (2,) + got[0].waveform.shape[1:]
    assert got[0].sample_rate == 16000
    assert all(same(g, e) for g, e in zip(got, expected))

    # Checkpoint after 3 batches while up to 2 more sit in the buffer: a fresh iterator resumes at batch 4.
    state = it.get_state()
    rest = [next(it) for _ in range(3)]
    assert all(same(g, e) for g, e in zip(rest, expected[3:6]))
    fresh = prefetch_to_device(host(), size=2, sharding=sharding)
    fresh.set_state(state)
    assert all(same(next(fresh), e) for e in expected[3:8])
    # ... and the same iterator rewinds in place.
    it.set_state(state)
    assert it.get_state() == state
    assert same(next(it), expected[3])
    it.close()
    fresh.close()

    # Default device, a plain iterable, exhaustion and errors.
    assert [float(b.sum()) for b in prefetch_to_device([np.ones(2), np.zeros(2)])] == [2.0, 0.0]

    def broken():
        yield np.ones(1)
        raise ValueError("bad batch 2")

    failing = prefetch_to_device(broken())
    next(failing)
    try:
        next(failing)
    except ValueError as error:
        assert "bad batch 2" in str(error)
    else:
        raise AssertionError("the host error was not raised")
    try:
        prefetch_to_device(iter([1])).get_state()
    except TypeError as error:
        assert "get_state" in str(error)
    else:
        raise AssertionError("get_state without a host state")
    assert [t.name for t in threading.enumerate() if t.name == "audiotree-device-prefetch"] == []
    print("ok")
    """
)


@pytest.mark.slow
def test_prefetch_to_device_on_two_cpu_devices(tmp_path):
    out = run_script(_SCRIPT, tmp_path, timeout=600,
                     env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_prefetch_rejects_a_bad_size():
    from audiotree.jax import prefetch_to_device

    for size in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="size"):
            prefetch_to_device(iter([]), size=size)


def test_prefetch_import_has_no_side_effects():
    import subprocess

    code = ("import threading, sys, audiotree\n"
            "before = threading.active_count()\n"
            "import audiotree.jax\n"
            "assert threading.active_count() == before\n"
            "assert audiotree.jax.prefetch_to_device is not None\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
