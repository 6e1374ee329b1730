"""Batches from mp_prefetch workers through reused shared-memory slots (audiotree.sources.workers.batch_slots).

The fast tests run the writer and the reader in one process (real segments under
/dev/shm); the slow ones go through Grain's mp_prefetch with 2 spawned workers.
"""

from __future__ import annotations

import gc
import glob
import os
import signal
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="slots use /dev/shm (Linux)")


def _ours(token: str) -> list[str]:
    return sorted(glob.glob(f"/dev/shm/audiotree_{token}_*"))


def _assert_same(a, b) -> None:
    import jax

    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        if isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray)
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        else:
            assert type(x) is type(y) and x == y


def _elements(n: int):
    import grain

    def make(i):
        return {
            "wave": np.full((3, 5 + i), i, np.float32),
            "ids": np.arange(i, dtype=np.int64),  # empty for i == 0: stays in the record
            "mask": np.ones(4, bool),
            "name": f"item{i}",
            "nothing": None,
            "scalar": np.float64(i / 3),
        }

    return grain.MapDataset.range(n).map(make).to_iter_dataset()


def test_in_process_round_trip_reuses_slots_and_leaves_no_name():
    from audiotree.sources.workers.batch_slots import InSlot, SlotReader, SlotWriterIterDataset, new_token

    token = new_token()
    writer = iter(SlotWriterIterDataset(_elements(12), token=token, slots=2))
    expected = list(_elements(12))
    reader = SlotReader(token)
    names = []
    for i in range(6):  # each batch dropped before the next: two slots serve them all
        sent = next(writer)
        assert isinstance(sent, InSlot)
        names.append(sent.segment.rsplit("_", 1)[0])
        got = reader.open(sent)
        assert _ours(token) == []  # mapped, so unlinked
        _assert_same(got, expected[i])
        del got, sent
        gc.collect()
    assert len(set(names)) == 1  # released at once, so always the first slot
    held = [reader.open(next(writer)) for _ in range(2)]  # the trainer keeps two batches...
    third = next(writer)
    assert not isinstance(third, InSlot)  # ...so the third travels unchanged (Grain's own path)
    _assert_same(third, expected[8])
    view = held[0]["wave"][1:]  # a view keeps its batch's slot taken
    del held
    gc.collect()
    fourth = next(writer)
    assert isinstance(fourth, InSlot)
    _assert_same(view, expected[6]["wave"][1:])
    _assert_same(reader.open(fourth), expected[9])


