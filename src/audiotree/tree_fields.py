"""The field schema of an :class:`~audiotree.AudioTree`: names, roles and label dtypes.

A leaf module (it imports nothing from audiotree), so readers, writers and
on-disk formats can agree on the fields without importing the container.

* ``PYTREE_FIELDS``: every pytree child in declaration order (which is also the
  flatten order and the on-disk leaf order); ``sample_rate`` is static metadata.
* ``ARRAY_FIELDS``: the batch-leading arrays (``PYTREE_FIELDS`` minus ``extras``
  and ``_metadata``). ``LABEL_FIELDS``: ``ARRAY_FIELDS`` minus ``waveform`` and
  ``lengths`` (the real samples of each padded item).
* ``DERIVED_FIELDS``: describe one particular waveform; any edit of length,
  rate, channels or level clears them.
* ``METADATA_KEYS``: the closed key set of the private provenance dict.
* ``LABEL_DTYPES``: the dtype a scalar label is stored with (``None``: as given).
* :func:`label_keywords`: the label keywords of every function that builds a
  tree from loose labels (``AudioTree.create``, ``AudioTree.from_file``),
  written once here.

>>> LABEL_FIELDS
('lufs', 'lufs_windows', 'pitch', 'velocity', 'note_duration', 'codes', 'latents')
>>> wrap_label("velocity", 100)
array([100], dtype=int16)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

import numpy as np

__all__ = [
    "PYTREE_FIELDS",
    "ARRAY_FIELDS",
    "LABEL_FIELDS",
    "DERIVED_FIELDS",
    "METADATA_KEYS",
    "LABEL_DTYPES",
    "wrap_label",
    "label_keywords",
    "check_label_names",
]

PYTREE_FIELDS = (
    "waveform",
    "lufs",
    "lufs_windows",
    "pitch",
    "velocity",
    "note_duration",
    "codes",
    "latents",
    "extras",
    "_metadata",
    # Last, so positional construction and the 1.0 leaf order are unchanged.
    "lengths",
)
ARRAY_FIELDS = tuple(f for f in PYTREE_FIELDS if f not in ("extras", "_metadata"))
# ``lengths`` describes the batch's padding, not the audio: it is not a label.
LABEL_FIELDS = tuple(f for f in ARRAY_FIELDS if f not in ("waveform", "lengths"))
DERIVED_FIELDS = ("lufs", "lufs_windows", "codes", "latents")
METADATA_KEYS = ("filepath", "source", "offset")

#: Scalar labels are stored as ``(1,)`` arrays of these dtypes. ``lufs_windows``
#: is never a scalar and passes through; codec outputs keep their own dtype.
LABEL_DTYPES: dict[str, Any] = {
    "lufs": np.float32,
    "pitch": np.float32,
    "velocity": np.int16,
    "note_duration": np.float32,
    "codes": None,
    "latents": None,
}


def wrap_label(name: str, value: Any) -> Any:
    """A scalar label as a ``(1,)`` array of its dtype; arrays and ``None`` pass through."""
    if value is None or np.ndim(value) != 0 or name not in LABEL_DTYPES:
        return value
    return np.asarray([value], dtype=LABEL_DTYPES.get(name))


_F = TypeVar("_F", bound=Callable[..., Any])


def label_keywords(fn: _F | None = None, *, before: str | None = None) -> Any:
    """Publishes ``fn(..., **labels)`` with one keyword-only parameter per label (default ``None``).

    The labels (:data:`LABEL_FIELDS`) are typed once, here, for every function
    that takes them loose; ``inspect.signature`` (and so ``help``) shows them in
    place of ``**labels``, or before the parameter named ``before``. ``fn`` calls
    :func:`check_label_names` on what reaches ``**labels``.

    >>> @label_keywords(before="source")
    ... def make(data, *, source=None, **labels):
    ...     check_label_names("make", labels)
    ...     return labels
    >>> list(inspect.signature(make).parameters)
    ['data', 'lufs', 'lufs_windows', 'pitch', 'velocity', 'note_duration', 'codes', 'latents', 'source']
    >>> make(1, pitch=60.0)
    {'pitch': 60.0}
    >>> make(1, loudness=-20.0)
    Traceback (most recent call last):
    TypeError: make() got an unexpected keyword argument 'loudness'
    """
    if fn is None:
        return lambda f: label_keywords(f, before=before)
    signature = inspect.signature(fn)
    *named, rest = signature.parameters.values()
    if rest.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{fn.__qualname__} must end with **labels to take the label keywords.")
    labels = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Any")
              for name in LABEL_FIELDS]
    at = len(named) if before is None else [p.name for p in named].index(before)
    fn.__signature__ = signature.replace(parameters=[*named[:at], *labels, *named[at:]])  # type: ignore[attr-defined]
    return fn


def check_label_names(where: str, labels: dict) -> None:
    """``TypeError`` (Python's own wording) for a name in ``labels`` that is not a label."""
    for name in labels:
        if name not in LABEL_FIELDS:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
