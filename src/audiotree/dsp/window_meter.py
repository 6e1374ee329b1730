"""A streaming BS.1770 meter: gated loudness of consecutive windows of a long signal.

The K-weighting filter state is carried from one chunk to the next, so a file
can be measured in bounded memory, chunk by chunk, with exactly the result of
filtering it whole. Each window of ``window`` samples gets the *gated*
integrated loudness (LUFS) of its own K-weighted power; a trailing partial
window is never measured.

>>> import numpy as np
>>> meter = WindowMeter(48_000, channels=1, window=48_000)
>>> tone = 0.1 * np.sin(2 * np.pi * 1000 * np.arange(96_000) / 48_000)[:, None]
>>> lufs = meter.push(tone)
>>> lufs.shape, bool(np.all(np.abs(lufs - lufs[0]) < 0.1))
((2,), True)
"""

from __future__ import annotations

import numpy as np

from audiotree.dsp.biquads import sosfilt_blocks
from audiotree.dsp.loudness import CHANNEL_WEIGHTS, integrated_from_power, k_weighting_sos

__all__ = ["WindowMeter"]


class WindowMeter:
    """Measures consecutive ``window``-sample windows of ``(n, channels)`` frames pushed in order.

    ``push`` must receive whole windows (``n`` a multiple of ``window``); it
    returns one float32 loudness per window. Channels are weighted as BS.1770
    (at most 5); a mono meter (``channels=1``) measures a downmix.
    """

    def __init__(self, sample_rate: int, *, channels: int, window: int):
        if window <= 0:
            raise ValueError(f"window must be at least one sample, got {window}.")
        if channels > len(CHANNEL_WEIGHTS):
            raise ValueError(f"BS.1770 loudness is defined for at most {len(CHANNEL_WEIGHTS)} channels, got {channels}.")
        self.sample_rate = int(sample_rate)
        self.window = int(window)
        self._sos = np.array(k_weighting_sos(self.sample_rate))
        self._weights = np.asarray(CHANNEL_WEIGHTS[:channels], dtype=np.float64)
        self._state = np.zeros((channels, 2 * self._sos.shape[0]))  # per channel, starts at rest

    def weighted_power(self, frames: np.ndarray) -> np.ndarray:
        """K-weighted, channel-weighted power of ``frames`` ``(k * window, channels)``, as ``(k, window)`` float64.

        Advances the filter state: call it (or :meth:`push`) on consecutive chunks.
        """
        count, rest = divmod(frames.shape[0], self.window)
        if rest:
            raise ValueError(f"The meter takes whole windows of {self.window} frames, got {frames.shape[0]}.")
        filtered, self._state = sosfilt_blocks(self._sos, np.asarray(frames).T, zi=self._state)
        return (self._weights @ np.square(filtered, out=filtered)).reshape(count, self.window)

    def push(self, frames: np.ndarray) -> np.ndarray:
        """The gated loudness (LUFS, float32) of each window in ``frames`` ``(k * window, channels)``."""
        return np.asarray(integrated_from_power(self.weighted_power(frames), self.sample_rate), dtype=np.float32)
