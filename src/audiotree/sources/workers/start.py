"""Starting the ``mp_prefetch`` workers of audiotree pipelines from plain scripts.

Two things stop Grain's ``mp_prefetch`` in a plain ``python script.py`` that has
no ``if __name__ == "__main__":`` guard and does not run ``absl.app.run``:

1. Grain starts its workers with *spawn*, and spawn re-runs the main script in
   every worker. An unguarded script then rebuilds its pipeline inside the
   worker and tries to start workers of its own, which spawn refuses. Grain
   already ships the whole pipeline to the worker with cloudpickle, which
   carries functions and classes defined in ``__main__`` (a ``worker_init_fn``,
   a ``map`` lambda) *by value*, so an audiotree worker never needs the script.
2. With JAX installed, Grain reads its own absl flag
   ``--grain_enable_multiprocess_worker_profiling`` while it creates each worker,
   and absl raises ``UnparsedFlagAccessError`` when nobody parsed flags.

Both fixes are scoped to the workers of audiotree pipelines, i.e. pipelines whose
``mp_prefetch`` is called on a dataset returned by an audiotree builder (or by
the ``map``/``filter``/``batch``/... methods of one):

* **Spawn.** audiotree's ``mp_prefetch`` hands Grain a :class:`WorkerInit`
  (wrapping the user's ``worker_init_fn``). Grain pickles it in the thread that
  starts the worker, immediately before ``Process.start()``. Pickling it *arms*
  that thread once and wraps ``multiprocessing.spawn.get_preparation_data``; the
  next preparation in that thread (the start of that very worker) drops the
  "re-run the main script" entries, and the original function is put back as
  soon as no armed thread is left. Every other process, started by any thread
  (a plain Grain pipeline's workers, a PyTorch ``DataLoader``'s, the user's
  own), gets the standard preparation data, main script included.
* **absl.** While an audiotree ``mp_prefetch`` iterator is open and flags are
  unparsed, Grain's own flag above is marked *present*, the way Grain marks its
  debug flags inside its workers, so it reads its default (``False``). Flags
  are never marked parsed: ``FLAGS.is_parsed()`` stays ``False`` and a later
  ``FLAGS(sys.argv)`` or ``absl.app.run`` parses the command line as usual.
  The mark is removed when the last such iterator closes (unless a parse
  has since set the flag from the command line).

If Grain fails between pickling the marker and starting the worker (say, a
``map`` function that cannot be pickled), the error reaches the caller through
audiotree's iterator, which disarms the calling thread; an arm left in one of
Grain's own worker-starting threads only lasts until that thread's next start.
Likewise, pickling or deep-copying an ``mp_prefetch`` pipeline yourself arms
your thread until its next process start (only a Grain worker's start is
changed by it). While any arm is pending, ``get_preparation_data`` is our
wrapper, which passes every other call through unchanged.

Opt out with the environment variable ``AUDIOTREE_PLAIN_WORKERS=1`` (read each
time ``mp_prefetch`` is called): audiotree pipelines then start their workers
exactly as Grain does, so scripts need the ``__main__`` guard and parsed flags
(the workers still exit with their parent, see :mod:`audiotree.parallel.parent_death`).

Nothing here runs on import.
"""

from __future__ import annotations

import multiprocessing.spawn as spawn
import os
import threading
from typing import Callable

__all__ = [
    "WorkerInit",
    "GRAIN_WORKER_NAME_PREFIX",
    "GRAIN_PROFILING_FLAG",
    "PLAIN_WORKERS_ENV",
    "plain_workers_requested",
    "hold_grain_flag",
    "disarm_this_thread",
]

#: Grain names its prefetch processes ``grain-process-prefetch-<iterator>``.
GRAIN_WORKER_NAME_PREFIX = "grain-process-prefetch"
#: The absl flag Grain reads in the parent while creating each worker.
GRAIN_PROFILING_FLAG = "grain_enable_multiprocess_worker_profiling"
#: Set to ``1`` to start audiotree pipelines' workers exactly as Grain does.
PLAIN_WORKERS_ENV = "AUDIOTREE_PLAIN_WORKERS"

# Entries of spawn's preparation data that make the child re-run ``__main__``.
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")

_lock = threading.Lock()
_armed = threading.local()  # .pending: this thread's next worker start is ours
_pending_starts = 0  # armed threads not yet consumed, over all threads
_installed: Callable | None = None  # our wrapper while it is installed
_original: Callable | None = None  # what it wraps


