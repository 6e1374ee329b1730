"""Exceptions shared by every layer of audiotree.

All of them survive pickling, so an error raised inside a Grain or PyTorch
worker process reaches the parent with its file path intact.
"""

from __future__ import annotations

import os
import re

__all__ = ["AudioReadError", "ChannelMismatchError", "ColumnStoreError", "MissingExtraError", "read_error_category",
           "READ_ERROR_CATEGORIES"]

#: The short categories of :attr:`AudioReadError.category`, each with the message fragments (regular
#: expressions, case-insensitive) that place an error in it; the first category that matches wins.
READ_ERROR_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MP3 LAME tag CRC", (r"LAME tag .* fails its CRC check",)),
    ("MP3 length tag damaged", (r"no usable Xing/Info frame count", r"length tag is damaged",
                                r"has no Xing/Info header\) but decoding stopped")),
    ("MP3 frame header unlike its Info tag", (r"does not match the (Info|Xing) tag",)),
    ("empty file", (r"empty \(0 bytes\)",)),
    ("file not found", (r"The file does not exist", r"FileNotFoundError", r"No such file")),
    ("permission denied", (r"PermissionError", r"permission denied")),
    ("NaN/Inf samples", (r"NaN/Inf",)),
    ("PyAV not installed", (r"needs the optional PyAV",)),
    ("out of memory", (r"not enough memory", r"MemoryError")),
    ("truncated", (r"truncated", r"decoding stopped at frame", r"end-of-stream", r"ends? \d+ bytes early",
                   r"ends .* early")),
    ("checksum mismatch", (r"\bCRC\b", r"checksum", r"MD5")),
    ("corrupt header", (r"header is corrupt", r"header claims", r"STREAMINFO", r"does not record the stream length",
                        r"corrupt")),
    ("not a recognised audio format", (r"Format not recogni[sz]ed", r"Invalid data found", r"not audio",
                                       r"unknown format", r"Unsupported", r"no audio stream")),
    ("storage error", (r"HTTP", r"status \d{3}", r"timed out", r"connection")),
)

_COMPILED = tuple((name, re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE))
                  for name, patterns in READ_ERROR_CATEGORIES)


# The generic advice of a failure that names no cause ("The file may be corrupt, truncated, or not audio at
# all ...") says nothing about the file: it is left out before matching.
_ADVICE = re.compile(r"The file may be corrupt, truncated, or not audio at all.*", re.IGNORECASE | re.DOTALL)


def read_error_category(message: str) -> str:
    """The short category (:data:`READ_ERROR_CATEGORIES`) of a read error's message; ``"undecodable"`` if none fits.

    >>> read_error_category("Failed to read audio file 'a.wav': the file is truncated: its header declares ...")
    'truncated'
    >>> read_error_category("Failed to read audio file 'b.mp3': LibsndfileError: something new")
    'undecodable'
    """
    message = _ADVICE.sub("", message)
    for name, pattern in _COMPILED:
        if pattern.search(message):
            return name
    return "undecodable"


class AudioReadError(OSError):
    """A file could not be decoded as audio.

    The message names the file and the cause; ``file_path`` holds the path;
    ``category`` a short name of the cause that counts alike files alike
    (``"truncated"``, ``"MP3 LAME tag CRC"``, ...: :data:`READ_ERROR_CATEGORIES`),
    given where the error is raised or else derived from the message.
    The original exception, when there is one, is kept as ``__cause__`` in the
    raising process (tracebacks do not cross process boundaries, but the
    message, which embeds the cause, does).
    """

    def __init__(self, message: str, file_path: str | os.PathLike[str] | None = None, category: str | None = None):
        super().__init__(message)
        self.file_path = None if file_path is None else os.fspath(file_path)
        self.category: str = category or read_error_category(str(message))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        # OSError's default reduce would rebuild with (errno, strerror) style
        # args and lose ``file_path``; rebuild with our own signature instead.
        return (type(self), (str(self), self.file_path, self.category))


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
