"""Filesystem helpers for the writers and readers: safe paths and atomic files.

* :func:`safe_join` resolves a path found in a manifest against the dataset
  folder and refuses absolute paths, ``..`` components (POSIX or Windows
  spelling) and symlinks that lead outside the folder.
* :func:`write_bytes_atomic` / :func:`write_json_atomic` write a temporary
  file in the same folder, ``fsync`` it, ``os.replace`` it over the target and
  ``fsync`` the folder, so a reader sees either the old or the new content,
  even after a crash or power loss.
* :func:`private_temp_folder` makes a scratch folder that the process that
  made it removes when it exits (also a Grain or torch worker).
"""

from __future__ import annotations

import contextlib
import errno
import json
import ntpath
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "safe_join",
    "check_relative",
    "write_bytes_atomic",
    "write_json_atomic",
    "atomic_file",
    "fsync_dir",
    "fsync_path",
    "read_limited",
    "npz_problem",
    "naming_os_errors",
    "private_temp_folder",
]


def check_relative(rel: Any, where: str = "manifest") -> str:
    """Lexical checks of a relative path from a manifest; returns it as ``str``.

    Refuses non-strings, empty strings, NUL bytes, absolute paths (``/x``,
    ``C:\\x``, ``\\\\server\\x``) and any ``..`` component (split on ``/`` and ``\\``).
    """
    if not isinstance(rel, str):
        raise ValueError(f"{where}: a path must be a string, got {type(rel).__name__}.")
    if not rel or "\x00" in rel:
        raise ValueError(f"{where}: refusing an empty path or a path with a NUL byte ({rel!r}).")
    if os.path.isabs(rel) or rel.startswith(("/", "\\")) or ntpath.isabs(rel) or ntpath.splitdrive(rel)[0]:
        raise ValueError(f"{where}: refusing to open an absolute path {rel!r}; paths must be relative to the dataset folder.")
    parts = rel.replace("\\", "/").split("/")
    if ".." in parts:
        raise ValueError(f"{where}: refusing a path containing '..' ({rel!r}); it could leave the dataset folder.")
    return rel


def safe_join(base: str | os.PathLike, rel: Any, where: str = "manifest") -> Path:
    """``base / rel``, refusing anything that could leave ``base``.

    Raises ``ValueError`` (prefixed with ``where``) for an absolute path, a
    ``..`` component, or a path that resolves outside ``base`` after following
    symlinks. The file itself need not exist.
    """
    rel = check_relative(rel, where)
    base_resolved = Path(base).resolve()
    target = (Path(base) / rel).resolve()
    if target != base_resolved and not target.is_relative_to(base_resolved):
        raise ValueError(
            f"{where}: {rel!r} resolves outside the dataset folder {str(base_resolved)!r} "
            f"(to {str(target)!r}, through a symlink); refusing to open it."
        )
    return target


_WHAT_TO_DO = {
    errno.ENOSPC: "free space on that disk, then write again",
    errno.EDQUOT: "free space or raise the disk quota, then write again",
    errno.EFBIG: "the file system cannot hold a file this large; write to another one",
}


@contextlib.contextmanager
def naming_os_errors(path: str | os.PathLike) -> Iterator[None]:
    """Gives an ``OSError`` raised inside the block the file it concerns.

    ``os.pwrite``, ``os.fsync`` and a buffered ``write`` report a full disk as
    ``OSError(ENOSPC)`` with no file name. This re-raises such an error (same
    type and errno) with ``filename=path`` and, for a full disk or quota, what
    to do. Errors that already name a file pass through unchanged.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        reason = exc.strerror or os.strerror(exc.errno)
        hint = _WHAT_TO_DO.get(exc.errno)
        raise type(exc)(exc.errno, f"{reason}; {hint}" if hint else reason, os.fspath(path)) from exc


def fsync_dir(directory: str | os.PathLike) -> None:
    """Flushes a folder's entries (new, renamed, deleted files) to disk; best effort."""
    try:
        fd = os.open(os.fspath(directory), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_path(path: str | os.PathLike) -> None:
    """``fsync`` an existing file by path."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yields a temporary path beside ``path``; on success it replaces ``path``.

    The caller writes the temporary file (by name) inside the block. On normal
    exit it is ``fsync``-ed and ``os.replace``-d over ``path``, then the folder
    is ``fsync``-ed. On an exception the temporary file is removed. The
    temporary name starts with a dot and keeps ``suffix`` (some writers choose
    the format from it).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    tmp_path = Path(tmp)
    try:
        # mkstemp creates 0600 files; keep the target's mode, or use an ordinary 0644.
        try:
            mode = os.stat(path).st_mode & 0o777
        except OSError:
            mode = 0o644
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    try:
        with naming_os_errors(path):
            yield tmp_path
            fsync_path(tmp_path)
            os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise
    fsync_dir(path.parent)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Atomically replaces ``path`` with ``data`` (temp file, fsync, rename, fsync folder)."""
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, obj: Any, *, indent: int | None = 1) -> Path:
    """Atomically replaces ``path`` with ``obj`` as UTF-8 JSON (no NaN/inf allowed)."""
    text = json.dumps(obj, indent=indent, sort_keys=False, allow_nan=False, ensure_ascii=False)
    return write_bytes_atomic(path, (text + "\n").encode("utf-8"))


