"""Exceptions shared by every layer of audiotree.

All of them survive pickling, so an error raised inside a Grain or PyTorch
worker process reaches the parent with its file path intact.
"""

from __future__ import annotations

import os

__all__ = ["AudioReadError"]


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
