"""What makes a column store trustworthy: checked reads of its files, and the index version it belongs to.

**Every byte read is checked.** Each file of a store (``NAME.bin``, every kept
``.npy``) has a sidecar ``NAME.crc``: the CRC-32 of each 4 KiB chunk, as
little-endian uint32. A read (:meth:`CheckedFile.read`) reads the whole chunks
that hold the bytes it wants, and their CRCs, and compares them: a flipped
byte anywhere in what a process reads is a :class:`~audiotree.errors.ColumnStoreError`
naming the file, never a wrong label id, segment span or group. The cost is
per read, not per file: a row read of a few bytes costs one 4 KiB chunk and
its CRC (about 2 microseconds on a 4 GB/s CRC, from the page cache), so
opening a store stays constant-time whatever its size, where hashing each
file whole at open would read the entire store (5 GB at 10^7 rows with
loudness profiles) in every process. ``benchmarks/store_check.py`` measures
both.

**A store belongs to one exact index.** :func:`index_digest` hashes the index
file's content (SHA-1 over the whole file, local indexes; remembered beside
the store against the file's device, inode, size, modification and change
times, so an unchanged index is not read again), or, for a remote index, its
size, time and Parquet footer. An index swapped for another of the same size
and modification time (``cp -p``, ``rsync -t``) has another digest, so
another store.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib

import numpy as np

from audiotree.errors import ColumnStoreError

__all__ = ["CHUNK", "CheckedFile", "damaged", "gone", "write_checksums", "index_digest", "save_checked_npy"]

#: Bytes per checked chunk (one page).
CHUNK = 4096
_SUFFIX = ".crc"
_BLOCK = 1 << 24  # bytes hashed per step when writing checksums or digesting an index


def damaged(path: str, what: str) -> ColumnStoreError:
    """The error for store file ``path`` (or its folder) found damaged: it names the file and how to rebuild."""
    from audiotree.commands import store_delete_command

    folder = path if os.path.isdir(path) else os.path.dirname(path)
    return ColumnStoreError(
        f"{path}: the index's column store is damaged ({what}). The store is a cache derived from the index: "
        f"delete it ({store_delete_command(folder)}) and the next dataset built over the index writes it again.",
        path)


def gone(folder: str, what: str) -> ColumnStoreError:
    """The error for a store generation that was removed while a dataset planned on it still reads it."""
    return ColumnStoreError(
        f"{folder}: the column store this dataset was planned on is gone ({what}). The index was rebuilt since and "
        "the old store was removed; build the dataset again (restart the job) to read the index as it is now.",
        folder)


def _chunk_crcs(data: memoryview) -> list[int]:
    return [zlib.crc32(data[k:k + CHUNK]) for k in range(0, len(data), CHUNK)]


def write_checksums(path: str) -> None:
    """Writes ``path``'s sidecar ``path.crc`` (a CRC-32 per :data:`CHUNK` bytes), atomically."""
    crcs: list[int] = []
    with open(path, "rb") as f:
        while True:
            block = f.read(_BLOCK)  # a multiple of CHUNK: chunks never straddle two blocks
            if not block:
                break
            crcs.extend(_chunk_crcs(memoryview(block)))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=_SUFFIX)
    with os.fdopen(fd, "wb") as f:
        f.write(np.asarray(crcs, dtype="<u4").tobytes())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path + _SUFFIX)


def save_checked_npy(path: str, array: np.ndarray) -> None:
    """Saves ``array`` as ``.npy`` at ``path`` with its checksums, atomically (checksums first, then the data).

    A reader that finds the data finds its checksums; concurrent writers of
    the same name write the same content (every kept name says its content).
    """
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".npy")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array, allow_pickle=False)
        os.chmod(tmp, 0o644)
        write_checksums(tmp)
        os.replace(tmp + _SUFFIX, path + _SUFFIX)
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp + _SUFFIX):
            if os.path.exists(leftover):
                os.unlink(leftover)