def read_limited(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """Reads a whole small file, refusing one larger than ``limit`` bytes."""
    path = os.fspath(path)
    size = os.stat(path).st_size
    if size > limit:
        raise ValueError(
            f"{path}: {what} is {size} bytes, over the {limit}-byte limit for such a file; it is not an "
            "audiotree artifact or it was damaged."
        )
    with open(path, "rb") as f:
        return f.read(limit + 1)[: limit + 1]


def npz_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not an ``.npz`` (zip) archive, or ``None`` if it starts like one.

    Checked before ``np.load``, which would otherwise treat unknown bytes as a
    pickle and report a misleading error.
    """
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x93NUMPY"):
        return "it is a single .npy array, not an .npz archive"
    if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "it is not a readable .npz archive (no zip header)"
    return None


def close_keeping_error(writer: Any, exc: BaseException | None) -> None:
    """``writer.close()`` at the end of a ``with`` block.

    Keeps the error that ended the block (e.g. a full disk): a close() that
    fails after it (often for the same reason) is told in a note, not raised over it.
    """
    if exc is None:
        writer.close()
        return
    try:
        writer.close()
    except Exception as close_error:
        exc.add_note(f"{type(writer).__name__}.close() failed too: {close_error}; the last committed manifest is kept.")


def _host_tag() -> str:
    """Eight hex digits naming this host and pid namespace (a pid means one process only within them)."""
    import hashlib
    import socket

    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}\x00{namespace}".encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _remove_own_folder(path: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked child inherits the finaliser, not the folder
        import shutil

        shutil.rmtree(path, ignore_errors=True)


_SWEPT: set[str] = set()


def _sweep_dead(prefix: str, tag: str) -> None:
    """Removes this host's ``prefix`` folders whose process is gone (killed before it could remove them)."""
    import shutil

    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(f"{prefix}{tag}-")]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) + len(tag) + 1:].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def private_temp_folder(prefix: str, owner: Any = None) -> Path:
    """A new folder in the system temp folder, removed with its files when the process that made it exits.

    It is removed at the normal exit of the main process and of a
    multiprocessing child (Grain's ``mp_prefetch`` and torch ``DataLoader``
    workers, fork or spawn), by ``multiprocessing.util.Finalize`` (``atexit``
    does not run in forked children), and as soon as ``owner`` (when given)
    is garbage collected. Only the making process removes it.

    The name is ``{prefix}{host}-{pid}-{random}``. A process killed by
    SIGKILL cannot remove its folder; the first call with the same prefix in
    a later process of the same host and pid namespace removes the folders
    of that prefix whose process is gone.

    >>> folder = private_temp_folder("audiotree-doc-")
    >>> folder.is_dir(), folder.name.startswith("audiotree-doc-")
    (True, True)
    """
    from multiprocessing import util

    tag = _host_tag()
    if prefix not in _SWEPT:
        _SWEPT.add(prefix)
        _sweep_dead(prefix, tag)
    path = tempfile.mkdtemp(prefix=f"{prefix}{tag}-{os.getpid()}-")
    # Runs when owner is collected and at exit (after the process's own children are joined).
    util.Finalize(owner, _remove_own_folder, args=(path, os.getpid()), exitpriority=-10)
    return Path(path)
