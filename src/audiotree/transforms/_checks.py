"""Parameter guards and constants shared by the NumPy and JAX transforms.

Every guard is plain Python on *static* values (never on array contents), so
both backends raise the same ``ValueError`` at the same moment: once when the
transform is constructed (fail fast, before a pipeline starts its workers) and
again when a kernel is called directly with explicit parameters.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from audiotree import validation
from audiotree.validation import PAD_MODES, is_int, is_real

__all__ = [
    "PAD_MODES",
    "ROLL_MODES",
    "SHIFT_PHASE_FRAME_LENGTH",
    "SHIFT_PHASE_HOP_FACTOR",
    "SHIFT_PHASE_WINDOW",
]

#: ``trim`` pad modes (``np.pad``/``jnp.pad`` names).
#: ``roll`` modes: circular, or shift with zero fill.
ROLL_MODES = ("wrap", "constant")
#: ``shift_phase`` analysis settings (fixed, not parameters).
SHIFT_PHASE_FRAME_LENGTH = 2048
SHIFT_PHASE_HOP_FACTOR = 0.5
SHIFT_PHASE_WINDOW = "hann"


def _real(name: str, value: Any) -> float:
    if not is_real(value):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return value


def check_db_range(min_db: Any, max_db: Any) -> None:
    """``min_db <= max_db``, both finite (``volume_change``/``volume_norm``)."""
    lo, hi = _real("min_db", min_db), _real("max_db", max_db)
    if lo > hi:
        raise ValueError(f"min_db={min_db!r} is greater than max_db={max_db!r}.")


def check_seconds_range(min_seconds: Any, max_seconds: Any) -> None:
    """``min_seconds <= max_seconds``, both finite (``roll``)."""
    lo, hi = _real("min_seconds", min_seconds), _real("max_seconds", max_seconds)
    if lo > hi:
        raise ValueError(f"min_seconds={min_seconds!r} is greater than max_seconds={max_seconds!r}.")


def check_roll_mode(mode: Any) -> None:
    if mode not in ROLL_MODES:
        raise ValueError(f"Unknown roll mode {mode!r}; use one of {ROLL_MODES}.")


def check_roll(min_seconds: Any = 0.0, max_seconds: Any = 0.0, mode: Any = "wrap") -> None:
    check_seconds_range(min_seconds, max_seconds)
    check_roll_mode(mode)


def check_trim(length: Any = 1.0, mode: Any = "wrap") -> None:
    if _real("length", length) <= 0:
        raise ValueError(f"trim length must be > 0 seconds, got {length!r}.")
    if mode not in PAD_MODES:
        raise ValueError(f"Unknown trim pad mode {mode!r}; use one of {PAD_MODES}.")


def check_resample_rate(sample_rate: Any = None) -> int:
    if sample_rate is None:
        raise ValueError("resample() needs a target sample_rate (got None).")
    return validation.check_sample_rate(sample_rate)


def check_amount(amount: Any) -> None:
    if _real("amount", amount) < 0:
        raise ValueError(f"amount must be >= 0, got {amount!r}.")


def check_keep_lufs(keep_lufs: Any) -> None:
    if not isinstance(keep_lufs, (bool, np.bool_)):
        raise ValueError(f"keep_lufs must be a bool, got {keep_lufs!r}.")


def stft_hop(frame_length: Any, hop_factor: Any) -> int:
    """Validates the STFT geometry; returns the hop ``int(frame_length * hop_factor)``."""
    if not is_int(frame_length) or frame_length < 2:
        raise ValueError(f"frame_length must be an integer >= 2, got {frame_length!r}.")
    factor = _real("hop_factor", hop_factor)
    if not 0.0 < factor <= 0.5:
        raise ValueError(f"hop_factor must be in (0, 0.5], got {hop_factor!r}.")
    hop = int(int(frame_length) * factor)
    if hop < 1:
        raise ValueError(
            f"hop_factor={hop_factor!r} with frame_length={frame_length!r} gives a hop of 0 samples."
        )
    return hop


def _window_key(window: Any) -> Any:
    if isinstance(window, list):
        return tuple(window)
    return window


@functools.lru_cache(maxsize=32)
def _window_cached(window: Any, frame_length: int) -> np.ndarray:
    from scipy.signal import get_window

    try:
        w = np.asarray(get_window(window, frame_length, fftbins=True), dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"Unknown STFT window {window!r}: {exc}") from None
    w.setflags(write=False)
    return w


def stft_window(window: Any, frame_length: int) -> np.ndarray:
    """The periodic analysis/synthesis window as float64 (scipy ``get_window`` names)."""
    try:
        return _window_cached(_window_key(window), int(frame_length))
    except TypeError:  # unhashable window spec
        raise ValueError(f"Unknown STFT window {window!r}.") from None


def check_phase(amount: Any = 1.0, hop_factor: Any = 0.5, frame_length: Any = 2048,
                window: Any = "hann", keep_lufs: Any = False) -> None:
    """All ``corrupt_phase`` guards that do not depend on the audio."""
    check_amount(amount)
    stft_hop(frame_length, hop_factor)
    stft_window(window, frame_length)
    check_keep_lufs(keep_lufs)


def check_shift_phase(amount: Any = 1.0, keep_lufs: Any = False) -> None:
    check_amount(amount)
    check_keep_lufs(keep_lufs)


def check_frame_fits(samples: int, frame_length: int) -> None:
    if samples < frame_length:
        raise ValueError(
            f"Phase transforms need at least frame_length={frame_length} samples per channel, "
            f"got {samples}; trim or pad the audio first."
        )


def stft_geometry(samples: int, frame_length: int, hop: int) -> tuple[int, int, int]:
    """``(pad, n_frames, total)`` of a centred STFT padded to a whole number of hops.

    The signal is zero-padded by ``frame_length // 2`` on the left and by
    ``total - samples - pad`` on the right, where ``total = (n_frames - 1) * hop
    + frame_length`` is the smallest such length covering ``samples + 2 * pad``.
    """
    pad = frame_length // 2
    span = samples + 2 * pad - frame_length
    n_frames = 1 + -(-span // hop)
    total = (n_frames - 1) * hop + frame_length
    return pad, n_frames, total