def plain_workers_requested() -> bool:
    """True when ``AUDIOTREE_PLAIN_WORKERS=1`` asks for Grain's own behaviour."""
    return os.environ.get(PLAIN_WORKERS_ENV, "").strip().lower() in ("1", "true", "yes")


def _wrap(original: Callable) -> Callable:
    def get_preparation_data(name, *args, **kwargs):
        data = original(name, *args, **kwargs)
        if getattr(_armed, "pending", False):
            _armed.pending = False
            _release_start()
            if isinstance(name, str) and name.startswith(GRAIN_WORKER_NAME_PREFIX):
                for key in _MAIN_KEYS:
                    data.pop(key, None)
        return data

    return get_preparation_data


def _arm_this_thread() -> None:
    """The next worker this thread starts belongs to an audiotree pipeline."""
    global _pending_starts, _installed, _original
    if getattr(_armed, "pending", False):
        return
    with _lock:
        _armed.pending = True
        _pending_starts += 1
        if _installed is None:
            _original = spawn.get_preparation_data
            _installed = _wrap(_original)
            spawn.get_preparation_data = _installed


def disarm_this_thread() -> None:
    """Forgets this thread's arm if no start consumed it (Grain failed between the two)."""
    if getattr(_armed, "pending", False):
        _armed.pending = False
        _release_start()


def _release_start() -> None:
    global _pending_starts, _installed, _original
    with _lock:
        _pending_starts -= 1
        if _pending_starts == 0 and _installed is not None:
            # Someone may have wrapped ours meanwhile; then ours stays in their
            # chain, where it passes everything through unchanged.
            if spawn.get_preparation_data is _installed:
                spawn.get_preparation_data = _original
            _installed = _original = None


class WorkerInit:
    """The ``worker_init_fn`` audiotree gives Grain: runs the user's, marks our workers.

    Calling it (in the worker) first makes the worker exit with its parent
    (:func:`audiotree.parallel.parent_death.exit_with_parent`) and keep the
    memory it frees for reuse (:func:`audiotree.parallel.worker_memory.keep_freed_memory`), then calls
    ``fn(worker_index, worker_count)`` if a function was given. Pickling it
    (Grain does so in the thread that starts the worker, just before the start)
    records the parent's pid and whether that thread is the main one, and, with
    ``prepare_spawn`` (audiotree's default), arms that thread, see the module
    docstring.
    """

    __slots__ = ("fn", "prepare_spawn", "parent_pid", "main_thread")

    def __init__(self, fn: Callable[[int, int], None] | None, prepare_spawn: bool = True,
                 parent_pid: int | None = None, main_thread: bool = False):
        self.fn = fn
        self.prepare_spawn = prepare_spawn
        self.parent_pid = parent_pid
        self.main_thread = main_thread

    def __call__(self, worker_index: int, worker_count: int) -> None:
        from audiotree.parallel.parent_death import exit_with_parent
        from audiotree.parallel.worker_memory import keep_freed_memory

        exit_with_parent(self.parent_pid, main_thread=self.main_thread)
        keep_freed_memory()  # fresh pages per item cost a busy worker up to 2.7 ms of system CPU (PROFILE.md)
        if self.fn is not None:
            self.fn(worker_index, worker_count)

    def __reduce__(self):
        from audiotree.parallel.parent_death import started_by_main_thread

        if self.prepare_spawn:
            _arm_this_thread()
        return (WorkerInit, (self.fn, self.prepare_spawn, os.getpid(), started_by_main_thread()))


_flag_lock = threading.Lock()
_flag_holders = 0
_flag_marked = False


def hold_grain_flag() -> Callable[[], None]:
    """Makes Grain's profiling flag readable while flags are unparsed; returns the release.

    Reference counted over open iterators. Only Grain's own flag is touched,
    and only if nobody parsed flags and the flag was not given.
    """
    global _flag_holders, _flag_marked
    from absl import flags

    with _flag_lock:
        _flag_holders += 1
        if not _flag_marked and not flags.FLAGS.is_parsed() and GRAIN_PROFILING_FLAG in flags.FLAGS:
            flag = flags.FLAGS[GRAIN_PROFILING_FLAG]
            if not flag.present:
                flag.present = 1
                _flag_marked = True
    released = False

    def release() -> None:
        global _flag_holders, _flag_marked
        nonlocal released
        with _flag_lock:
            if released:
                return
            released = True
            _flag_holders -= 1
            if _flag_holders == 0 and _flag_marked:
                _flag_marked = False
                flag = flags.FLAGS[GRAIN_PROFILING_FLAG]
                # A parse since then that named the flag has counted it: keep that.
                if flag.present == 1:
                    flag.present = 0

    return release

