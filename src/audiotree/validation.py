"""Argument checks shared by the whole package.

One definition of "an integer", "a real number", a sample rate, a duration and
a pad mode, so every public function accepts and rejects the same values with
the same words. ``bool`` is an ``int`` in Python; none of these accept it as a
number, because ``sample_rate=True`` is always a bug.

This module imports nothing from audiotree (it sits at the bottom of the
dependency graph).

>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
>>> check_sample_rate(44_100.0)
44100
>>> check_duration(0.5)
0.5
>>> check_choice("skip", "on_read_error", ("raise", "skip", "warn"))
'skip'

Policies share one vocabulary: ``"raise"``, ``"warn"`` and ``"skip"``, plus
``"reprobe"`` and ``"trust"`` where those apply (and words of their own, such
as ``"grow"`` or ``"trim"``, for what is not a failure policy).
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

__all__ = [
    "PAD_MODES",
    "is_int",
    "is_real",
    "check_positive",
    "check_sample_rate",
    "check_duration",
    "check_pad_mode",
    "check_choice",
    "renamed_keywords",
]

#: ``np.pad`` modes accepted wherever audio is padded to length.
PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def is_int(value: Any) -> bool:
    """True for Python and NumPy integers, False for ``bool`` and everything else.

    >>> import numpy as np
    >>> is_int(np.int64(7)), is_int(np.float32(7))
    (True, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for Python and NumPy ints and floats (NaN and inf included), False for ``bool``.

    >>> is_real(0.25), is_real(False), is_real("1")
    (True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive(value: Any, name: str, *, optional: bool = False) -> float | None:
    """``value`` as a finite float > 0; ``ValueError`` naming ``name`` otherwise.

    >>> check_positive(2, "hop")
    2.0
    >>> check_positive(None, "hop", optional=True) is None
    True
    """
    if value is None and optional:
        return None
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}.")
    return float(value)


def check_sample_rate(value: Any, *, name: str = "sample_rate", optional: bool = False) -> int | None:
    """A rate in Hz as a positive ``int``; ``ValueError`` otherwise.

    Integral floats (``44100.0``) are accepted; ``44.1``, ``0``, ``True`` and
    non-numbers are not. With ``optional=True``, ``None`` passes through.

    >>> check_sample_rate(None, optional=True) is None
    True
    """
    if value is None and optional:
        return None
    if (
        not is_real(value)
        or not math.isfinite(float(value))
        or not float(value).is_integer()
        or value <= 0
    ):
        also = " or None" if optional else ""
        raise ValueError(f"{name} must be a positive integer (Hz){also}, got {value!r}.")
    return int(value)


def check_duration(duration: Any, *, name: str = "duration") -> float | None:
    """A length in seconds: ``None`` or a finite number > 0 (``ValueError`` otherwise)."""
    if duration is None:
        return None
    if not is_real(duration) or not math.isfinite(duration) or duration <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {duration!r}.")
    return float(duration)


def check_pad_mode(pad_mode: Any) -> None:
    """``None`` (no padding) or one of :data:`PAD_MODES`.

    >>> check_pad_mode("reflect")
    """
    if pad_mode is not None and pad_mode not in PAD_MODES:
        raise ValueError(f"Unknown pad_mode {pad_mode!r}; use one of {PAD_MODES} or None.")


def check_choice(value: Any, name: str, choices: tuple, *, renamed: dict | None = None) -> Any:
    """``value`` if it is one of ``choices``; else a ``ValueError`` listing them.

    ``renamed`` maps an old spelling to its new one, so a call written for an
    earlier release is told what to write now.

    >>> check_choice("error", "on_stale", ("raise", "skip"), renamed={"error": "raise"})
    Traceback (most recent call last):
    ...
    ValueError: on_stale='error' is now spelled on_stale='raise' (the choices are ('raise', 'skip')).
    """
    if value in choices:
        return value
    if renamed and isinstance(value, str) and value in renamed:
        raise ValueError(f"{name}={value!r} is now spelled {name}={renamed[value]!r} (the choices are {choices}).")
    raise ValueError(f"{name} must be one of {choices}, got {value!r}.")


def renamed_keywords(**renames: str):
    """Refuses keywords of an earlier release with a ``TypeError`` naming the new one.

    The wrapped function keeps its signature (``inspect.signature`` shows the
    new names only); the check costs one dictionary lookup per renamed word.

    >>> @renamed_keywords(seed="shuffle_seed")
    ... def plan(*, shuffle_seed=0):
    ...     return shuffle_seed
    >>> plan(seed=3)
    Traceback (most recent call last):
    ...
    TypeError: plan() takes shuffle_seed= now, not seed=.
    """
    def wrap(fn):
        owner = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    raise TypeError(f"{owner}() takes {new if '=' in new else new + '='} now, not {old}=.")
            return fn(*args, **kwargs)
        return call
    return wrap
