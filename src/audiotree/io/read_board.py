"""The read counters of a process tree: one small shared file, one row of int64 counters per process.

Grain's ``mp_prefetch`` workers and PyTorch's ``DataLoader`` workers are other
processes (started by fork, forkserver or spawn), so what they read is not in
the counters of the process that trains. Each process of a tree therefore adds
its counts to a **board**: a fixed-size file of ``ROWS`` rows of ``FIELDS``
int64 cells, mapped with ``mmap`` by every process that counts.

* **Finding the board.** The first process of a tree to :func:`reserve` a name
  (the *owner*: audiotree reserves it before starting worker processes, and a
  process on its first count) takes ``audiotree-reads-<pid>-<token>`` in
  ``/dev/shm`` (else the temp folder) and puts it in the environment variable
  ``AUDIOTREE_READ_STATS``; every process it starts afterwards, by any start
  method, inherits the variable. No file exists until a process of the tree
  counts its first read. (The name has to be in the environment before the
  first worker starts, which may well be before the owner reads anything
  itself; workers started by other means before it are not summed.)
* **Counting.** A process claims a free row on its first count (one ``open``,
  ``flock`` and ``mmap``, once per process) and from then on adds to its own
  row in memory: no system call per count. Only that process writes its row,
  so the cells need no lock between processes; a thread lock orders the
  process's own threads. A forked child claims a row of its own on its first count.
* **Deaths.** The counts are in the shared file the moment they are made, so a
  worker killed with SIGKILL keeps what it counted. When every row is taken,
  the rows of dead processes are folded into one *retired* row and reused.
* **Cleaning up.** The owner removes the file at exit. A process whose owner
  has died does not make the file again; it counts on the file if it is still
  there (else in its own counters only), and removes it at its own exit. An
  owner killed by a signal (which runs no ``atexit``) leaves its file, a few
  KB of a sparse 512 KB file, until the next board is made: whoever makes one
  removes the boards of owners no longer alive.

Set ``AUDIOTREE_READ_STATS=off`` to keep every count per process.
"""

from __future__ import annotations

import atexit
import fcntl
import mmap
import os
import re
import secrets
import tempfile
import threading
from typing import NamedTuple

__all__ = ["ENV", "BACKENDS", "ROWS", "FIELDS", "Row", "add", "rows", "board_path", "owns_board", "reserve"]

ENV = "AUDIOTREE_READ_STATS"
#: The backends a row counts separately; every other protocol counts as ``"other"``.
BACKENDS = ("s3", "gcs", "http", "other")
ROWS = 4096
FIELDS = 16
# Cells of a row: the process, its parent, cache hits and misses, then per backend requests, bytes, wait (ns).
PID, PARENT, HITS, MISSES, FIRST_BACKEND = 0, 1, 2, 3, 4
REQUESTS, BYTES, WAIT_NS = 0, 1, 2
_SIZE = ROWS * FIELDS * 8
_MAGIC = 0x3153_4441_4552_5441  # b"ATREADS1", little-endian
_RETIRED = 1  # row 0 is the header (magic, rows, fields, owner pid)
_FIRST_SLOT = 2
_NAME = re.compile(r"^audiotree-reads-(\d+)-[0-9a-f]+$")
_OFF = ("0", "off", "no", "false")


_BACKEND_INDEX = {name: i for i, name in enumerate(BACKENDS)}


def backend_cell(backend: str, what: int) -> int:
    """The cell of a row that counts ``what`` (``REQUESTS``, ``BYTES``, ``WAIT_NS``) for ``backend``."""
    return FIRST_BACKEND + 3 * _BACKEND_INDEX.get(backend, len(BACKENDS) - 1) + what


class Row(NamedTuple):
    """One process's row as read from the board: its pid (``-1`` for the retired row), its parent's pid and
    its ``FIELDS - 2`` counters (cache hits, misses, then requests, bytes and wait ns per backend)."""

    pid: int
    parent: int
    counts: tuple[int, ...]


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: str | None = None  # the board's file (None: counting per process only)
        self.owner = False  # this process reserved the name
        self.cells: memoryview | None = None  # the mapped board
        self.row = -1  # first cell of this process's row (-1: not claimed yet)
        self.given_up = False  # the board could not be used: count per process only
        self.reserved = False  # reserve() ran in this process (or its parent, before a fork)


_state = _State()


def _folder() -> str:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def reserve() -> str | None:
    """Names this process tree's board, once per process, and returns its path (``None``: counting per process).

    A process started by one that has a name inherits it (the environment variable); otherwise this process
    becomes the owner of a new name. Called by audiotree before it starts worker processes (Grain's
    ``mp_prefetch``, :func:`audiotree.torch.create_dataloader`), so that workers of every start method count on
    their parent's board, and on a process's first count. Nothing happens at import.
    """
    if _state.reserved:
        return _state.path
    _state.reserved = True
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        _state.path = value
        return _state.path
    _state.path = os.path.join(_folder(), f"audiotree-reads-{os.getpid()}-{secrets.token_hex(6)}")
    _state.owner = True
    os.environ[ENV] = _state.path
    atexit.register(_remove_at_exit, os.getpid())
    return _state.path


