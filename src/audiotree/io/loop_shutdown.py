"""Stopping fsspec's IO loop before the interpreter shuts down, and forgetting a forked parent's loop.

Why: async fsspec filesystems (s3fs, gcsfs, HTTP) run their requests on one
event loop in a daemon thread (``fsspecIO``). Nothing stops that thread at
exit: it is still inside the loop while the interpreter finalizes. A
process that read through s3fs and pyarrow then sometimes dies after its work
is done with ``terminate called without an active exception`` (SIGABRT, rc
134). Measured here against moto: 1 to 4 of every 12 runs of "open with s3fs,
read with pyarrow, exit" died that way; none of 12 (and none of 20 in the
tests) with the loop stopped first. The likely mechanism, not traced in a
debugger (the crash did not happen under gdb): a daemon thread that wakes
during finalization cannot take the GIL and is ended by unwinding its stack,
and with pyarrow's C++ runtime loaded that unwinding can reach a frame that
must not throw, which calls ``std::terminate``.

A forked child (torch DataLoader workers, multiprocessing "fork") inherits
the parent's loop object but not its thread. The object still says it is
running, so a filesystem inherited from the parent that is garbage collected
in the child tries to close its session *on* that loop; if the collection
happens inside the child's own fsspec loop, the close is scheduled there as a
task that uses objects bound to the parent's loop: the likely source of the
reported "Task exception was never retrieved ... attached to a different
loop" from torch workers (that message did not appear in our runs here, with
or without this module; that the child sees the inherited loop as stopped is
what the tests check).

How: :func:`install` (called by :func:`audiotree.io.storage.filesystem`, so
nothing happens on import and nothing at all for local files) registers, once
per process:

* an ``atexit`` handler that stops the current process's fsspec loop and
  joins its thread (a few seconds at most); s3fs's own exit finalizers then
  close their sockets directly;
* a fork handler that, in the child, marks the inherited loop object as not
  running (the child never runs it), so the finalizers of inherited
  filesystems close their sockets directly instead of scheduling a task.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

__all__ = ["install", "stop_io_loop", "close_before_stop"]

_lock = threading.Lock()
_registered = False
_parent_loop = None  # the fsspec loop seen just before a fork (None when there is none)
_closers: list = []  # closer(loop), each run before the loop stops (sessions of our own on it)

#: Seconds :func:`stop_io_loop` waits for the IO thread to finish.
JOIN_SECONDS = 5.0


def _fsspec_io():
    """(loop, thread) of this process's fsspec IO loop, or (None, None) when it has none (or fsspec is not loaded)."""
    asyn = sys.modules.get("fsspec.asyn")
    if asyn is None:
        return None, None
    return asyn.loop[0], asyn.iothread[0]


def stop_io_loop(timeout: float = JOIN_SECONDS) -> bool:
    """Stops this process's fsspec IO loop and waits for its thread; True when no such thread is left running.

    Safe to call when there is no loop; afterwards fsspec starts a new loop on its next call.
    """
    loop, thread = _fsspec_io()
    if loop is None or thread is None or not thread.is_alive():
        return True
    if thread is threading.current_thread():  # called from inside the loop: cannot wait for ourselves
        return False
    for closer in list(_closers):
        closer(loop)
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:  # closed already
        return True
    thread.join(timeout)
    if thread.is_alive():
        return False
    asyn = sys.modules["fsspec.asyn"]
    if asyn.loop[0] is loop:  # let fsspec make a fresh loop if anything runs after us
        asyn.loop[0] = None
        asyn.iothread[0] = None
    return True


def close_before_stop(closer) -> None:
    """Has :func:`stop_io_loop` call ``closer(loop)`` (in the stopping thread, the loop still running) before it
    stops the loop: for a module that keeps a client session of its own on it (:mod:`audiotree.io.signed_get`)."""
    if closer not in _closers:
        _closers.append(closer)


def _before_fork() -> None:
    global _parent_loop
    _parent_loop = _fsspec_io()[0]


def _after_fork_in_parent() -> None:
    global _parent_loop
    _parent_loop = None


def _after_fork_in_child() -> None:
    """The inherited loop has no thread here: say so, so nothing schedules work on it."""
    global _parent_loop
    loop, _parent_loop = _parent_loop, None
    if loop is not None and getattr(loop, "_thread_id", None) is not None:
        # asyncio's is_running() is "has a thread id"; the thread that ran it exists only in the parent.
        loop._thread_id = None


def install() -> None:
    """Registers the exit and fork handlers (idempotent; both are inherited by forked children)."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                                after_in_child=_after_fork_in_child)
        atexit.register(stop_io_loop)
        _registered = True
