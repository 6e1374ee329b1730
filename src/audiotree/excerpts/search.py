"""The ``loudest`` search: an excerpt of one file whose gated loudness clears ``lufs_cutoff``.

:func:`find_loudest` runs it over one open file. With a corpus index the plan
of :mod:`audiotree.excerpts.plan` replaces the search (``plan=``).

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
4. Longer files are probed (see *Probes* below): short reads
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

Probes
    After a first random attempt misses on a file longer than
    ``scan_max_seconds``, short probes spaced at most ``duration / 2`` apart
    (with a random phase) measure the raw energy along the file. Probes are
    read from the end of the file backwards, so every hop is a real seek (a
    short forward hop on Ogg/Vorbis decodes through instead). The loudest
    probes, in order, then each get one read of ``2 * duration`` around them,
    in which a 100 ms energy map picks the loudest window to meter. Any loud
    passage at least ``duration / 2`` long is hit by a probe.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from audiotree.dsp.edits import downmix
from audiotree.dsp.loudness import (
    BLOCK_STEPS,
    CHANNEL_WEIGHTS,
    LUFS_OFFSET,
    MAX_K_WEIGHT_GAIN_DB,
    STEP_SEC,
    gated_from_block_power,
    measure,
)
from audiotree.errors import AudioReadError
from audiotree.excerpts.config import ExcerptConfig
from audiotree.io.excerpt import Clip, finish_frames, native_frames
from audiotree.io.segment import open_audio

__all__ = ["find_loudest", "probe_energy", "probe_layout"]

# Probe search: probes at most this many per file, this long (seconds).
_MAX_PROBES = 4096
_MIN_PROBE_SEC = 0.01
_MAX_PROBE_SEC = 0.1


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

    Uses 400 ms gating blocks made of 4 consecutive 100 ms blocks, gated by the
    meter's own gate (:func:`~audiotree.dsp.loudness.gated_from_block_power`).
    Returns one estimate (LUFS-like, unfiltered) per window start.
    """
    n = block_energy.shape[0]
    k = BLOCK_STEPS
    if n < k or window_blocks < k:
        total = block_energy[: max(window_blocks, 1)]
        mean = float(total.mean()) if total.size else 0.0
        value = LUFS_OFFSET + 10 * np.log10(mean) if mean > 0 else -np.inf
        return np.full(max(n - window_blocks + 1, 1), value)
    csum = np.concatenate([[0.0], np.cumsum(block_energy)])
    gating = (csum[k:] - csum[:-k]) / k  # 400 ms blocks, 100 ms hop
    per_window = min(window_blocks - k + 1, gating.shape[0])
    return gated_from_block_power(np.lib.stride_tricks.sliding_window_view(gating, per_window))


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


def find_loudest(audio_path: str | os.PathLike, rng: np.random.Generator, excerpt: ExcerptConfig, *, duration: float | None,
                 sample_rate: int | None, mono: bool, pad_mode: str | None, plan: Any, window: Any) -> Clip | None:
    """Finds an excerpt whose gated loudness clears ``excerpt.lufs_cutoff``.

    Called by :func:`~audiotree.excerpts.strategies.select_clip`, which declares
    the read keywords' defaults and has checked them (``window`` is resolved).
    Returns a
    :class:`Clip` carrying ``lufs`` and ``lufs_windows`` ``(W,)`` of the excerpt
    (of its mono mix when ``mono``) and ``method`` (``"index"`` or ``"search"``,
    see :data:`audiotree.excerpts.plan.EXCERPT_METHODS`), or ``None`` under
    ``on_failure="skip"``. ``plan`` (a :class:`~audiotree.excerpts.plan.RowPlan`
    from a corpus index) replaces the search by one draw among the windows the
    profile says clear the cutoff; the item's ``lufs`` then comes from the
    profile when it clears the cutoff by the documented margin, else from the
    meter. ``window=(start, end)`` searches only that segment of the file. See
    the module docstring.
    """
    if duration is None:
        raise ValueError("loudest_excerpt() needs duration=.")
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
    with open_audio(path, window) as f:
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
    data, out_rate = finish_frames(best.frames, rate, sample_rate, duration, False, pad_mode)
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
        self.need = native_frames(duration, self.rate, out_rate)
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


# ------------------------------------------------------------------- probes
def probe_layout(frames: int, rate: int, duration: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Probe start frames (ascending) and probe length in frames for a file of ``frames``.

    Spacing is ``duration / 2`` (wider only past :data:`_MAX_PROBES` probes), with
    a random phase; each probe is ``2 * duration / n`` seconds, clamped to
    [10 ms, 100 ms], so the probes read at most ``max(2 * duration, n * 10 ms)``.

    >>> starts, length = probe_layout(16_000 * 40, 16_000, 3.0, np.random.default_rng(0))
    >>> len(starts), length
    (27, 1600)
    """
    total = frames / rate
    spacing = max(duration / 2.0, total / _MAX_PROBES)
    n = max(1, int(math.ceil(total / spacing)))
    length = int(round(min(max(2.0 * duration / n, _MIN_PROBE_SEC), _MAX_PROBE_SEC) * rate))
    length = max(1, min(length, frames))
    phase = float(rng.uniform(0.0, spacing))
    starts = np.round((phase + spacing * np.arange(n)) * rate).astype(np.int64)
    starts = np.unique(np.minimum(starts, frames - length))
    return starts, length


def probe_energy(read, starts: np.ndarray, length: int) -> np.ndarray:
    """Mean square of each probe ``read(start, length) -> (n, C)``, read from the last backwards."""
    energy = np.zeros(starts.shape[0], dtype=np.float64)
    for k in range(starts.shape[0] - 1, -1, -1):
        chunk = read(int(starts[k]), length)
        if chunk.size:
            energy[k] = float(np.mean(np.square(chunk, dtype=np.float64)))
    return energy
