"""``choose``: apply a random subset of transforms (NumPy / Grain only)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import grain.transforms as _grain_transforms
import numpy as np

from audiotree.transforms.base import check_prob
from audiotree.validation import is_int

__all__ = ["Choose", "choose"]


class Choose(_grain_transforms.RandomMap):
    """A Grain ``RandomMap`` applying ``c`` distinct transforms drawn per element.

    Built by :func:`choose`; see there. Picklable if its transforms are.
    """

    def __init__(self, transforms: Sequence[Any], c: int, weights: np.ndarray | None, prob: float) -> None:
        self.transforms = tuple(transforms)
        self.c = c
        self.weights = weights
        self.prob = prob

    def __repr__(self) -> str:
        inner = ", ".join(map(repr, self.transforms))
        extra = f", c={self.c}"
        if self.weights is not None:
            extra += f", weights={self.weights.tolist()!r}"
        if self.prob != 1.0:
            extra += f", prob={self.prob!r}"
        return f"choose({inner}{extra})"

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """With probability ``prob``, applies ``c`` transforms in drawn order."""
        if element is None:
            return None
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"choose is NumPy-only and needs an np.random.Generator, got {type(rng).__name__}.")
        if not rng.random() < self.prob:
            return element
        picked = rng.choice(len(self.transforms), size=self.c, replace=False, p=self.weights)
        for i in picked:
            transform = self.transforms[int(i)]
            if isinstance(transform, _grain_transforms.RandomMap):
                element = transform.random_map(element, rng)
            else:
                element = transform.map(element)
            if element is None:
                return None
        return element

    def __call__(self, element: Any, rng: np.random.Generator) -> Any:
        """Same as :meth:`random_map`."""
        return self.random_map(element, rng)


def choose(*transforms: Any, c: int = 1, weights: Sequence[float] | None = None, prob: float = 1.0) -> Choose:
    """Applies ``c`` distinct transforms picked at random from ``transforms`` (NumPy only).

    Once per element: with probability ``prob``, ``c`` transforms are drawn
    without replacement (``rng.choice(n, c, replace=False, p=weights)``) and
    applied in the drawn order, each with the same generator. Otherwise the
    element passes through.

    Args:
      *transforms: Grain ``Map`` / ``RandomMap`` objects (e.g. audiotree transforms).
      c: how many to apply, in ``[0, len(transforms)]``.
      weights: selection weights, one per transform, non-negative, summing to 1
        (within 1e-6; they are then renormalised). ``None`` means uniform.
      prob: probability in [0, 1] of applying anything to the element.

    Raises:
      TypeError: an argument is not a Grain transform, or ``c`` is not an int.
      ValueError: bad ``c``, ``weights`` or ``prob``.
    """
    for t in transforms:
        if not isinstance(t, (_grain_transforms.Map, _grain_transforms.RandomMap)):
            raise TypeError(f"choose takes Grain Map/RandomMap transforms, got {type(t).__name__} {t!r}.")
    if not is_int(c):
        raise TypeError(f"c must be an int, got {c!r}.")
    n = len(transforms)
    if not 0 <= c <= n:
        raise ValueError(f"c={c} must be in [0, {n}] for {n} transform(s).")
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.size != n:
            raise ValueError(f"choose got {w.size} weight(s) for {n} transform(s).")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weights must be finite and non-negative, got {list(weights)!r}.")
        total = float(w.sum())
        if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=1e-6):
            raise ValueError(f"weights must sum to 1 (within 1e-6), got sum {total!r}.")
        w = w / total
        if c > int(np.count_nonzero(w)):
            raise ValueError(f"c={c} exceeds the {int(np.count_nonzero(w))} transform(s) with non-zero weight.")
    try:
        p = check_prob(prob)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return Choose(transforms, int(c), w, p)
