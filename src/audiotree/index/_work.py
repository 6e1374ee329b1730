"""The per-file work of an index build, run in executor workers.

Top-level functions of plain arguments, so any ``concurrent.futures``
executor (processes under spawn, threads, a cluster) can run them. Only the
decoder and the meter are imported: no JAX, no Grain.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["index_file", "index_chunk"]


def _error_text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def index_file(path: str, group: str | None, *, loudness: bool, mono: bool,
               storage_options: dict | None = None) -> dict[str, Any]:
    """One index row (base columns, ``path`` absolute or a URL); never raises for a bad file."""
    from audiotree.errors import AudioReadError
    from audiotree.index.profile import file_profile, profile_step
    from audiotree.io import AudioFile, storage
    from audiotree.io.members import member_stat

    row: dict[str, Any] = {
        "path": path, "group": group, "size": -1, "mtime_ns": -1, "container": None, "codec": None,
        "sample_rate": None, "channels": None, "frames": None, "duration": None, "readable": False,
        "error": None, "error_kind": None, "profile_step": None, "profile": None,
    }
    try:
        # Stat before reading: a file that changes during the build then looks stale, never fresh.
        row["size"], row["mtime_ns"] = member_stat(path, storage_options=storage_options)
        with AudioFile(path, storage_options=storage_options) as f:
            info = f.info
            row.update(
                container=info.format, codec=info.subtype, sample_rate=int(info.sample_rate),
                channels=int(info.channels), frames=int(info.frames), duration=float(info.duration),
            )
            if loudness and (mono or info.channels <= 5):
                row["profile"] = file_profile(f, mono=mono)
                row["profile_step"] = profile_step(info.sample_rate)
        row["readable"] = True
    except (AudioReadError, OSError, ValueError, MemoryError) as exc:
        row["readable"] = False
        row["profile"] = row["profile_step"] = None
        row["error"] = _error_text(exc)
        # A storage that kept failing (resets, 503s) says nothing about the file: the next build reads it again.
        row["error_kind"] = "transient" if storage.is_transient(exc) else "permanent"
    return row


def index_chunk(items: Sequence[tuple[str, str | None]], loudness: bool, mono: bool,
                storage_options: dict | None = None) -> list[dict[str, Any]]:
    """Rows for a chunk of ``(path, group)`` pairs, in order."""
    return [index_file(path, group, loudness=loudness, mono=mono, storage_options=storage_options)
            for path, group in items]