class CheckedFile:
    """One store file opened for checked, positioned reads (see the module docstring)."""

    __slots__ = ("path", "size", "_fd", "_crc_fd")

    def __init__(self, path: str):
        self.path = path
        self._fd = self._crc_fd = -1
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags)
            self._crc_fd = os.open(path + _SUFFIX, flags)
        except OSError as exc:
            self.close()
            if not os.path.isdir(os.path.dirname(path)):
                raise gone(os.path.dirname(path), f"{os.path.basename(path)} cannot be opened") from None
            raise damaged(path, f"it or its checksums cannot be opened ({exc.strerror})") from None
        self.size = os.fstat(self._fd).st_size
        chunks = -(-self.size // CHUNK)
        if os.fstat(self._crc_fd).st_size != 4 * chunks:
            self.close()
            raise damaged(path, f"its {self.size} bytes do not match its checksum file {os.path.basename(path)}{_SUFFIX}")

    def read(self, offset: int, count: int) -> bytes:
        """``count`` bytes at ``offset``, checked against their chunks' CRCs."""
        if count <= 0:
            return b""
        if offset < 0 or offset + count > self.size:
            raise damaged(self.path, f"it ends at byte {self.size}, before byte {offset + count}")
        first, last = offset // CHUNK, (offset + count - 1) // CHUNK
        lo = first * CHUNK
        data = os.pread(self._fd, min((last + 1) * CHUNK, self.size) - lo, lo)
        crcs = os.pread(self._crc_fd, 4 * (last - first + 1), 4 * first)
        if len(data) != min((last + 1) * CHUNK, self.size) - lo or len(crcs) != 4 * (last - first + 1):
            raise damaged(self.path, "it changed size while read")
        if first == last:  # (the common case: a row's few bytes)
            intact = zlib.crc32(data) == int.from_bytes(crcs, "little")
        else:
            intact = _chunk_crcs(memoryview(data)) == np.frombuffer(crcs, dtype="<u4").tolist()
        if not intact:
            raise damaged(self.path, f"bytes {lo} to {lo + len(data)} do not match their checksums: it was edited "
                                     "or corrupted")
        return data[offset - lo:offset - lo + count]

    @property
    def descriptors(self) -> tuple[int, int]:
        """The open file descriptors (the data's and its checksums'); ``-1`` once closed."""
        return self._fd, self._crc_fd

    def close(self) -> None:
        for fd in (self._fd, self._crc_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._crc_fd = -1


def index_digest(index_path: str, memo_folder: str) -> tuple[int, int, str]:
    """``(size, mtime_ns, digest)`` of the index at ``index_path`` (see the module docstring).

    A local index's content digest is remembered in ``memo_folder`` (the
    store's folder) against the file's stat, including its change time and
    inode, which no copy preserves.
    """
    from audiotree.io import storage

    if storage.is_url(index_path):
        from audiotree.io.members import member_stat

        size, mtime = member_stat(index_path)
        return int(size), int(mtime), _remote_digest(index_path, size, mtime)
    st = os.stat(index_path)
    stamp = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo = os.path.join(memo_folder, "index-digest.json")
    try:
        with open(memo, encoding="utf-8") as f:
            known = json.load(f)
        if known.get("stat") == stamp and isinstance(known.get("digest"), str):
            return st.st_size, st.st_mtime_ns, known["digest"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = hashlib.sha1()  # (twice BLAKE2b's speed here; it tells versions apart, no adversary involved)
    with open(index_path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    value = "content-" + digest.hexdigest()
    try:
        os.makedirs(memo_folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"stat": stamp, "digest": value}, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache: the digest is computed again next time
    return st.st_size, st.st_mtime_ns, value


def _remote_digest(url: str, size: int, mtime: int) -> str:
    """A remote index's size, time and Parquet footer (its schema, metadata, row groups and statistics)."""
    from audiotree.io.remote_file import open_input

    handle = open_input(url)
    try:
        handle.seek(-8, os.SEEK_END)
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or not 0 < length < size:
            raise ValueError(f"{url} is not a Parquet file (no footer); it is not a corpus index.")
        handle.seek(-8 - length, os.SEEK_END)
        footer = handle.read(length)
    finally:
        handle.close()
    digest = hashlib.blake2b(f"{size}:{mtime}:".encode(), digest_size=16)
    digest.update(footer)
    return "footer-" + digest.hexdigest()
