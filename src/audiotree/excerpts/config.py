"""Choosing excerpts: ``ExcerptConfig`` and the offset searches.

How a dataset picks the part of a file it reads: the ``start``, ``random``,
``loudest`` or ``full`` strategy and the search that draws offsets. ``full``
reads whole files (whole utterances for TTS/ASR), cropped to ``crop_to`` seconds
seconds; such items carry ``lengths`` so batches of them pad and mask
correctly (see :meth:`audiotree.AudioTree.batch`). This module is pure
configuration; applying it is :mod:`audiotree.excerpts.strategies`.

>>> import numpy as np
>>> config = ExcerptConfig(strategy="random", search="bias_early")
>>> 0.0 <= config.resolved_search(np.random.default_rng(0), 0.0, 1.0, 10.0, 0, 1) <= 9.0
True
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Callable, Literal, Union

import numpy as np

from audiotree.validation import is_int, is_real, renamed_keywords

__all__ = [
    "ExcerptConfig",
    "search_uniform",
    "search_bias_early",
]

Searcher = Callable[[np.random.Generator, float, float, float, int, int], float]

_STRATEGIES = ("start", "random", "loudest", "full")
_ON_FAILURE = ("keep", "skip", "raise")


def search_uniform(rng, offset, duration, total_duration, attempt, max_attempts) -> float:
    """Uniform offset in ``[offset, max(total - duration, offset)]`` seconds."""
    lo = max(0.0, float(offset))
    hi = max(float(total_duration) - float(duration), lo)
    return float(rng.uniform(lo, hi)) if hi > lo else lo


def search_bias_early(rng, offset, duration, total_duration, attempt, max_attempts) -> float:
    """Like uniform, but later attempts concentrate within ``duration`` of the start."""
    lo = max(0.0, float(offset))
    hi_all = max(float(total_duration) - float(duration), lo)
    hi_early = min(hi_all, lo + float(duration))
    alpha = attempt / (max_attempts - 1) if max_attempts > 1 else 0.0
    hi = hi_all * (1.0 - alpha) + hi_early * alpha
    return float(rng.uniform(lo, hi)) if hi > lo else lo


_SEARCHES: dict[str, Searcher] = {"uniform": search_uniform, "bias_early": search_bias_early}


def _resolve_search(search: Union[str, Searcher]) -> Searcher:
    if callable(search):
        return search
    if not isinstance(search, str):
        raise TypeError(f"search must be a name, a dotted path or a callable, got {type(search).__name__}.")
    if search in _SEARCHES:
        return _SEARCHES[search]
    module_name, _, attr = search.rpartition(".")
    if not module_name:
        raise ValueError(f"Unknown search {search!r}; use {sorted(_SEARCHES)}, a callable or 'package.module.function'.")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"Unknown search {search!r}: cannot import it ({exc}).") from None
    if not callable(target):
        raise ValueError(f"Unknown search {search!r}: it is not callable.")
    return target


@dataclasses.dataclass(frozen=True)
class ExcerptConfig:
    """How an excerpt is chosen from a file. Validated when constructed.

    Attributes:
      strategy: ``"random"`` (one offset drawn with ``search``), ``"start"``
        (offset 0; deterministic, for validation sets) or ``"loudest"`` (an
        excerpt whose gated loudness clears ``lufs_cutoff``; see module docs).
      num_tries: metered attempts per item (``loudest`` only), >= 1.
      lufs_cutoff: integrated LUFS an excerpt must exceed (``loudest`` only).
      search: ``"uniform"``, ``"bias_early"``, a callable
        ``(rng, offset, duration, total_duration, attempt, max_attempts) -> seconds``
        or a dotted import path to one (imported, never ``eval``-ed). Honoured by
        ``random`` and ``loudest``.
      on_failure: ``loudest`` when nothing clears the cutoff: ``"keep"`` the
        loudest attempt, ``"skip"`` the item (``None``), or ``"raise"``.
      scan_max_seconds: after a first miss, ``loudest`` decodes files up to this
        long whole and searches an energy map; longer files are probed (see
        :mod:`audiotree.excerpts.search`).
      skip_silent: ``loudest`` over a corpus index only: leave files whose
        profile has no window above the cutoff out of sampling (group weights
        are unchanged; the rest of the group is sampled). Without it,
        ``on_failure`` applies to them, decided before anything is read.
      max_silence_share: ``loudest`` over a corpus index only: a window
        qualifies only if at most this share of its 100 ms profile blocks is
        silent (under -60 LUFS, the index's ``silence_share`` rule), as it must
        clear ``lufs_cutoff``; ``None`` (default) checks no share. Pure in the
        profile, so items stay a function of ``(seed, index)``.
      max_clip_share: ``loudest`` over a corpus index only: a window
        qualifies only if at most this share of its samples is clipped (the
        index's ``clip_share`` rule, counted per 100 ms block in its
        ``clip_blocks`` column, each block's share rounded up to 1/255), as it
        must clear ``lufs_cutoff``; ``0.0`` refuses any window with a clipped
        sample, ``None`` (default) checks no clipping. Pure in the index, like
        ``max_silence_share``.
      crop_to: ``full`` only: the longest item in seconds; longer files keep
        their first ``crop_to`` seconds. ``None`` reads every file whole.
        (``max_duration`` is the builders' filter of index rows: a file
        longer than it is left out, not cropped.)
      allow_text_crops: fixed-length excerpts (``duration=`` seconds) of an
        index whose labels include a text label (a transcript) are refused,
        since every crop would carry the whole utterance's text; ``True``
        accepts them knowingly. Does not apply to ``strategy="full"``.

    ``strategy="full"`` reads each file whole (no ``duration``; items differ in
    length and carry ``lengths``). It is deterministic: no offset is drawn.

    >>> ExcerptConfig(strategy="full", crop_to=20.0).crop_to
    20.0
    """

    strategy: Literal["start", "random", "loudest", "full"] = "random"
    num_tries: int = 8
    lufs_cutoff: float = -40.0
    search: Union[str, Searcher] = "uniform"
    on_failure: Literal["keep", "skip", "raise"] = "keep"
    scan_max_seconds: float = 30.0
    crop_to: float | None = None
    skip_silent: bool = False
    allow_text_crops: bool = False
    max_silence_share: float | None = None
    max_clip_share: float | None = None

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise ValueError(f"Unknown excerpt strategy {self.strategy!r}; use one of {_STRATEGIES}.")
        if self.on_failure not in _ON_FAILURE:
            raise ValueError(f"Unknown on_failure {self.on_failure!r}; use one of {_ON_FAILURE}.")
        if not is_int(self.num_tries) or self.num_tries < 1:
            raise ValueError(f"num_tries must be an int >= 1, got {self.num_tries!r}.")
        if not math.isfinite(float(self.lufs_cutoff)):
            raise ValueError(f"lufs_cutoff must be finite, got {self.lufs_cutoff!r}.")
        if not isinstance(self.skip_silent, bool):
            raise ValueError(f"skip_silent must be True or False, got {self.skip_silent!r}.")
        if not isinstance(self.allow_text_crops, bool):
            raise ValueError(f"allow_text_crops must be True or False, got {self.allow_text_crops!r}.")
        if self.allow_text_crops and self.strategy == "full":
            raise ValueError("ExcerptConfig.allow_text_crops applies to fixed-length excerpts; strategy='full' reads "
                             "whole items, which keep their text. Remove it.")
        if self.max_silence_share is not None and not (is_real(self.max_silence_share)
                                                       and 0 <= self.max_silence_share < 1):
            raise ValueError(f"max_silence_share must be a share in [0, 1) or None, got {self.max_silence_share!r}.")
        if self.max_clip_share is not None and not (is_real(self.max_clip_share) and 0 <= self.max_clip_share < 1):
            raise ValueError(f"max_clip_share must be a share in [0, 1) or None, got {self.max_clip_share!r}.")
        if not float(self.scan_max_seconds) >= 0:
            raise ValueError(f"scan_max_seconds must be >= 0, got {self.scan_max_seconds!r}.")
        if self.strategy != "loudest":
            defaults = {f.name: f.default for f in dataclasses.fields(ExcerptConfig)}
            for knob in ("num_tries", "lufs_cutoff", "on_failure", "scan_max_seconds", "skip_silent",
                         "max_silence_share", "max_clip_share"):
                if getattr(self, knob) != defaults[knob]:
                    raise ValueError(
                        f"ExcerptConfig.{knob} only applies to strategy='loudest' "
                        f"(strategy is {self.strategy!r}); remove it or switch strategy."
                    )
        if self.strategy in ("start", "full") and self.search != "uniform":
            raise ValueError(f"ExcerptConfig.search does not apply to strategy={self.strategy!r} (its offset is fixed).")
        if self.crop_to is not None:
            if self.strategy != "full":
                raise ValueError(
                    f"ExcerptConfig.crop_to only applies to strategy='full' (strategy is {self.strategy!r}); "
                    "other strategies read duration= seconds."
                )
            value = self.crop_to
            if not is_real(value) or not math.isfinite(float(value)) or value <= 0:
                raise ValueError(f"ExcerptConfig.crop_to must be a positive number of seconds, got {value!r}.")
        _resolve_search(self.search)

    @property
    def resolved_search(self) -> Searcher:
        """The search callable named by ``search``."""
        return _resolve_search(self.search)


# The field was ``max_duration``; that word now means only the builders' filter of index rows.
ExcerptConfig.__init__ = renamed_keywords(max_duration="crop_to")(ExcerptConfig.__init__)
