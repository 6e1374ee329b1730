"""The file methods the published API puts on ``AudioTree``, kept thin.

``from_file``, ``from_clip``, ``excerpt``, ``loudest_excerpt``,
``from_manifest`` (classmethods) and ``write`` are functions here that
:class:`audiotree.AudioTree` binds in its class body (``from_file =
classmethod(tree_io.from_file)``): the class lists its whole API, this module
holds the reading. The reading itself lives in :mod:`audiotree.io`
(``io.excerpt``, ``io.encode``), ``formats.manifest_reader`` and
:mod:`audiotree.excerpts`, which return plain arrays; the results become trees
through ``cls.create``, the class being an argument. This module never imports
the container, nor do the modules it reads through, so ``core -> tree_io ->
io, formats, excerpts`` points down.

>>> import numpy as np, soundfile, tempfile, os
>>> from audiotree import AudioTree
>>> path = os.path.join(tempfile.mkdtemp(), "tone.wav")
>>> soundfile.write(path, np.full(8000, 0.25, np.float32), 8000)
>>> AudioTree.from_file(path, offset=0.5, duration=0.25).waveform.shape
(1, 1, 2000)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from audiotree.tree_fields import LABEL_FIELDS, check_label_names, label_keywords, wrap_label

__all__ = ["from_file", "from_clip", "from_manifest", "excerpt", "loudest_excerpt", "write"]


@label_keywords
def from_file(
    cls: type,
    audio_path: str | os.PathLike,
    *,
    sample_rate: int | None = None,
    offset: float = 0.0,
    duration: float | None = None,
    mono: bool = False,
    pad_mode: str | None = "constant",
    filepath: str | Sequence[str] | None = None,
    source: str | None = None,
    extras: dict | None = None,
    **labels: Any,
) -> Any:
    """Decodes ``duration`` seconds from ``offset`` seconds of a file, by seeking.

    Returns a ``(1, C, round(duration * rate))`` float32 tree at ``sample_rate``
    (native rate when None); ``mono`` averages channels. Short reads are
    right-padded with ``np.pad(mode=pad_mode)`` (``None`` leaves them short).
    Raises :class:`~audiotree.errors.AudioReadError` for undecodable files and
    ``ValueError`` for an offset at or past the end (naming the duration).
    """
    from audiotree.io.excerpt import read_excerpt

    check_label_names("from_file", labels)
    path = os.fspath(audio_path)
    data, rate = read_excerpt(
        path, offset=offset, duration=duration, sample_rate=sample_rate, mono=mono, pad_mode=pad_mode
    )
    if filepath is not None and not isinstance(filepath, (str, os.PathLike)):
        filepath = list(filepath)
        if len(filepath) != 1:
            raise ValueError(f"{len(filepath)} filepath for a batch of 1.")
    return _read_result(cls, path, data, rate, float(offset),
                        dict(filepath=filepath, source=source, extras=extras, **labels))


def _read_result(cls: type, path: str, data: Any, rate: int, offset: float, tree_kwargs: dict,
                 lengths: Any = None) -> Any:
    """A batch-of-1 tree of ``(C, T)`` samples read from ``path`` at ``offset`` seconds."""
    kwargs = dict(tree_kwargs)
    filepath, source, extras = kwargs.pop("filepath", None) or path, kwargs.pop("source", None), kwargs.pop("extras", None)
    if source is not None and not isinstance(source, str):
        raise ValueError("from_file() takes a single source string.")
    unknown = sorted(set(kwargs) - set(LABEL_FIELDS))
    if unknown:
        raise TypeError(f"Unexpected keyword argument {unknown[0]!r} for reading an excerpt.")
    labels = {name: wrap_label(name, value) for name, value in kwargs.items()}
    return cls.create(data[None], rate, filepath=filepath, source=source, offset=offset, extras=extras,
                      lengths=lengths, **labels)


def from_clip(cls: type, clip: Any, **tree_kwargs: Any) -> Any:
    """The batch-of-1 tree of an :class:`audiotree.io.excerpt.Clip` (what a read returned).

    ``tree_kwargs`` are ``source``, ``filepath``, ``extras`` and the labels of
    ``AudioTree.create``; the clip's loudness is measured, never given.

    >>> import numpy as np
    >>> from audiotree import AudioTree
    >>> from audiotree.io.excerpt import Clip
    >>> clip = Clip(path="a.wav", data=np.zeros((1, 80), np.float32), sample_rate=8000, offset=0.5)
    >>> AudioTree.from_clip(clip, source="speech").offset.tolist()
    [0.5]
    """
    for name in ("lufs", "lufs_windows"):
        if name in tree_kwargs:
            raise TypeError(f"Unexpected keyword argument {name!r} for reading an excerpt.")
    if clip.lufs is not None:
        tree_kwargs = {**tree_kwargs, "lufs": np.asarray([clip.lufs], np.float32), "lufs_windows": clip.lufs_windows[None]}
    if clip.method is not None:
        from audiotree.excerpts.plan import method_extras

        tree_kwargs = {**tree_kwargs, "extras": {**(tree_kwargs.get("extras") or {}), **method_extras(clip.method)}}
    lengths = None if clip.lengths is None else np.asarray([clip.lengths], np.int32)
    return _read_result(cls, clip.path, clip.data, clip.sample_rate, clip.offset, tree_kwargs, lengths)


def from_manifest(
    cls: type,
    manifest_path: str | os.PathLike,
    *,
    audio_dir: str | os.PathLike | None = None,
    filter_fn: Callable[[dict], bool] | None = None,
) -> Any:
    """Loads a whole :class:`~audiotree.AudioWriter` dataset as one batched tree.

    ``filter_fn`` receives each manifest entry (a dict) and keeps it when
    true. Items must share rate, channels and length. An empty selection
    raises ``ValueError``; a missing audio file raises ``AudioReadError``.
    """
    from audiotree.formats.manifest_reader import ManifestReader

    reader = ManifestReader(manifest_path, audio_dir=audio_dir, filter_fn=filter_fn)
    if len(reader) == 0:
        raise ValueError(f"No entries selected from {manifest_path}.")
    return cls.batch([cls(**reader.read_fields(i)) for i in range(len(reader))])


def excerpt(
    cls: type,
    audio_path: str | os.PathLike,
    rng: np.random.Generator,
    duration: float,
    offset: float = 0.0,
    excerpt: Any = None,
    **from_file_kwargs: Any,
) -> Any:
    """Reads one excerpt chosen by an :class:`~audiotree.excerpts.config.ExcerptConfig`.

    ``random`` (default) draws one offset with the config's search from ``rng``;
    ``start`` reads at ``offset``; ``loudest`` delegates to
    :func:`loudest_excerpt`. Deterministic for a given ``rng`` state.
    """
    from audiotree.excerpts.strategies import select_clip

    read, tree_kwargs = _split_read_kwargs(from_file_kwargs)
    clip = select_clip(audio_path, rng, duration=duration, offset=offset, excerpt=excerpt, **read)
    return None if clip is None else cls.from_clip(clip, **tree_kwargs)


def loudest_excerpt(
    cls: type, audio_path: str | os.PathLike, rng: np.random.Generator, excerpt: Any, **from_file_kwargs: Any
) -> Any:
    """The ``loudest`` strategy: an excerpt that clears ``excerpt.lufs_cutoff``.

    Requires ``duration=`` in the keyword arguments; ``offset`` is refused. The
    result carries ``lufs`` and ``lufs_windows`` (0.4 s windows) of the excerpt.
    See :mod:`audiotree.excerpts.search` for the search and its cost.
    """
    from audiotree.excerpts.strategies import loudest_clip

    read, tree_kwargs = _split_read_kwargs(from_file_kwargs, ("duration", "offset"))
    clip = loudest_clip(audio_path, rng, excerpt, **read)
    return None if clip is None else cls.from_clip(clip, **tree_kwargs)


def write(
    self,
    filepath: str | os.PathLike,
    *,
    subtype: str | None = None,
    format: str | None = None,
    endian: str | None = None,
) -> Path:
    """Writes the single item to an audio file (format from the extension).

    With no ``subtype``, soundfile's default for the container applies
    (PCM_16 for WAV). Requires ``batch_size == 1`` and a rank-3 waveform.
    """
    from audiotree.io.encode import write_audio

    if self.waveform is None:
        raise ValueError("write() needs a waveform; this tree is token-only.")
    if np.ndim(self.waveform) == 4:
        raise ValueError("write() does not take a rank 4 (mini-batched) tree.")
    if self.batch_size != 1:
        raise ValueError(f"write() needs batch_size == 1, got {self.batch_size}; iterate the batch.")
    data = np.asarray(self.waveform[0])
    if self.lengths is not None:  # only the real samples, not the batch padding
        data = data[..., : int(np.asarray(self.lengths)[0])]
    return write_audio(filepath, data, self.sample_rate, subtype=subtype, format=format, endian=endian)


def _split_read_kwargs(kwargs: dict, reads: Sequence[str] = ()) -> tuple[dict, dict]:
    """(arguments of the read, arguments of the tree) from ``from_file``-style keywords."""
    read = {k: kwargs[k] for k in ("sample_rate", "mono", "pad_mode", *reads) if k in kwargs}
    return read, {k: v for k, v in kwargs.items() if k not in read}
