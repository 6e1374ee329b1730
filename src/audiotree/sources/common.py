"""What every dataset builder checks and resolves first: arguments, files, channels.

Shared by :mod:`audiotree.sources.datasets` and :mod:`audiotree.sources.windowed`
(which is why it is a module of its own: neither builder imports the other's
internals).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from audiotree.errors import AudioReadError
from audiotree.io.decode import probe
from audiotree.seeds import check_seed
from audiotree.sources.files import SourceSpec, discover
from audiotree.sources.loading import check_on_read_error
from audiotree.validation import check_sample_rate, is_int

__all__ = ["check_common", "resolve_files", "probe_channels"]


def _check_num_epochs(num_epochs: Any) -> None:
    if num_epochs is None:
        return
    if not is_int(num_epochs):
        raise TypeError(f"num_epochs must be an int or None (None repeats forever), got {num_epochs!r}.")
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be >= 1 (or None to repeat forever), got {num_epochs}.")


def check_common(*, num_epochs, on_read_error, sample_rate, shuffle_seed, excerpt_seed) -> tuple[int, int, int | None]:
    """Validation shared by the builders; returns (sample_rate, shuffle_seed, excerpt_seed)."""
    _check_num_epochs(num_epochs)
    check_on_read_error(on_read_error)
    sample_rate = check_sample_rate(sample_rate)
    shuffle_seed = check_seed("shuffle_seed", shuffle_seed)
    if excerpt_seed is not None:
        excerpt_seed = check_seed("excerpt_seed", excerpt_seed)
    return sample_rate, shuffle_seed, excerpt_seed


def probe_channels(path: str) -> int | None:
    """The channel count in the header of ``path``; ``None`` if it cannot be read (reading reports it later)."""
    try:
        return probe(path).channels
    except AudioReadError:
        return None


def resolve_files(sources: SourceSpec | None, filepaths: Sequence[Any] | None, extensions: Any) -> list[str]:
    """The files of ``sources`` (discovered, sorted) or ``filepaths`` (as given); exactly one is required."""
    if (sources is None) == (filepaths is None):
        raise ValueError("Pass exactly one of sources= (folders or globs) or filepaths= (a list of files).")
    if filepaths is not None:
        files = [os.fspath(p) for p in filepaths]
        if not files:
            raise ValueError("filepaths= is empty; pass at least one audio file.")
        return files
    files, _ = discover(sources, extensions, strict=True)
    return files
