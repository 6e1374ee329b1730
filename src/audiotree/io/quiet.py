"""Keeping libmpg123's pre-roll complaints off the terminal, without touching fd 2.

Why: after every MP3 seek we decode a few frames early and discard them (see
:mod:`audiotree.io.decode`). Those frames lack their bit reservoir, and
libmpg123 prints ``part2_3_length ... too large`` for each of them. The
messages are expected noise, but libmpg123 is linked statically into
soundfile's libsndfile, which neither sets ``MPG123_QUIET`` nor gives us the
decoder handle to set it, so the messages cannot be turned off at the source.

How: libmpg123 prints with ``fprintf(stderr, ...)``, i.e. through the C
library's ``stderr`` *stream*, not through Python. While at least one thread
decodes MP3, :func:`quiet_c_stderr` points that stream variable at a stream
opened on ``/dev/null`` (opened once and never closed, so a thread that already
picked up either stream keeps writing to a valid one), then puts the original
back. File descriptor 2 and Python's ``sys.stderr`` are never touched, so
every thread's tracebacks, warnings, logging, ``print(..., file=sys.stderr)``
and raw ``os.write(2, ...)`` still reach the terminal during a decode.

What is still hidden: while an MP3 read is in progress in some thread, text
that C or C++ code in *another* thread writes through the C ``stderr`` stream
(``fprintf(stderr)``/``fputs``/``perror``; for example native-library log lines)
is dropped. Set ``AUDIOTREE_DECODER_MESSAGES=1`` to keep every message
(libmpg123's included). Only glibc (Linux) and macOS expose the stream as a
writable variable; elsewhere (e.g. musl, whose ``stderr`` is a constant)
nothing is silenced and the messages are printed.

A child forked while the stream is redirected gets the original stream back
(a fork handler, registered the first time the stream is redirected).
Nothing happens on import.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Iterator

__all__ = ["quiet_c_stderr", "DECODER_MESSAGES_ENV"]

#: Set to ``1`` to let decoder messages through.
DECODER_MESSAGES_ENV = "AUDIOTREE_DECODER_MESSAGES"

_lock = threading.Lock()
_users = 0  # threads inside quiet_c_stderr()
_saved: int | None = None  # the C stream stderr pointed at before we redirected it
_variable: ctypes.c_void_p | None = None  # the C library's `stderr` variable
_null_stream: int | None = None  # FILE* on /dev/null, never closed
_state = "unknown"  # "unknown" -> "ready" or "unavailable"


def _stream_symbol() -> str | None:
    if sys.platform == "darwin":
        return "__stderrp"
    if sys.platform.startswith("linux"):
        try:
            if (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
                return "stderr"
        except (ValueError, OSError):
            pass
    return None  # musl's stderr is a constant; other platforms untested


def _prepare() -> bool:
    """Finds the C ``stderr`` variable and opens the null stream, once."""
    global _variable, _null_stream, _state
    if _state == "unknown":
        _state = "unavailable"
        symbol = _stream_symbol()
        if symbol is not None:
            try:
                libc = ctypes.CDLL(None)
                fopen = libc.fopen
                fopen.restype = ctypes.c_void_p
                fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
                variable = ctypes.c_void_p.in_dll(libc, symbol)
                stream = fopen(os.devnull.encode(), b"w")
            except (OSError, ValueError, AttributeError):
                stream = None
            if stream and variable.value:
                _variable, _null_stream, _state = variable, stream, "ready"
                os.register_at_fork(after_in_child=_restore_in_child)
    return _state == "ready"


def _restore_in_child() -> None:
    # The threads that redirected the stream do not exist in the child.
    global _lock, _users, _saved
    _lock = threading.Lock()
    if _saved is not None and _variable is not None:
        _variable.value = _saved
    _users, _saved = 0, None


@contextlib.contextmanager
def quiet_c_stderr(active: bool = True) -> Iterator[None]:
    """Drops what C code prints through the C ``stderr`` stream, for the duration.

    Reference counted across threads: the first thread in redirects the
    stream, the last one out restores it. A no-op when ``active`` is false,
    when ``AUDIOTREE_DECODER_MESSAGES=1``, or where the stream cannot be
    redirected (see the module docstring).
    """
    global _users, _saved
    if not active or os.environ.get(DECODER_MESSAGES_ENV) == "1":
        yield
        return
    with _lock:
        if not _prepare():
            entered = False
        else:
            entered = True
            if _users == 0:
                _saved = _variable.value
                _variable.value = _null_stream
            _users += 1
    try:
        yield
    finally:
        if entered:
            with _lock:
                _users -= 1
                if _users == 0 and _saved is not None:
                    _variable.value = _saved
                    _saved = None
