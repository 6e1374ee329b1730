"""Worker processes that exit when their parent dies.

A training script killed with SIGKILL (the OOM killer, a pre-empted job, a
scheduler's hard stop) runs no ``finally`` and no ``atexit``: the worker
processes it started are re-parented and would keep running, holding their
memory, and (through them) the parent's ``resource_tracker`` process too.
Every worker that audiotree starts or configures (Grain ``mp_prefetch``
workers of audiotree pipelines, :mod:`audiotree.torch` ``DataLoader`` workers,
the ``"process"`` pools of the index and of renders) calls
:func:`exit_with_parent` as it starts:

* a daemon **watchdog thread** compares ``os.getppid()`` with the parent's pid
  every :data:`POLL_SECONDS` and ends the worker with ``os._exit`` when they
  differ (every POSIX system; on Windows, where re-parenting does not change
  ``os.getppid()``, it asks whether the parent pid is still alive);
* on Linux, when the worker was started by the parent's **main thread**, also
  ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel ends it the moment the
  parent dies. Linux sends that signal when the *thread* that forked the child
  exits, so it is only used when that thread lives as long as the process;
  workers started by other threads (Grain starts its workers from a thread
  pool) rely on the watchdog.

The worker exits without running finalisers (its parent, who would read its
results, is gone). Shared-memory blocks it created are registered with the
parent's resource tracker, which outlives the last worker by a moment, unlinks
what is left and exits too. Nothing here runs on import.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["exit_with_parent", "exit_with_pickling_parent", "PICKLED_BY", "started_by_main_thread", "POLL_SECONDS",
           "ORPHAN_EXIT_CODE"]

#: How often the watchdog looks at the parent (seconds).
POLL_SECONDS = 0.25
#: The exit status of a worker that ended because its parent died.
ORPHAN_EXIT_CODE = 70

_PR_SET_PDEATHSIG = 1
_lock = threading.Lock()
_watched: tuple[int, int] | None = None  # (this process's pid, the parent pid it watches)


def started_by_main_thread() -> bool:
    """True in the parent's main thread: the thread whose exit ends the process."""
    return threading.current_thread() is threading.main_thread()


def _set_parent_death_signal() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux; False where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl (musl without it, sandboxes)
        return False


def _parent_alive(parent_pid: int, first_ppid: int) -> bool:
    if os.name != "nt":
        if os.getppid() != first_ppid:  # re-parented: the process that started us is gone
            return False
        if parent_pid != first_ppid:
            # Started through an intermediary (multiprocessing's forkserver): the parent is not our ppid,
            # so ask whether it still exists.
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
        return True
    try:  # Windows keeps the original ppid: ask whether that process still exists
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, parent_pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        ctypes.windll.kernel32.CloseHandle(handle)
        return code.value == 259  # STILL_ACTIVE
    except Exception:  # noqa: BLE001 - cannot tell: assume alive rather than kill a working worker
        return True


def _watch(parent_pid: int, first_ppid: int, interval: float) -> None:
    event = threading.Event()
    while _parent_alive(parent_pid, first_ppid):
        event.wait(interval)
    os._exit(ORPHAN_EXIT_CODE)  # pylint: disable=protected-access


def exit_with_parent(parent_pid: int | None = None, *, main_thread: bool = False,
                     interval: float = POLL_SECONDS) -> None:
    """Makes this (worker) process exit within about ``interval`` s of its parent's death.

    ``parent_pid`` defaults to ``os.getppid()``; a parent that is already gone
    ends the worker at once. ``main_thread=True`` says the parent started this
    process from its main thread, which allows Linux's parent-death signal (see
    the module docstring). Idempotent: one watchdog per process.

    >>> started_by_main_thread()  # what the parent passes as main_thread=
    True
    """
    global _watched
    parent = os.getppid() if parent_pid is None else int(parent_pid)
    with _lock:
        again = _watched is not None and _watched[0] == os.getpid()
        if not again:
            _watched = (os.getpid(), parent)
    if again:
        # Already watched (a reader armed it when it was unpickled): add the kernel's signal if now allowed.
        if main_thread and _watched[1] == parent == os.getppid():
            _set_parent_death_signal()
        return
    first_ppid = os.getppid()
    if main_thread and first_ppid == parent:
        _set_parent_death_signal()
    if not _parent_alive(parent, first_ppid):  # died before we could watch (the signal would never come)
        os._exit(ORPHAN_EXIT_CODE)  # pylint: disable=protected-access
    threading.Thread(target=_watch, args=(parent, first_ppid, interval), name="audiotree-parent-watch",
                     daemon=True).start()


#: The key under which a reader's pickle records the pid of the process that pickled it.
PICKLED_BY = "_audiotree_pickled_by"


def _ancestors(levels: int = 3) -> list[int]:
    """This process's parent, grandparent, ... (``levels`` of them where ``/proc`` tells; the parent elsewhere)."""
    out = [os.getppid()]
    for _ in range(levels - 1):
        try:
            with open(f"/proc/{out[-1]}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if ppid <= 1:
            break
        out.append(ppid)
    return out


def exit_with_pickling_parent(pickled_by: int | None) -> None:
    """Arms :func:`exit_with_parent` for the process ``pickled_by`` when this process is its child (or grandchild,
    through a fork server) unpickling an object it pickled; nothing otherwise.

    Why: a data source handed to a plain Grain pipeline (``MapDataset.source(
    reader) ... mp_prefetch(...)``) or a torch ``DataLoader`` travels to each
    worker by pickle, with no audiotree code in the worker's start. The
    reader's ``__setstate__`` calls this, so those workers exit with the
    script too. The same process (a copy), an unrelated one loading a saved
    pickle, or a Ray worker arm nothing.

    >>> exit_with_pickling_parent(None), exit_with_pickling_parent(os.getpid())
    (None, None)
    """
    if pickled_by is None or int(pickled_by) == os.getpid() or int(pickled_by) not in _ancestors():
        return
    exit_with_parent(int(pickled_by))
