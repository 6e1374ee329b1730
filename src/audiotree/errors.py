"""Exceptions shared by every layer of audiotree.

All of them survive pickling, so an error raised inside a Grain or PyTorch
worker process reaches the parent with its file path intact.
"""

from __future__ import annotations

import os

__all__ = ["AudioReadError", "ChannelMismatchError", "ColumnStoreError", "MissingExtraError"]


class AudioReadError(OSError):
    """A file could not be decoded as audio.

    The message names the file and the cause; ``file_path`` holds the path.
    The original exception, when there is one, is kept as ``__cause__`` in the
    raising process (tracebacks do not cross process boundaries, but the
    message, which embeds the cause, does).
    """

    def __init__(self, message: str, file_path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.file_path = None if file_path is None else os.fspath(file_path)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        # OSError's default reduce would rebuild with (errno, strerror) style
        # args and lose ``file_path``; rebuild with our own signature instead.
        return (type(self), (str(self), self.file_path))


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    An ``ImportError``, so ``except ImportError`` keeps working; the CLI prints
    it as one ``Error:`` line (exit code 2).
    """


class ChannelMismatchError(ValueError):
    """Files of one ``mono=False`` dataset have different channel counts.

    ``file_path`` is the first file that differs, ``channels`` its count,
    ``expected`` the dataset's, ``count`` how many files differ (``None``:
    found while reading, so unknown).
    """

    def __init__(self, file_path: str, channels: int, expected: int, count: int | None = None):
        self.file_path, self.channels, self.expected, self.count = str(file_path), int(channels), int(expected), count
        others = "" if not count or count <= 1 else f" (and {count - 1} more file(s) differ)"
        super().__init__(f"'{self.file_path}' has {self.channels} channels but this dataset expects "
                         f"{self.expected}{others}; average the channels (mono=True; Output(mono=True) in a "
                         "builder), expect this count (Output(channels=...)), or remove the file.")

    def cli_message(self) -> str:
        """The same, in the command line's words."""
        others = "" if not self.count or self.count <= 1 else f" (and {self.count - 1} more file(s) differ)"
        return (f"'{self.file_path}' has {self.channels} channels but the other files have {self.expected}"
                f"{others}; pass --mono to mix every file down, or remove the file.")

    def __reduce__(self):
        return (type(self), (self.file_path, self.channels, self.expected, self.count))


class ColumnStoreError(ValueError):
    """An index's column store cannot serve a read: a file of it is damaged, or its generation is gone.

    The message names the store file (``store_path``) and what to do: the store
    is a cache derived from the index, so deleting its folder is always safe.
    A ``ValueError``, as before it had a class of its own.
    """

    def __init__(self, message: str, store_path: str | None = None):
        super().__init__(message)
        self.store_path = store_path

    def __reduce__(self):
        return (type(self), (str(self), self.store_path))
