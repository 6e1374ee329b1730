"""Sane ranges for the numbers a reader takes from a manifest or cache.

A manifest is input like any other file: a damaged or tampered one must be
refused with an error naming the file and the field, not trusted into a
``10**30`` Hz sample rate, an item of 2**60 frames or a dataset of more items
than any disk holds. Every bound is far beyond a real dataset, so it refuses
only nonsense. Writers check the same bounds before writing, so everything
they write reads back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from audiotree.validation import is_int, is_real

__all__ = [
    "MAX_SAMPLE_RATE",
    "MAX_CHANNELS",
    "MAX_FRAMES",
    "MAX_ITEMS",
    "MAX_DIM",
    "MAX_SAMPLE_BYTES",
    "MAX_SECONDS",
    "int_problem",
    "float_problem",
    "column_problem",
    "sane_sample_rate",
]

#: Hz. Past 768 kHz studio audio and the ultrasonic recorders used for bats.
MAX_SAMPLE_RATE = 10_000_000
#: Channels of one item (libsndfile's own limit).
MAX_CHANNELS = 1024
#: Frames of one item: about 400 hours at 48 kHz.
MAX_FRAMES = 2**36
#: Items (samples, entries, files) in one dataset or cache.
MAX_ITEMS = 2**40
#: One dimension of a stored array's per-sample shape.
MAX_DIM = MAX_FRAMES  # the longest axis of any leaf is an item's frames
#: Bytes of one sample of one array leaf (64 GiB).
MAX_SAMPLE_BYTES = 2**36
#: Seconds: a duration, an offset or a window length (about 115 days).
MAX_SECONDS = 1e7


def int_problem(field: str, value: Any, low: int, high: int, unit: str = "") -> str | None:
    """Why ``value`` is not an int in ``[low, high]``, or ``None`` if it is."""
    if not is_int(value):
        return f"{field} must be an int, got {value!r}."
    if not low <= int(value) <= high:
        return f"{field} is {int(value)}{unit}, outside the sane range {low} .. {high}{unit}."
    return None


def float_problem(field: str, value: Any, low: float, high: float, unit: str = "") -> str | None:
    """Why ``value`` is not a finite number in ``[low, high]``, or ``None``."""
    if not is_real(value):
        return f"{field} must be a number, got {value!r}."
    if not math.isfinite(float(value)) or not low <= float(value) <= high:
        return f"{field} is {float(value)!r}{unit}, outside the sane range {_fmt(low)} .. {_fmt(high)}{unit}."
    return None


def column_problem(field: str, column: np.ndarray, low: float, high: float, unit: str = "") -> str | None:
    """Why a numeric column holds a value outside ``[low, high]`` (or a non-finite one), or ``None``.

    The message names the first offending row.
    """
    values = np.asarray(column)
    if values.size == 0:
        return None
    bad = (values < low) | (values > high)
    if values.dtype.kind in "fc":
        bad |= ~np.isfinite(values)
    if not np.any(bad):
        return None
    row = int(np.flatnonzero(bad.reshape(-1))[0])
    value = values.reshape(-1)[row].item()
    return (f"column {field!r} holds {value!r}{unit} in row {row}, outside the sane range "
            f"{_fmt(low)} .. {_fmt(high)}{unit}.")


def sane_sample_rate(rate: Any, where: str) -> int:
    """``rate`` as an int; ``ValueError`` (prefixed with ``where``) unless it is a sane sample rate.

    Writers call this before writing, so a rate they store always reads back.
    """
    problem = int_problem("sample_rate", rate, 1, MAX_SAMPLE_RATE, " Hz")
    if problem:
        raise ValueError(f"{where}: {problem}")
    return int(rate)


def _fmt(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"