def _resident_kb(address: int) -> int:
    """Rss (kB) of this process's mapping that starts at ``address``, from /proc/self/smaps."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if line.split("-", 1)[0] == f"{address:x}":
            for field in lines[i + 1:]:
                if field.startswith("Rss:"):
                    return int(field.split()[1])
    raise AssertionError(f"no mapping at {address:x}")


def test_a_worker_keeps_only_the_slot_it_wrote_last_mapped():
    import grain

    from audiotree.sources.workers.batch_slots import SlotReader, SlotWriterIterDataset, new_token

    n = 1_000_000  # 4 MB a slot
    ds = grain.MapDataset.range(3).map(lambda i: np.full(n, i, np.float32)).to_iter_dataset()
    token = new_token()
    writer = iter(SlotWriterIterDataset(ds, token=token, slots=3))
    reader = SlotReader(token)
    held = [reader.open(next(writer)) for _ in range(3)]  # three slots written, all still held
    slots = writer._ring._slots
    assert len(slots) == 3
    kb = [_resident_kb(s.header.ctypes.data) for s in slots]  # the header starts each mapping
    assert kb[2] >= n * 4 // 1024  # the slot written last stays mapped for the next write...
    # ...the others at most the pages around their header byte (the kernel maps 64 kB around a read fault)
    assert kb[0] <= 68 and kb[1] <= 68, kb
    for i, got in enumerate(held):  # the trainer still reads what the worker dropped
        np.testing.assert_array_equal(got, np.full(n, i, np.float32))
    del held, got
    gc.collect()
    assert _ours(token) == []


def test_a_slot_grows_when_an_element_outgrows_it():
    import grain

    from audiotree.sources.workers.batch_slots import SlotReader, SlotWriterIterDataset, new_token

    sizes = [10, 100_000, 20, 400_000]
    ds = grain.MapDataset.source(sizes).map(lambda n: np.arange(n, dtype=np.float32)).to_iter_dataset()
    token = new_token()
    writer = iter(SlotWriterIterDataset(ds, token=token, slots=1))
    reader = SlotReader(token)
    for n in sizes:
        got = reader.open(next(writer))
        np.testing.assert_array_equal(got, np.arange(n, dtype=np.float32))
        del got
        gc.collect()
    assert _ours(token) == []


def test_sweep_removes_only_names_of_dead_workers():
    import multiprocessing

    from audiotree.sources.workers.batch_slots import SlotReader, new_token, prepare_tracker

    token = new_token()
    # A spawned worker (sharing this process's resource tracker, like Grain's) that creates a slot
    # and dies by SIGKILL before sending it: no finaliser of its own runs.
    code = (
        "import os, signal, numpy as np, grain\n"
        "from audiotree.sources.workers.batch_slots import SlotWriterIterDataset\n"
        "ds = grain.MapDataset.range(3).map(lambda i: np.zeros(1000)).to_iter_dataset()\n"
        f"it = iter(SlotWriterIterDataset(ds, token={token!r}, slots=2))\n"
        "next(it)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    prepare_tracker()
    worker = multiprocessing.get_context("spawn").Process(target=exec, args=(code, {}))
    worker.start()
    worker.join(120)
    assert worker.exitcode == -signal.SIGKILL
    left = _ours(token)
    assert len(left) == 1
    alive = SlotReader(new_token())  # another pipeline's reader never touches it
    assert alive.sweep() == [] and len(_ours(token)) == 1
    assert SlotReader(token).sweep() == [os.path.basename(left[0])]
    assert _ours(token) == []


def _pipeline(folder: str, *, batch_slots: bool):
    import grain

    from audiotree import AudioTree
    from audiotree.sources import create_audio_dataset

    ds = create_audio_dataset(folder, duration=0.5, sample_rate=8000, num_epochs=None)
    batched = ds.to_iter_dataset().batch(4, batch_fn=AudioTree.batch)
    return batched.mp_prefetch(grain.MultiprocessingOptions(num_workers=2), batch_slots=batch_slots)


@pytest.mark.slow
def test_two_grain_workers_give_the_batches_of_the_pickled_path(corpus):
    folder = str(corpus["music"])
    plain = iter(_pipeline(folder, batch_slots=False))
    expected = [next(plain) for _ in range(10)]
    plain.close()
    ours = _pipeline(folder, batch_slots=True)
    token = ours.slot_token
    assert token is not None
    it = iter(ours)
    held = []
    for i in range(10):
        batch = next(it)
        _assert_same(batch, expected[i])
        if i < 6:
            held.append(batch)  # held for a while: the ring runs out, later batches take Grain's path
        del batch
        if i == 7:
            held.clear()
    it.close()
    assert _ours(token) == []


def _worker_pids() -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True)
            if "multiprocessing" in " ".join(p.cmdline()) and "resource_tracker" not in " ".join(p.cmdline())]


@pytest.mark.slow
def test_a_worker_killed_mid_run_gives_a_clear_error_and_no_leaked_slot(corpus):
    ours = _pipeline(str(corpus["music"]), batch_slots=True)
    token = ours.slot_token
    it = iter(ours)
    first = next(it)
    pids = _worker_pids()
    assert len(pids) == 2, pids
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 120
    with pytest.raises(RuntimeError, match="terminated unexpectedly"):
        while time.monotonic() < deadline:
            next(it)
    it.close()
    assert np.asarray(first.waveform).shape[0] == 4  # a batch received before the death stays readable
    del first
    gc.collect()
    assert _ours(token) == []


_SEND = """
import numpy as np, grain
from audiotree.sources.workers.batch_slots import SlotWriterIterDataset
def make(i):
    return {{"wave": np.full((3, 5 + i), i, np.float32), "ids": np.arange(i, dtype=np.int64), "name": f"item{{i}}"}}
ds = grain.MapDataset.range(4).map(make).to_iter_dataset()
for element in SlotWriterIterDataset(ds, token={token!r}, slots=8):
    queue.put(element)
queue.put(None)
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_slots_from_a_forked_or_spawned_worker(method):
    import multiprocessing

    import grain

    from audiotree.sources.workers.batch_slots import InSlot, SlotReader, new_token, prepare_tracker

    token = new_token()
    prepare_tracker()  # what the trainer's iterator does before Grain starts workers
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    worker = ctx.Process(target=exec, args=(_SEND.format(token=token), {"queue": queue}))
    worker.start()
    try:
        reader = SlotReader(token)
        got = []
        while (element := queue.get(timeout=120)) is not None:
            assert isinstance(element, InSlot)
            got.append(reader.open(element))
        worker.join(60)
        assert worker.exitcode == 0
        expected = list(grain.MapDataset.range(4).map(
            lambda i: {"wave": np.full((3, 5 + i), i, np.float32), "ids": np.arange(i, dtype=np.int64),
                       "name": f"item{i}"}).to_iter_dataset())
        for a, b in zip(got, expected, strict=True):
            _assert_same(a, b)
        assert _ours(token) == []  # received ones by the trainer, unsent ones by the worker's exit
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join(10)
