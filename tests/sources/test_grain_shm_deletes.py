"""Grain's background unlinks of shared-memory arrays do not race the garbage collector.

Grain's own pool closes a block's descriptor on its thread; when an array and
its ``SharedMemory`` are cyclic garbage, the collector closes the same
descriptor on its thread too, and the loser's unlink was skipped (a
"leaked shared_memory" warning at exit, about one in 15 finite two-worker runs
under load). audiotree's executor only unlinks the name on the background
thread; the descriptor is the ``SharedMemory``'s own finaliser's.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
from grain.multiprocessing import SharedMemoryArray

from audiotree.sources.workers import grain_shm_deletes


def _segment_exists(name: str) -> bool:
    return os.path.exists("/dev/shm/" + name.lstrip("/"))


def _received(shape=(4, 1000)) -> SharedMemoryArray:
    """An array as Grain's parent process holds it: it unlinks its block when dropped."""
    array = SharedMemoryArray(shape, np.float32)
    array[...] = 1.0
    array.unlink_on_del()
    return array


def _wait_for_queue() -> None:
    done = SharedMemoryArray._del_thread_pool.apply_async(lambda: None)
    done.get(timeout=30)


def test_the_background_task_unlinks_the_name_and_leaves_the_descriptor_alone():
    grain_shm_deletes.install()
    array = _received()
    shm = array.shm
    fd = shm._fd
    del array
    _wait_for_queue()
    assert not _segment_exists(shm.name)  # unlinked on the background thread
    assert shm._fd == fd >= 0  # Grain's own pool would have closed it there (-1)
    os.fstat(fd)  # and it is still this process's open descriptor
    del shm
    gc.collect()


def test_a_block_in_cyclic_garbage_is_unlinked_and_closed_once():
    grain_shm_deletes.install()
    names, fds = [], set()
    gc.disable()  # nothing collected before the count starts
    for _ in range(200):
        array = _received((8,))
        holder = {"array": array}
        holder["self"] = holder  # the cycle: only the collector frees the array and its SharedMemory
        names.append(array.shm.name)
        fds.add(array.shm._fd)
        del array, holder
    closes, errors = [], []
    real_close = os.close

    def counting_close(fd):
        if fd in fds:
            closes.append(fd)
        try:
            real_close(fd)
        except OSError as error:
            errors.append(error)
            raise

    os.close = counting_close
    try:
        gc.enable()
        gc.collect()
        _wait_for_queue()
    finally:
        os.close = real_close
        gc.enable()
    assert not errors
    assert sorted(closes) == sorted(fds)  # each descriptor closed once
    assert not [n for n in names if _segment_exists(n)]


def test_installed_when_an_audiotree_source_is_made_and_drained_at_exit(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent("""
        import os
        from grain.multiprocessing import SharedMemoryArray
        from audiotree.sources.workers import lifecycle
        assert not type(SharedMemoryArray._del_thread_pool).__name__.startswith("_Unlinking")
        class Source: pass
        lifecycle.hold_grain_flag_while_alive(Source())
        pool = SharedMemoryArray._del_thread_pool
        assert type(pool).__name__ == "_UnlinkingExecutor", pool
        names = []
        for _ in range(40):
            array = SharedMemoryArray((1000,), "float32")
            array.unlink_on_del()
            names.append(array.shm.name)
            del array
        print(" ".join(names))
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "leaked" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    # The exit hook waited for every queued unlink.
    assert not [n for n in result.stdout.split() if _segment_exists(n)]


def test_a_forked_child_unlinks_on_a_thread_of_its_own_even_if_the_parent_held_the_lock():
    import signal
    import threading

    grain_shm_deletes.install()
    executor = SharedMemoryArray._del_thread_pool
    _wait_for_queue()  # the parent's thread exists before the fork
    held, release = threading.Event(), threading.Event()

    def hold():
        with executor._lock:  # a parent thread inside the executor at the moment of the fork
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: its deletions must run, on a thread of its own
        code = 1
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # blocked on the parent's lock: die, never hang
            signal.alarm(20)
            array = _received((8,))
            name = array.shm.name
            del array
            SharedMemoryArray._del_thread_pool.apply_async(lambda: None).get(timeout=15)
            code = 0 if not _segment_exists(name) else 2
        finally:
            os._exit(code)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
