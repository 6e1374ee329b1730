"""Applying an excerpt strategy: one file open, one :class:`~audiotree.io.excerpt.Clip`.

:func:`select_clip` reads the excerpt an :class:`~audiotree.excerpts.config.ExcerptConfig`
chooses: ``start`` (at ``offset``), ``random`` (an offset drawn by its
``search``), ``full`` (the whole file, up to ``crop_to``) or ``loudest`` (the
search of :mod:`audiotree.excerpts.search`). Every strategy is deterministic
given its ``np.random.Generator``; the dataset builders hand each global index
its own generator, so ``ds[i]`` is reproducible and independent of worker count.

>>> import numpy as np, soundfile, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "tone.wav")
>>> soundfile.write(path, np.full((8000, 1), 0.25, np.float32), 8000)
>>> clip = select_clip(path, np.random.default_rng(0), duration=0.25, excerpt=ExcerptConfig(strategy="start"))
>>> clip.data.shape, clip.offset
((1, 2000), 0.0)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from audiotree.excerpts.config import ExcerptConfig
from audiotree.excerpts.search import find_loudest
from audiotree.io.excerpt import Clip, read_at
from audiotree.io.segment import check_window
from audiotree.validation import check_duration, check_pad_mode

__all__ = ["select_clip", "loudest_clip"]


def select_clip(
    audio_path: str | os.PathLike,
    rng: np.random.Generator,
    *,
    duration: float | None,
    offset: float = 0.0,
    excerpt: ExcerptConfig | None = None,
    sample_rate: int | None = None,
    mono: bool = False,
    pad_mode: str | None = "constant",
    plan: Any = None,
    window: tuple[float, float] | None = None,
) -> Clip | None:
    """Reads one excerpt of ``duration`` s chosen by ``excerpt`` (one file open).

    ``random`` draws the offset with ``excerpt.search`` from ``rng`` (starting at
    ``offset``); ``start`` reads at ``offset``; ``loudest`` runs the search of
    :mod:`audiotree.excerpts.search` (``plan``: a corpus index's
    :class:`~audiotree.excerpts.plan.RowPlan`); ``full`` (or ``duration=None``
    with ``random`` or ``start``) reads the whole file from ``offset``, up to
    ``crop_to``, and records ``lengths``. Returns a :class:`Clip` (or
    ``None`` from ``loudest`` with ``on_failure="skip"``).

    ``window=(start, end)`` seconds reads the segment ``[start, end)`` of the
    file as if it were the whole file (:mod:`audiotree.io.segment`): offsets
    are drawn inside it, ``full`` reads exactly it, and padding never takes
    audio from outside it. The clip's ``offset`` still counts from the file's start.
    """
    check_duration(duration)
    check_pad_mode(pad_mode)
    window = check_window(window)
    excerpt = excerpt or ExcerptConfig()
    if excerpt.strategy == "full" or (duration is None and excerpt.strategy != "loudest"):
        if duration is not None:
            raise ValueError(
                "strategy='full' reads whole files and takes no duration=; cap them with "
                "ExcerptConfig(strategy='full', crop_to=...)."
            )
        path = os.fspath(audio_path)
        # No padding: the item is exactly as long as the file (or crop_to).
        data, rate, start_seconds = read_at(path, None, offset, excerpt.crop_to, sample_rate, mono, None, window)
        return Clip(path=path, data=data, sample_rate=rate, offset=start_seconds, lengths=int(data.shape[-1]))
    if excerpt.strategy == "loudest":
        if offset:
            raise ValueError("strategy='loudest' chooses its own offset; do not pass offset.")
        return find_loudest(audio_path, rng, excerpt, duration=duration, sample_rate=sample_rate, mono=mono,
                            pad_mode=pad_mode, plan=plan, window=window)
    path = os.fspath(audio_path)
    choose = None
    if excerpt.strategy == "random":
        search = excerpt.resolved_search
        choose = lambda info: search(rng, offset, duration, info.duration, 0, 1)  # noqa: E731 - needs the header
    data, rate, start_seconds = read_at(path, choose, offset, duration, sample_rate, mono, pad_mode, window)
    return Clip(path=path, data=data, sample_rate=rate, offset=start_seconds)


def loudest_clip(audio_path: str | os.PathLike, rng: np.random.Generator, excerpt: ExcerptConfig,
                 **read: Any) -> Clip | None:
    """The ``loudest`` strategy alone: :func:`select_clip` with an ``excerpt`` whose strategy is ``loudest``.

    Takes :func:`select_clip`'s read keywords (``duration=`` is required; the
    search chooses the offset, so ``offset`` is refused). Returns a :class:`Clip`
    with ``lufs``, ``lufs_windows`` and ``method``, or ``None`` under
    ``on_failure="skip"``.
    """
    if read.pop("offset", None) is not None:
        raise ValueError("loudest_excerpt() chooses its own offset; do not pass offset.")
    if not isinstance(excerpt, ExcerptConfig) or excerpt.strategy != "loudest":
        raise ValueError("loudest_excerpt() needs an ExcerptConfig with strategy='loudest'.")
    if read.get("duration") is None:  # select_clip requires the keyword
        raise ValueError("loudest_excerpt() needs duration=.")
    return select_clip(audio_path, rng, excerpt=excerpt, **read)