def board_path() -> str | None:
    """The board's file for this process tree (it may not exist yet); ``None`` when counting is per process."""
    return _state.path


def owns_board() -> bool:
    """Whether this process reserved the board (the first process of its tree to import audiotree)."""
    return _state.owner


def _owner_pid() -> int | None:
    match = _NAME.match(os.path.basename(_state.path or ""))
    return int(match.group(1)) if match else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _map(fd: int) -> memoryview:
    if os.fstat(fd).st_size < _SIZE:
        os.ftruncate(fd, _SIZE)  # sparse: only the rows written take memory
    cells = memoryview(mmap.mmap(fd, _SIZE)).cast("q")
    if cells[0] == 0:
        cells[1], cells[2], cells[3] = ROWS, FIELDS, _owner_pid() or 0
        cells[_RETIRED * FIELDS + PID] = -1
        cells[0] = _MAGIC
    if cells[0] != _MAGIC or cells[1] != ROWS or cells[2] != FIELDS:
        raise OSError(f"{_state.path} is not an audiotree read board")
    return cells


def _take_row(cells: memoryview) -> int:
    """A free row (or a dead process's, folded into the retired row first), claimed for this process."""
    pid = os.getpid()
    free = next((r for r in range(_FIRST_SLOT, ROWS) if cells[r * FIELDS + PID] == 0), None)
    if free is None:
        for r in range(_FIRST_SLOT, ROWS):
            other = cells[r * FIELDS + PID]
            if other != pid and not _alive(other):
                for f in range(HITS, FIELDS):
                    cells[_RETIRED * FIELDS + f] += cells[r * FIELDS + f]
                    cells[r * FIELDS + f] = 0
                free = r
                break
    if free is None:
        return -1
    base = free * FIELDS
    cells[base + PARENT] = os.getppid()
    cells[base + PID] = pid
    return base


def _remove_stale_boards() -> None:
    """Removes the boards of owners that died by a signal (which runs no ``atexit``) from the board's folder."""
    folder = os.path.dirname(_state.path or "")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        match = _NAME.match(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _claim() -> None:
    """Maps the board and claims this process's row (caller holds the lock); gives up quietly on failure."""
    owner = _owner_pid()
    try:
        fd = os.open(_state.path, os.O_RDWR)
    except FileNotFoundError:
        fd = -1
    except OSError:
        _state.given_up = True
        return
    if fd < 0 and (_state.owner or owner is None or _alive(owner)):
        try:
            fd = os.open(_state.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            _remove_stale_boards()  # whoever makes a board removes those of dead owners
        except FileExistsError:  # another process of the tree made it meanwhile
            fd = os.open(_state.path, os.O_RDWR)
        except OSError:
            pass
    if fd < 0:
        _state.given_up = True
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _state.cells is None:
            _state.cells = _map(fd)
        _state.row = _take_row(_state.cells)
    except (OSError, ValueError):
        _state.given_up = True
    finally:
        _unlock_and_close(fd)
    if _state.row < 0:
        _state.given_up = True
    if not _state.owner and owner is not None and not _alive(owner):
        atexit.register(_remove_at_exit, os.getpid())  # the owner is gone: the last one out removes the board


def add(cells: tuple[tuple[int, int], ...]) -> None:
    """Adds ``value`` to cell ``index`` of this process's row for each ``(index, value)``."""
    state = _state
    if not state.reserved:
        reserve()
    if state.path is None or state.given_up:
        return
    with state.lock:
        if state.row < 0:
            _claim()
            if state.given_up:
                return
        board, base = state.cells, state.row
        for index, value in cells:
            board[base + index] += value


def rows() -> list[Row]:
    """Every claimed row of the board (and the retired row), read under a shared lock; ``[]`` without a board."""
    if not _state.reserved:
        reserve()  # a worker that counted nothing itself still finds its tree's board
    if _state.path is None:
        return []
    try:
        fd = os.open(_state.path, os.O_RDONLY)
    except OSError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        if os.fstat(fd).st_size < _SIZE:
            return []
        with mmap.mmap(fd, _SIZE, prot=mmap.PROT_READ) as mm:
            cells = memoryview(mm).cast("q")
            try:
                if cells[0] != _MAGIC:
                    return []
                out = []
                for r in range(_RETIRED, ROWS):
                    base = r * FIELDS
                    if cells[base + PID] != 0:
                        out.append(Row(cells[base + PID], cells[base + PARENT], tuple(cells[base + 2:base + FIELDS])))
                return out
            finally:
                cells.release()
    finally:
        _unlock_and_close(fd)


def _unlock_and_close(fd: int) -> None:
    # Explicitly: the mmap keeps a duplicate of ``fd``, which would keep the lock held after ``close``.
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _remove_at_exit(pid: int) -> None:
    if os.getpid() != pid or _state.path is None:
        return  # a forked child inherits the handler; only the process that registered it removes the board
    try:
        os.unlink(_state.path)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    _state.lock = threading.Lock()  # a parent thread may have held the old one at the fork
    _state.owner = False
    _state.row = -1  # the child counts in a row of its own (the mapping is shared and kept)
    _state.given_up = False  # a full board may have a free row again


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
