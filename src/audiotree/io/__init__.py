"""Decoding layer: open audio files once and read sample-exact excerpts.

Re-exports the public API of :mod:`audiotree.io.decode`,
:mod:`audiotree.io.extensions` and :mod:`audiotree.io.read_totals` (what a
pipeline read from storage, over all its workers), loaded on first use: importing a low module of
the package (the byte layer's :mod:`audiotree.io.byte_paths`) loads no
decoder.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "AudioFile": "audiotree.io.decode",
    "AudioInfo": "audiotree.io.decode",
    "probe": "audiotree.io.decode",
    "read_frames": "audiotree.io.decode",
    "SOUNDFILE_EXTENSIONS": "audiotree.io.extensions",
    "PYAV_EXTENSIONS": "audiotree.io.extensions",
    "pyav_available": "audiotree.io.extensions",
    "supported_extensions": "audiotree.io.extensions",
    "normalize_extension": "audiotree.io.extensions",
    "ReadStats": "audiotree.io.read_totals",
    "read_stats": "audiotree.io.read_totals",
    "reset_read_stats": "audiotree.io.read_totals",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'audiotree.io' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
