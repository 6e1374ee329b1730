"""Reading excerpts of audio files: seek, decode, downmix, resample, fit to length.

:func:`read_excerpt` reads at a given offset; :func:`select_clip` applies an
:class:`~audiotree.excerpts.config.ExcerptConfig` strategy (``start``, ``random``,
``loudest`` or ``full``). Results are plain arrays in a :class:`Clip`; wrapping them in an
``AudioTree`` is the caller's business (``AudioTree.from_file`` and
``AudioTree.excerpt`` do it), so this module knows nothing of the container.

Every function here is deterministic given its ``np.random.Generator``; the
dataset builders hand each global index its own generator, so ``ds[i]`` is
reproducible and independent of worker count.

The ``loudest`` search
----------------------
The published AudioTree 1.0 tried up to ``num_tries`` uniformly random offsets
and metered each with the gated BS.1770 meter. On a file that is mostly
near-silence with one loud passage, that misses most of the time. Ours:

1. Open the file once. With ``mono=True`` every candidate is mixed down before
   it is measured, so the meter filters one channel, not all of them.
2. Each attempt draws an offset with ``search``, seeks, and reads ``duration``.
   On typical material the first attempt clears ``lufs_cutoff`` and the search
   ends after one read and one K-weighting pass.
3. When the first attempt misses and the file is at most ``scan_max_seconds``
   long (default 30 s), the file is decoded once, whole, at its native rate. A
   channel-weighted mean-square map in 100 ms blocks (a few multiply-adds per
   sample, no filtering) gives every window a cheap loudness estimate, gated
   like BS.1770. Later attempts still draw with ``search``, but an offset whose
   estimate cannot clear the cutoff (K-weighting adds at most ~4 dB) moves to
   the nearest window that can. A loud passage longer than ``duration`` is
   therefore always found, and offsets stay spread over every loud region.
4. Longer files are probed (:mod:`audiotree.excerpts.plan`): short reads
   ``duration / 2`` apart map the raw energy along the file, then each further
   attempt reads ``2 * duration`` around the loudest unexplored probe and
   meters the loudest window in it. The raw block energies bound an excerpt's
   loudness from above, and the meter is skipped for candidates that cannot
   beat the loudest so far. With a corpus index none of this runs: the index's
   loudness profiles say which windows clear the cutoff (``plan=``).
5. Only the winner is resampled. Its ``lufs``/``lufs_windows`` come from the
   same K-weighting pass that accepted it, measured on real samples only (zero
   padding is never filtered).

Cost per item at native rate ``r``: one seek+read of ``duration`` and one
K-weighting pass when the first attempt clears the cutoff. A miss on a short
file adds one decode of the file and ~4 flops per sample for the map; each
further metered attempt adds one K-weighting pass of ``duration``. A miss on
a long file adds the probes and at most ``num_tries - 1`` reads of
``2 * duration`` (bounds in ``docs/excerpts.md``).


>>> import numpy as np, soundfile, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "tone.wav")
>>> soundfile.write(path, np.full((8000, 2), 0.25, np.float32), 8000)
>>> data, rate = read_excerpt(path, offset=0.5, duration=0.25, mono=True)
>>> data.shape, rate
((1, 2000), 8000)
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable

import numpy as np

from audiotree.dsp.edits import downmix
from audiotree.dsp.loudness import (
    ABSOLUTE_GATE_LUFS,
    BLOCK_SEC,
    CHANNEL_WEIGHTS,
    LUFS_OFFSET,
    MAX_K_WEIGHT_GAIN_DB,
    RELATIVE_GATE_LU,
    STEP_SEC,
    measure,
)
from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.io.segment import check_window, open_audio
from audiotree.validation import check_duration, check_pad_mode

__all__ = ["Clip", "read_excerpt", "select_clip", "loudest_clip"]

# The energy map works in 100 ms steps: BS.1770 gating blocks are 4 of them, 75 % overlapped.
_BLOCKS_PER_GATE = round(BLOCK_SEC / STEP_SEC)


@dataclasses.dataclass(frozen=True, eq=False)
class Clip:
    """One excerpt read from a file, before it becomes an ``AudioTree``.

    Attributes:
      path: the file it was read from.
      data: ``(C, T)`` float32 samples at ``sample_rate``.
      sample_rate: Hz.
      offset: seconds into the file of the first sample.
      lufs: gated loudness (LUFS) when the strategy measured it (``loudest``), else ``None``.
      lufs_windows: ``(W,)`` float32 ungated 0.4 s window loudness, with ``lufs``.
      lengths: real samples of a whole-file read (``full``), else ``None``.
      method: how ``loudest`` chose it (``"index"`` or ``"search"``), else ``None``.
    """

    path: str
    data: np.ndarray
    sample_rate: int
    offset: float
    lufs: float | None = None
    lufs_windows: np.ndarray | None = None
    lengths: int | None = None
    method: str | None = None


# ------------------------------------------------------------------ reading
def _fit_length(data: np.ndarray, target: int, pad_mode: str | None) -> np.ndarray:
    """Trims or right-pads ``data`` ``(C, n)`` to ``target`` samples."""
    n = data.shape[-1]
    if n >= target:
        return data[..., :target]
    if pad_mode is None:
        return data
    if pad_mode == "constant" or n == 0:
        out = np.zeros(data.shape[:-1] + (target,), dtype=data.dtype)
        out[..., :n] = data
        return out
    return np.pad(data, [(0, 0)] * (data.ndim - 1) + [(0, target - n)], mode=pad_mode)


def _finish(frames: np.ndarray, native_rate: int, sample_rate: int | None, duration: float | None,
            mono: bool, pad_mode: str | None) -> tuple[np.ndarray, int]:
    """Native ``(n, C)`` frames -> ``(C, T)`` float32 at the target rate and length."""
    rate = int(sample_rate or native_rate)
    if mono:
        frames = downmix(frames, axis=1)
    if rate != native_rate and frames.shape[0]:
        from audiotree.dsp.resample import resample

        frames = resample(frames, native_rate, rate, axis=0)
    data = np.ascontiguousarray(frames.T, dtype=np.float32)
    if duration is not None:
        data = _fit_length(data, int(round(duration * rate)), pad_mode)
    return data, rate


class OffsetPastEndError(ValueError):
    """An excerpt's offset at or past the end of its file (the caller's idea of its length was wrong)."""


def _start_frame(path: str, info: Any, offset: float) -> int:
    start = int(round(float(offset) * info.sample_rate))
    if offset < 0:
        raise ValueError(f"offset must be >= 0 seconds, got {offset!r}.")
    if offset > 0 and start >= info.frames:
        raise OffsetPastEndError(
            f"Offset {float(offset):.3f} s is at or past the end of '{path}' "
            f"(duration {info.duration:.3f} s)."
        )
    return start


def _native_frames(duration: float | None, native_rate: int, target_rate: int) -> int | None:
    if duration is None:
        return None
    # One spare frame when resampling so the output covers the target length.
    return int(math.ceil(duration * native_rate)) + (1 if target_rate != native_rate else 0)


def read_excerpt(
    path: str | os.PathLike,
    *,
    offset: float = 0.0,
    duration: float | None = None,
    sample_rate: int | None = None,
    mono: bool = False,
    pad_mode: str | None = "constant",
    check_info: Callable[[Any], None] | None = None,
) -> tuple[np.ndarray, int]:
    """Seeks to ``offset`` s and decodes ``duration`` s; returns ``((C, T) float32, rate)``.

    Only the requested frames are decoded. ``T == round(duration * rate)`` unless
    ``pad_mode`` is None and the file ends first. ``check_info`` is called with
    the file's :class:`~audiotree.io.decode.AudioInfo` before anything is
    decoded (raise to refuse the file): the same single open, where a separate
    ``probe`` would open a remote file twice.
    """
    check_duration(duration)
    check_pad_mode(pad_mode)

    def checked(info):
        check_info(info)
        return offset

    data, rate, _ = _read_at(os.fspath(path), checked if check_info is not None else None, offset, duration,
                             sample_rate, mono, pad_mode)
    return data, rate


def _read_at(path, choose_offset, offset, duration, sample_rate, mono, pad_mode,
             window=None) -> tuple[np.ndarray, int, float]:
    """Opens ``path`` once (its segment ``window``, when given), reads at ``offset``
    (or ``choose_offset(info)``) within it, finishes.

    Returns ``((C, T) float32, rate, start in seconds into the file)``.
    """
    with open_audio(path, window) as f:
        info = f.info
        if choose_offset is not None:
            offset = choose_offset(info)
        start = _start_frame(path, info, offset)
        frames = f.read(start, _native_frames(duration, info.sample_rate, int(sample_rate or info.sample_rate)))
        first = getattr(f, "first", 0)
    data, rate = _finish(frames, info.sample_rate, sample_rate, duration, mono, pad_mode)
    return data, rate, (first + start) / info.sample_rate


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
    ``offset``); ``start`` reads at ``offset``; ``loudest`` delegates to
    :func:`loudest_clip` (``plan``: a corpus index's
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
        data, rate, start_seconds = _read_at(path, None, offset, excerpt.crop_to, sample_rate, mono, None, window)
        return Clip(path=path, data=data, sample_rate=rate, offset=start_seconds, lengths=int(data.shape[-1]))
    if excerpt.strategy == "loudest":
        if offset:
            raise ValueError("strategy='loudest' chooses its own offset; do not pass offset.")
        return loudest_clip(
            audio_path, rng, excerpt, duration=duration, sample_rate=sample_rate, mono=mono, pad_mode=pad_mode,
            plan=plan, window=window,
        )
    path = os.fspath(audio_path)
    choose = None
    if excerpt.strategy == "random":
        search = excerpt.resolved_search
        choose = lambda info: search(rng, offset, duration, info.duration, 0, 1)  # noqa: E731 - needs the header
    data, rate, start_seconds = _read_at(path, choose, offset, duration, sample_rate, mono, pad_mode, window)
    return Clip(path=path, data=data, sample_rate=rate, offset=start_seconds)


# ---------------------------------------------------------------- loudest
def _block_energy(frames: np.ndarray, rate: int) -> np.ndarray:
    """Channel-weighted mean square per 100 ms block of ``(n, C)`` frames (unfiltered)."""
    block = max(1, int(round(STEP_SEC * rate)))
    n_blocks = frames.shape[0] // block
    usable = frames[: n_blocks * block]
    channels = frames.shape[1]
    squares = np.square(usable[:, 0])
    for c in range(1, channels):
        weight = CHANNEL_WEIGHTS[c] if c < len(CHANNEL_WEIGHTS) else 1.0
        squares += np.float32(weight) * np.square(usable[:, c])
    return squares.reshape(n_blocks, block).sum(axis=1, dtype=np.float64) / block


def _loudness_ceiling(frames: np.ndarray, rate: int) -> float:
    """An upper bound on the gated loudness of ``frames`` (K-weighting adds <= ~4 dB)."""
    energy = _block_energy(frames, rate)
    peak = float(energy.max()) if energy.size else float(np.mean(np.square(frames))) if frames.size else 0.0
    return LUFS_OFFSET + 10 * math.log10(peak) + MAX_K_WEIGHT_GAIN_DB if peak > 0 else -math.inf


def _gated_estimate(block_energy: np.ndarray, window_blocks: int) -> np.ndarray:
    """Gated loudness estimate of every window of ``window_blocks`` 100 ms blocks.

    Uses 400 ms gating blocks made of 4 consecutive 100 ms blocks, like BS.1770.
    Returns one estimate (LUFS-like, unfiltered) per window start.
    """
    n = block_energy.shape[0]
    k = _BLOCKS_PER_GATE
    if n < k or window_blocks < k:
        total = block_energy[: max(window_blocks, 1)]
        mean = float(total.mean()) if total.size else 0.0
        value = LUFS_OFFSET + 10 * np.log10(mean) if mean > 0 else -np.inf
        return np.full(max(n - window_blocks + 1, 1), value)
    csum = np.concatenate([[0.0], np.cumsum(block_energy)])
    gating = (csum[k:] - csum[:-k]) / k  # 400 ms blocks, 100 ms hop
    per_window = min(window_blocks - k + 1, gating.shape[0])
    views = np.lib.stride_tricks.sliding_window_view(gating, per_window)
    with np.errstate(divide="ignore"):
        loud = LUFS_OFFSET + 10 * np.log10(views)
    keep = loud > ABSOLUTE_GATE_LUFS
    mean_abs = np.where(keep, views, 0).sum(axis=1) / np.maximum(keep.sum(axis=1), 1)
    with np.errstate(divide="ignore"):
        relative = LUFS_OFFSET + 10 * np.log10(mean_abs) + RELATIVE_GATE_LU
    keep &= loud > relative[:, None]
    mean_rel = np.where(keep, views, 0).sum(axis=1)
    count = keep.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, LUFS_OFFSET + 10 * np.log10(mean_rel / np.maximum(count, 1)), -np.inf)


def _measure_native(frames: np.ndarray, rate: int) -> tuple[float, np.ndarray]:
    """Exact gated LUFS and ungated 0.4 s windows of real samples ``(n, C)``."""
    if frames.shape[0] == 0:
        return -math.inf, np.zeros(0, np.float32)
    lufs, windows = measure(frames.T, rate)
    return float(lufs), windows


def _windows_for_length(windows: np.ndarray, samples: int, rate: int) -> np.ndarray:
    """Pads (with -inf, i.e. padding silence) or trims windows to an output length."""
    w = int(round(0.4 * rate))
    count = (samples - w) // w + 1 if samples >= w else 0
    if windows.shape[-1] == count and windows.dtype == np.float32:
        return windows  # the usual case (an unpadded excerpt): nothing to pad or trim
    out = np.full((count,), -np.inf, dtype=np.float32)
    n = min(count, windows.shape[-1])
    out[:n] = windows[:n]
    return out


class _Candidate:
    """One metered excerpt: its loudness, start frame, native frames and windows."""

    __slots__ = ("lufs", "start", "frames", "windows")

    def __init__(self, lufs: float, start: int, frames: np.ndarray, windows: np.ndarray):
        self.lufs, self.start, self.frames, self.windows = lufs, start, frames, windows


def loudest_clip(
    audio_path: str | os.PathLike,
    rng: np.random.Generator,
    excerpt: ExcerptConfig,
    *,
    duration: float | None = None,
    offset: float | None = None,
    sample_rate: int | None = None,
    mono: bool = False,
    pad_mode: str | None = "constant",
    plan: Any = None,
    window: tuple[float, float] | None = None,
) -> Clip | None:
    """Finds an excerpt whose gated loudness clears ``excerpt.lufs_cutoff``.

    Returns a :class:`Clip` carrying ``lufs`` and ``lufs_windows`` ``(W,)`` of the
    excerpt (of its mono mix when ``mono``) and ``method`` (``"index"`` or
    ``"search"``, see :data:`audiotree.excerpts.plan.EXCERPT_METHODS`), or
    ``None`` under ``on_failure="skip"``. ``plan`` (a
    :class:`~audiotree.excerpts.plan.RowPlan` from a corpus index) replaces the
    search by one draw among the windows the profile says clear the cutoff; the
    item's ``lufs`` then comes from the profile when it clears the cutoff by the
    documented margin, else from the meter. ``window=(start, end)`` searches
    only that segment of the file (as :func:`select_clip`). See the module docstring.
    """
    if offset is not None:
        raise ValueError("loudest_excerpt() chooses its own offset; do not pass offset.")
    if duration is None:
        raise ValueError("loudest_excerpt() needs duration=.")
    check_duration(duration)
    check_pad_mode(pad_mode)
    if not isinstance(excerpt, ExcerptConfig) or excerpt.strategy != "loudest":
        raise ValueError("loudest_excerpt() needs an ExcerptConfig with strategy='loudest'.")
    path = os.fspath(audio_path)
    cutoff = float(excerpt.lufs_cutoff)
    method = "search" if plan is None else "index"
    if plan is not None and not plan.qualifies and excerpt.on_failure != "keep":
        # Known from the index: no window of this file clears the cutoff, so nothing is read.
        if excerpt.on_failure == "skip":
            return None
        raise RuntimeError(
            f"No excerpt of '{path}' clears lufs_cutoff={cutoff} LUFS: by the corpus index its loudest "
            f"{duration:g} s window is {plan.best_lufs:.1f} LUFS; lower the cutoff, use on_failure='keep'/'skip', "
            "or skip_silent=True."
        )
    with open_audio(path, check_window(window)) as f:
        out_rate = int(sample_rate or f.info.sample_rate)
        if plan is None:
            best = _LoudestSearch(f, rng, excerpt, duration, mono, out_rate).run()
        else:
            best = _PlannedSearch(f, rng, excerpt, duration, mono, out_rate, plan).run()
    if not best.lufs > cutoff:
        if excerpt.on_failure == "raise":
            raise RuntimeError(
                f"No excerpt of '{path}' cleared lufs_cutoff={cutoff} LUFS in {excerpt.num_tries} tries "
                f"(loudest was {best.lufs:.1f} LUFS); lower the cutoff or use on_failure='keep'/'skip'."
            )
        if excerpt.on_failure == "skip":
            return None
    rate = f.info.sample_rate
    data, out_rate = _finish(best.frames, rate, sample_rate, duration, False, pad_mode)
    windows = _windows_for_length(best.windows, data.shape[-1], out_rate)
    first = getattr(f, "first", 0)
    return Clip(path=path, data=data, sample_rate=out_rate, offset=(first + best.start) / rate, lufs=best.lufs,
                lufs_windows=windows, method=method)


class _LoudestSearch:
    """The ``loudest`` search over one open file (see the module docstring).

    Attempts first seek and read ``duration`` at an offset drawn by ``search``,
    which is all a typical file needs. A file short enough to scan whose first
    attempt misses is decoded whole once; later attempts then snap to windows
    whose energy estimate can clear the cutoff.
    """

    def __init__(self, f, rng, excerpt: ExcerptConfig, duration: float, mono: bool, out_rate: int):
        self.f, self.rng, self.excerpt, self.duration, self.mono = f, rng, excerpt, duration, mono
        self.rate = f.info.sample_rate
        # Frames read per candidate: a spare one when resampling, like every other read.
        self.need = _native_frames(duration, self.rate, out_rate)
        self.cutoff = float(excerpt.lufs_cutoff)
        self.search = excerpt.resolved_search
        limit = excerpt.scan_max_seconds
        self.scan_frames = int(limit * self.rate) if limit is not None else excerpt.num_tries * self.need
        self.best: _Candidate | None = None

    def _read(self, start: int, count: int | None) -> np.ndarray:
        frames = self.f.read(start, count)
        return downmix(frames, axis=1) if self.mono else frames

    def _consider(self, start: int, frames: np.ndarray) -> bool:
        """Meters a candidate unless it cannot beat the best; True once the cutoff is cleared."""
        if self.best is not None and _loudness_ceiling(frames, self.rate) <= self.best.lufs:
            return False
        lufs, windows = _measure_native(frames, self.rate)
        if self.best is None or lufs > self.best.lufs:
            self.best = _Candidate(lufs, start, frames, windows)
        return lufs > self.cutoff

    def run(self) -> _Candidate:
        info = self.f.info
        if info.frames <= self.need:
            frames = self._read(0, None)
            self._consider(0, frames)
            return self.best
        last_start = info.frames - self.need
        total = info.duration
        tries = self.excerpt.num_tries
        scan = None
        for attempt in range(tries):
            drawn = self.search(self.rng, 0.0, self.duration, total, attempt, tries)
            start = min(max(int(round(drawn * self.rate)), 0), last_start)
            if scan is None:
                if self._consider(start, self._read(start, self.need)):
                    break
                if attempt == 0 and tries > 1:
                    if info.frames <= self.scan_frames:
                        scan = _EnergyMap(self._read(0, None), self.rate, self.need, self.cutoff)
                    else:
                        self._probe_search(tries - 1)
                        break
                continue
            start = scan.snap(start, self.rng)
            if start is None:
                break
            if self._consider(start, scan.whole[start : start + self.need]):
                break
        if self.best is None:
            raise AudioReadError(f"Failed to read audio file '{self.f.path}': every read came back empty.", self.f.path)
        return self.best

    def _probe_search(self, attempts: int) -> None:
        """Probes the file, then meters the loudest window around each loudest probe in turn.

        Each of up to ``attempts`` regions is one read of at most ``2 * need``
        frames centred on a probe not inside an earlier region.
        """
        from audiotree.excerpts.plan import probe_energy, probe_layout

        frames = self.f.info.frames
        starts, length = probe_layout(frames, self.rate, self.duration, self.rng)
        energy = probe_energy(self._read, starts, length)
        covered: list[tuple[int, int]] = []
        for k in np.argsort(-energy, kind="stable"):
            if attempts <= 0:
                return
            pos = int(starts[k])
            if any(a <= pos and pos + length <= b for a, b in covered):
                continue
            lo = max(0, pos + length - self.need)
            hi = min(frames, pos + self.need)
            region = self._read(lo, hi - lo)
            covered.append((lo, lo + region.shape[0]))
            attempts -= 1
            if region.shape[0] <= self.need:
                start, cand = lo, region
            else:
                block = max(1, int(round(STEP_SEC * self.rate)))
                estimate = _gated_estimate(_block_energy(region, self.rate), max(1, self.need // block))
                offset = min(int(np.argmax(estimate)) * block, region.shape[0] - self.need)
                start, cand = lo + offset, region[offset: offset + self.need]
            if self._consider(start, cand):
                return


class _PlannedSearch(_LoudestSearch):
    """``loudest`` from a corpus index: draw a start the profile says is loud, read it, meter it.

    The meter confirms the draw (the profile is an estimate); a rare miss draws
    again, up to ``num_tries`` reads. A file with no qualifying window reads its
    loudest window by the profile (``on_failure="keep"``).
    """

    def __init__(self, f, rng, excerpt, duration, mono, out_rate, plan):
        super().__init__(f, rng, excerpt, duration, mono, out_rate)
        self.plan = plan

    def run(self) -> _Candidate:
        from audiotree.index.profile import profile_step

        info = self.f.info
        if info.frames <= self.need:
            frames = self._read(0, None)
            known = self.plan.whole()
            if known is not None and frames.shape[0] >= 1:
                # The whole file is the window: its profile's reading is the meter's (no meter pass).
                self.best = _Candidate(known[0], 0, frames, known[1])
            else:
                self._consider(0, frames)
            return self.best
        step = profile_step(self.rate)
        last_start = info.frames - self.need
        blocks = [self.plan.best] if not self.plan.qualifies else None
        for _ in range(self.excerpt.num_tries if blocks is None else 1):
            block, known = self.plan.pick(self.rng) if blocks is None else (blocks[0], None)
            start = min(block * step, last_start)
            frames = self._read(start, self.need)
            if known is not None:
                # The profile cleared cutoff + margin; its reading is the item's lufs (no meter pass).
                self.best = _Candidate(known[0], start, frames, known[1])
                break
            if self._consider(start, frames):
                break
        if self.best is None:
            raise AudioReadError(f"Failed to read audio file '{self.f.path}': every read came back empty.", self.f.path)
        return self.best


class _EnergyMap:
    """Cheap gated-loudness estimates of every 100 ms window start of a decoded file."""

    def __init__(self, whole: np.ndarray, rate: int, need: int, cutoff: float):
        self.whole = whole
        self.block = max(1, int(round(STEP_SEC * rate)))
        self.last_start = max(whole.shape[0] - need, 0)
        self.estimate = _gated_estimate(_block_energy(whole, rate), max(1, need // self.block))
        # Window starts that might clear the cutoff, loudest estimates first when none can.
        self.plausible = np.flatnonzero(self.estimate + MAX_K_WEIGHT_GAIN_DB > cutoff)
        self.fallback = list(np.argsort(-self.estimate, kind="stable"))
        self.cutoff = cutoff
        self.tried: set[int] = set()

    def snap(self, start: int, rng: np.random.Generator) -> int | None:
        """The drawn start, or the nearest untried plausible window start."""
        block = min(start // self.block, self.estimate.shape[0] - 1)
        if self.plausible.size:
            if self.estimate[block] + MAX_K_WEIGHT_GAIN_DB <= self.cutoff or block in self.tried:
                candidates = np.setdiff1d(self.plausible, np.fromiter(self.tried, dtype=np.int64), assume_unique=True)
                if not candidates.size:
                    return None
                block = int(candidates[np.argmin(np.abs(candidates - block))])
                start = block * self.block
        else:
            while self.fallback and int(self.fallback[0]) in self.tried:
                self.fallback.pop(0)
            if not self.fallback:
                return None
            block = int(self.fallback.pop(0))
            start = block * self.block
        self.tried.add(block)
        return min(start, self.last_start)
