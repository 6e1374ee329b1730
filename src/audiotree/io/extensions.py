"""File extensions audiotree can decode, and which decoder handles each.

Two decoders are used:

* **soundfile** (libsndfile 1.2.2 as bundled in the soundfile 0.14 wheels) is
  always available and handles the formats in :data:`SOUNDFILE_EXTENSIONS`.
* **PyAV** (the optional ``av`` package, FFmpeg bindings) adds the container
  formats in :data:`PYAV_EXTENSIONS`. It is only imported when a file actually
  needs it, because importing FFmpeg costs tens of milliseconds and memory in
  every data-loader worker.

Extensions are always lowercase and include the leading dot (``".wav"``).
"""

from __future__ import annotations

import functools
import importlib.util

__all__ = [
    "SOUNDFILE_EXTENSIONS",
    "PYAV_EXTENSIONS",
    "pyav_available",
    "supported_extensions",
    "normalize_extension",
]

#: Extensions decoded by libsndfile. Aliases are included where libsndfile
#: sniffs the real format from the header anyway (``.aifc``, ``.oga``,
#: ``.snd``), so the extension only has to be plausible, not exact.
SOUNDFILE_EXTENSIONS: tuple[str, ...] = (
    ".wav",
    ".wave",
    ".flac",
    ".aiff",
    ".aif",
    ".aifc",
    ".ogg",
    ".oga",
    ".opus",
    ".mp3",
    ".caf",
    ".w64",
    ".rf64",
    ".au",
    ".snd",
)

#: Extensions that only PyAV (FFmpeg) can decode. Listed only in
#: :func:`supported_extensions` when ``av`` is installed.
PYAV_EXTENSIONS: tuple[str, ...] = (
    ".m4a",
    ".m4b",
    ".mp4",
    ".aac",
    ".wma",
    ".mka",
    ".webm",
    ".ac3",
    ".wv",
)


@functools.cache
def pyav_available() -> bool:
    """Whether the optional ``av`` package is installed.

    Uses :func:`importlib.util.find_spec`, which locates the package without
    executing it, so calling this (or :func:`supported_extensions`) never pays
    the cost of importing FFmpeg. A broken installation that is found but
    fails to import is reported as an :class:`~audiotree.errors.AudioReadError`
    when a file is actually decoded. The answer is cached for the process.
    """
    try:
        return importlib.util.find_spec("av") is not None
    except (ImportError, ValueError):  # pragma: no cover - exotic import hooks
        return False


def supported_extensions() -> tuple[str, ...]:
    """Extensions that can be decoded in this environment.

    Returns :data:`SOUNDFILE_EXTENSIONS`, followed by :data:`PYAV_EXTENSIONS`
    when PyAV is installed. The order is fixed, so the result is deterministic.
    """
    if pyav_available():
        return SOUNDFILE_EXTENSIONS + PYAV_EXTENSIONS
    return SOUNDFILE_EXTENSIONS


def normalize_extension(ext: str) -> str:
    """Return ``ext`` lowercased with exactly one leading dot.

    ``"WAV"``, ``".wav"`` and ``" .Wav "`` all become ``".wav"``.

    Raises:
        ValueError: if ``ext`` is empty (or only a dot) or contains a path
            separator, which means a path was passed instead of an extension.
    """
    cleaned = ext.strip().lower()
    if cleaned.startswith("."):
        cleaned = cleaned[1:]
    if not cleaned or "/" in cleaned or "\\" in cleaned:
        raise ValueError(f"Not a file extension: {ext!r} (expected e.g. '.wav' or 'flac').")
    return "." + cleaned
