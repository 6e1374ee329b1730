"""Signal-quality measures of a file, accumulated chunk by chunk in one decode pass.

:class:`QualityMeter` is fed the frames the loudness profile decodes
(:func:`audiotree.index.profile.file_profile`'s ``on_frames``), in order, and
at the end gives the index's quality columns (NumPy and SciPy-free arithmetic
only; no model):

``bandwidth_hz``
  The highest frequency with real content. The long-term average spectrum
  (LTAS: the mean of Hann-windowed power spectra of the channel mix, one frame
  of ``fft_size(rate)`` samples (about 46 ms) every :data:`FRAME_EVERY` such frames) is smoothed
  over 5 bins; its *in-band level* is the 95th percentile of that smoothed
  spectrum (in dB) over the bins above 50 Hz. ``bandwidth_hz`` is the upper edge of the
  highest bin within :data:`BANDWIDTH_DROP_DB` (60 dB) of the in-band level.
  0.0 for a file of digital silence.
``clip_share``, ``clip_longest``
  The file's *ceiling* is ``min(1, peak)`` (peak: the largest absolute
  sample). A sample is at the ceiling when its magnitude is within
  :data:`CLIP_TOLERANCE` (2 ** -14, two 16-bit steps) of it; clipped samples
  are those in runs of at least :data:`CLIP_RUN` (3) consecutive samples at the
  ceiling, per channel. ``clip_share`` is their share of all samples (every
  channel), ``clip_longest`` the longest such run in samples (0 for none).
``dc_offset``
  The largest absolute mean over the channels.
``channel_corr``
  Pearson correlation of the first two channels of a 2-channel file; NaN for
  any other channel count (mono, or more than two) and when a channel is
  constant.
``snr_db``
  ``10 log10((P - N) / N)``: ``P`` is the mean power of the channel mix, ``N``
  the 5th percentile of its power over 60 ms (the moving mean of three 20 ms
  frames, a 20 ms frame being a fifth of a 100 ms block): the noise floor heard between events (speech pauses, gaps
  between notes). Capped at :data:`SNR_CAP_DB` (a floor of digital silence).
  A file without pauses (continuous music, a noise recording) reads as the
  ratio of its mean to its quietest moments, a lower bound of its SNR. NaN for
  a file of digital silence.
Per 100 ms block (the loudness profile's grid), :meth:`QualityMeter.clip_blocks`
  counts the clipped samples of each block, by the same rule.
``silence_share``
  Computed from the loudness profile (:func:`silence_share`): the share of
  100 ms blocks under :data:`SILENCE_LUFS`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["QualityMeter", "silence_share", "fft_size", "QUALITY_COLUMNS", "BANDWIDTH_DROP_DB", "CLIP_TOLERANCE",
           "CLIP_RUN", "SILENCE_LUFS", "SNR_CAP_DB", "FRAME_EVERY"]

#: The quality columns, in the index's column order.
QUALITY_COLUMNS = ("bandwidth_hz", "clip_share", "clip_longest", "dc_offset", "channel_corr", "silence_share",
                   "snr_db")
#: dB under the in-band level where the LTAS ends (see ``bandwidth_hz``).
BANDWIDTH_DROP_DB = 60.0
#: Distance from the ceiling still counted as at it (two 16-bit steps).
CLIP_TOLERANCE = 2.0 ** -14
#: Consecutive samples at the ceiling that make a clipped run.
CLIP_RUN = 3
#: Loudness (LUFS, of a 100 ms block) under which a block is silence.
SILENCE_LUFS = -60.0
#: The largest ``snr_db`` reported (a noise floor of digital silence).
SNR_CAP_DB = 100.0
#: One spectrum frame is taken out of every this many (bounds the cost to a few % of a decode).
FRAME_EVERY = 16
_PERCENTILE = 5.0
_SNR_FRAMES_PER_BLOCK = 5
_SNR_SMOOTH = 3
_SMOOTH_BINS = 5
_CLIP_BLOCK = 4096
_LOW_HZ = 50.0


def fft_size(sample_rate: int) -> int:
    """The LTAS frame length at ``sample_rate``: the power of two nearest 46 ms (2048 at 44.1 and 48 kHz).

    >>> fft_size(44_100), fft_size(16_000), fft_size(8_000)
    (2048, 1024, 512)
    """
    return 1 << max(6, int(round(math.log2(max(1.0, 0.046 * int(sample_rate))))))


def silence_share(profile, threshold_lufs: float = SILENCE_LUFS) -> float:
    """Share of a loudness profile's 100 ms blocks quieter than ``threshold_lufs`` (NaN for no block).

    A block's loudness is ``-0.691 + 10 log10(mean square)`` (BS.1770's
    formula applied to the one block).

    >>> silence_share(np.r_[np.zeros(8), np.full(2, 0.01)])
    0.8
    """
    p = np.asarray(profile, dtype=np.float64).reshape(-1)
    if p.size == 0:
        return float("nan")
    limit = 10.0 ** ((float(threshold_lufs) + 0.691) / 10.0)
    return float(np.count_nonzero(p < limit) / p.size)


class _ClipRuns:
    """Runs of samples at the ceiling, per channel, across chunks (a run may span a chunk boundary)."""

    def __init__(self, channels: int, step: int = 0):
        self.carry = np.zeros(channels, dtype=np.int64)  # length of the run open at the end of the last chunk
        self.chunks: list[tuple[float, int, int]] = []   # (ceiling used, clipped samples, longest run)
        self.peak = 0.0
        self.step = int(step)  # frames per block of the per-block counts (0: none kept)
        self.frame = 0  # frames pushed before this chunk
        self.per_block: list[tuple[int, np.ndarray]] = []  # (first block a chunk touches, clipped samples per block)

    def push(self, frames: np.ndarray) -> None:
        """Counts the runs in ``frames`` ``(n, channels)``, C-ordered."""
        n, channels = frames.shape
        if n == 0:
            return
        first_frame, self.frame = self.frame, self.frame + n
        flat = frames.reshape(-1)
        # Maxima of blocks of the interleaved samples: only the blocks that reach the ceiling are searched.
        whole = flat.size // _CLIP_BLOCK * _CLIP_BLOCK
        blocks = flat[:whole].reshape(-1, _CLIP_BLOCK)
        tops = np.r_[blocks.max(axis=1), flat[whole:].max(initial=-np.inf)]
        bottoms = np.r_[blocks.min(axis=1), flat[whole:].min(initial=np.inf)]
        top, bottom = float(tops.max()), float(bottoms.min())
        self.peak = max(self.peak, top, -bottom)
        ceiling = min(1.0, self.peak)
        threshold = ceiling - CLIP_TOLERANCE
        counted = longest = 0
        if ceiling <= 0 or max(top, -bottom) < threshold:
            self.carry[:] = 0
            self.chunks.append((ceiling, 0, 0))
            return
        hits = []
        for b in np.flatnonzero((tops >= threshold) | (bottoms <= -threshold)):
            part = flat[b * _CLIP_BLOCK:(b + 1) * _CLIP_BLOCK]
            hits.append(b * _CLIP_BLOCK + np.flatnonzero((part >= threshold) | (part <= -threshold)))
        hits = np.concatenate(hits)
        marks = np.zeros(n + 1, dtype=np.int64) if self.step else None  # +1 at a counted run's start, -1 past it
        for c in range(channels):
            frame = hits[hits % channels == c] // channels if channels > 1 else hits
            if frame.size == 0:
                self.carry[c] = 0
                continue
            breaks = np.flatnonzero(np.diff(frame) != 1)
            starts = frame[np.r_[0, breaks + 1]]
            ends = frame[np.r_[breaks, frame.size - 1]] + 1
            lengths = ends - starts
            effective = lengths.copy()
            counts = lengths.copy()  # samples counted now, per run
            carry = int(self.carry[c])
            if carry and starts[0] == 0:  # the run open at the last chunk's end goes on
                effective[0] += carry
                # Its carried samples were counted already once it had reached CLIP_RUN.
                counts[0] = lengths[0] if carry >= CLIP_RUN else effective[0]
            counted += int(counts[effective >= CLIP_RUN].sum())
            if marks is not None:  # (samples carried from the last chunk are counted at this chunk's first frame)
                keep = effective >= CLIP_RUN
                np.add.at(marks, starts[keep], 1)
                np.add.at(marks, ends[keep], -1)
                if keep[0] and counts[0] > lengths[0]:
                    marks[0] += counts[0] - lengths[0]
                    marks[1] -= counts[0] - lengths[0]
            qualifying = effective[effective >= CLIP_RUN]
            if qualifying.size:
                longest = max(longest, int(qualifying.max()))
            self.carry[c] = int(effective[-1]) if ends[-1] == n else 0
        self.chunks.append((ceiling, counted, longest))
        if marks is not None and counted:  # per block of the file's grid this chunk touches
            lo = first_frame // self.step
            at = (first_frame + np.arange(n)) // self.step - lo
            self.per_block.append((lo, np.bincount(at, weights=np.cumsum(marks[:-1]), minlength=at[-1] + 1)))

    def blocks(self, count: int) -> np.ndarray:
        """Clipped samples (every channel) in each of the first ``count`` blocks of ``step`` frames."""
        out = np.zeros(count, dtype=np.int64)
        ceiling = min(1.0, self.peak)
        kept = {i for i, (c, k, _) in enumerate(self.chunks) if c >= ceiling - CLIP_TOLERANCE and k}
        positions = [i for i, (c, k, _) in enumerate(self.chunks) if k]  # the chunks that recorded counts
        for i, (lo, counts) in zip(positions, self.per_block):
            if i in kept and lo < count:
                part = np.rint(counts[:count - lo]).astype(np.int64)
                out[lo:lo + part.size] += part
        return out

    def result(self) -> tuple[int, int]:
        ceiling = min(1.0, self.peak)
        # A chunk measured against a lower running ceiling holds no sample at the final one.
        kept = [(c, k, m) for c, k, m in self.chunks if c >= ceiling - CLIP_TOLERANCE]
        return sum(k for _, k, _ in kept), max((m for _, _, m in kept), default=0)


class QualityMeter:
    """Accumulates a file's quality measures over its frames, pushed in order (see the module).

    >>> rate = 16_000
    >>> t = np.arange(rate) / rate
    >>> x = np.clip(0.8 * np.sin(2 * np.pi * 440 * t), -0.5, 0.5) + 0.01
    >>> meter = QualityMeter(rate, channels=1)
    >>> meter.push(x[:, None])
    >>> q = meter.result(profile=np.full(10, 0.01))
    >>> round(q["dc_offset"], 4), q["clip_longest"] > 3, q["silence_share"]
    (0.01, True, 0.0)
    """

    def __init__(self, sample_rate: int, *, channels: int):
        self.rate = int(sample_rate)
        self.channels = int(channels)
        self.n = 0
        self._sum = np.zeros(self.channels, dtype=np.float64)
        self._pair = np.zeros(3, dtype=np.float64)  # sums of xx, yy, xy of a stereo file
        self.step = max(1, int(round(0.1 * self.rate)))  # frames per 100 ms profile block
        self._clips = _ClipRuns(self.channels, self.step)
        self._nfft = fft_size(self.rate)
        self._window = np.hanning(self._nfft).astype(np.float32)
        self._spectrum = np.zeros(self._nfft // 2 + 1, dtype=np.float64)
        self._frames = 0
        self._skip = 0  # samples of the mix to pass before the next spectrum frame
        self._frame_len = max(1, int(round(0.1 * self.rate)) // _SNR_FRAMES_PER_BLOCK)
        self._pending = np.zeros(0, dtype=np.float32)  # mix samples short of a 20 ms frame
        self._powers: list[np.ndarray] = []

    def push(self, frames: np.ndarray) -> None:
        """Adds ``(n, channels)`` frames (float, full scale 1.0), the file's next ones."""
        x = np.ascontiguousarray(frames, dtype=np.float32)
        if x.ndim == 1:
            x = x[:, None]
        if x.shape[0] == 0:
            return
        # Every pass is over contiguous memory, most in BLAS: strided NumPy reductions would cost more than the
        # K-weighting filter of the profile itself.
        self.n += x.shape[0]
        if self.channels == 1:
            mix = x[:, 0]
            self._sum += float(mix.sum(dtype=np.float32))
        else:
            planar = x.T.copy()  # (channels, n): each channel contiguous
            self._sum += planar.sum(axis=1, dtype=np.float32)
            mix = planar.sum(axis=0, dtype=np.float32) if self.channels > 2 else planar[0] + planar[1]
            mix *= np.float32(1.0 / self.channels)
            if self.channels == 2:
                left, right = planar
                self._pair += (float(left @ left), float(right @ right), float(left @ right))
        self._clips.push(x)
        self._push_spectrum(mix)
        self._push_power(mix)

    def _push_spectrum(self, mix: np.ndarray) -> None:
        step = self._nfft * FRAME_EVERY
        first = self._skip
        if first >= mix.shape[0]:
            self._skip -= mix.shape[0]
            return
        count = (mix.shape[0] - first - self._nfft) // step + 1 if mix.shape[0] - first >= self._nfft else 0
        if count > 0:
            idx = first + step * np.arange(count)
            frames = np.lib.stride_tricks.sliding_window_view(mix, self._nfft)[idx] * self._window
            bins = np.fft.rfft(frames, axis=1)
            power = bins.real ** 2 + bins.imag ** 2
            self._spectrum += power.sum(axis=0, dtype=np.float64)
            self._frames += count
            self._skip = first + step * count - mix.shape[0]
            self._skip = max(self._skip, 0)
        else:
            self._skip = max(0, first - mix.shape[0])

    def _push_power(self, mix: np.ndarray) -> None:
        if self._pending.size:
            mix = np.concatenate([self._pending, mix])
        whole = (mix.shape[0] // self._frame_len) * self._frame_len
        if whole:
            framed = mix[:whole].reshape(-1, self._frame_len)
            self._powers.append(np.einsum("ij,ij->i", framed, framed) / np.float32(self._frame_len))
        self._pending = np.array(mix[whole:], dtype=np.float32)

    def clip_blocks(self, count: int) -> np.ndarray:
        """Clipped samples (the ``clip_share`` rule, every channel) in each of the first ``count`` 100 ms blocks
        (the loudness profile's grid), int64. A run that spans two pushes and reaches :data:`CLIP_RUN` only in
        the second counts its first samples in the second's first block (at most ``CLIP_RUN - 1`` moved)."""
        return self._clips.blocks(int(count))

    def bandwidth(self) -> float:
        """``bandwidth_hz`` of what was pushed (see the module)."""
        if self._frames == 0 or not np.any(self._spectrum > 0):
            return 0.0
        spectrum = np.convolve(self._spectrum / self._frames, np.ones(_SMOOTH_BINS) / _SMOOTH_BINS, mode="same")
        bin_hz = self.rate / self._nfft
        with np.errstate(divide="ignore"):
            level = 10.0 * np.log10(spectrum)
        low = min(int(math.ceil(_LOW_HZ / bin_hz)), level.size - 1)
        reference = float(np.percentile(level[low:], 95))
        above = np.flatnonzero(level >= reference - BANDWIDTH_DROP_DB)
        if above.size == 0:
            return 0.0
        return float(min(self.rate / 2.0, (above[-1] + 0.5) * bin_hz))

    def snr(self) -> float:
        """``snr_db`` of what was pushed (see the module)."""
        powers = np.concatenate(self._powers) if self._powers else np.zeros(0, np.float32)
        if powers.size == 0:
            return float("nan")
        mean = float(powers.mean(dtype=np.float64))
        if mean <= 0:
            return float("nan")
        if powers.size >= _SNR_SMOOTH:
            powers = np.convolve(powers, np.full(_SNR_SMOOTH, 1.0 / _SNR_SMOOTH), mode="valid")
        noise = float(np.percentile(powers, _PERCENTILE))
        if noise <= 0:
            return SNR_CAP_DB
        signal = max(mean - noise, 0.0)
        if signal == 0:
            return 0.0 if mean > 0 else float("nan")
        return float(min(SNR_CAP_DB, 10.0 * math.log10(signal / noise)))

    def result(self, profile=None) -> dict:
        """The quality columns as a dict (``silence_share`` from ``profile``, the float32 loudness profile).

        Nothing pushed (a file shorter than one 100 ms block): every value is
        NaN (``clip_longest`` ``None``), stored as null.
        """
        if self.n == 0:
            return {name: (None if name == "clip_longest" else float("nan")) for name in QUALITY_COLUMNS}
        n = self.n
        dc = float(np.max(np.abs(self._sum / n)))
        corr = float("nan")
        if self.channels == 2 and self.n > 1:
            sx, sy = self._sum
            sxx, syy, sxy = self._pair
            cov = sxy - sx * sy / n
            vx, vy = sxx - sx * sx / n, syy - sy * sy / n
            if vx > 0 and vy > 0:
                corr = float(np.clip(cov / math.sqrt(vx * vy), -1.0, 1.0))
        clipped, longest = self._clips.result()
        return {
            "bandwidth_hz": self.bandwidth(),
            "clip_share": float(clipped / (n * self.channels)),
            "clip_longest": int(longest),
            "dc_offset": dc,
            "channel_corr": corr,
            "silence_share": float("nan") if profile is None else silence_share(profile),
            "snr_db": self.snr(),
        }
