"""One preview card: a file's level and loudness over time, and the excerpt's spectrogram.

A card is ``WIDTH`` x ``HEIGHT`` pixels, drawn as PNG (matplotlib) or as SVG
(NumPy only), with the same layout:

* a legend row (at 9 pt, readable at 100% zoom);
* the **level panel**: the peak and RMS level of the plotted stretch of the
  source file in dBFS (left axis) and its loudness curve in LUFS (right axis),
  on one shared dB scale (a full-scale sine peaks at 0 dBFS and measures -3 LUFS,
  so the two read against each other). The excerpt's span is shaded, with its
  integrated loudness as a bar over it, and the cutoff as a dashed line.
  Silence (-inf) and anything below the bottom of the scale is a gap, not a
  line along the bottom edge;
* the **spectrogram panel**, under the level panel and linked to the span: a mel
  spectrogram of the excerpt exactly as the pipeline returned it.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import math
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from audiotree.plots._figure import READABLE_PT, new_figure, save_png

WIDTH, HEIGHT = 640, 360
#: Colours of the card, also used by the page's HTML legend.
COLOURS = {"peak": "#c9d1da", "rms": "#8795a6", "loudness": "#e8710a", "cutoff": "#c0392b", "excerpt": "#2f80ed"}
_LEVEL_FLOOR = -90.0  # dB: the lowest the level scale goes
_SPECTRUM_RANGE = 80.0  # dB shown below the loudest band
# Colour map of the spectrogram, dark (quiet) to bright (loud): anchors linearly interpolated.
_RAMP = np.array([(8, 6, 30), (52, 16, 92), (110, 28, 110), (168, 48, 96), (220, 84, 62), (246, 142, 34),
                  (250, 205, 70), (252, 250, 180)], dtype=np.float64) / 255.0

# Pixel geometry (top-left origin), shared by the PNG and SVG drawings.
_LEFT, _RIGHT = 52, WIDTH - 58
_LEVEL_TOP, _LEVEL_BOTTOM = 48, 196
_SPEC_TOP, _SPEC_BOTTOM = 214, 322


@dataclasses.dataclass(frozen=True)
class Card:
    """What one card shows. Times are seconds in the source file; levels in dB.

    ``peak_db``/``rms_db``/``loudness`` hold ``-inf`` (or NaN) where the audio is
    silent. ``spectrogram`` is an :class:`audiotree.dsp.spectrogram.MelSpectrogram`
    of the excerpt, whose first sample is at ``span[0]``.
    """

    view: tuple[float, float]
    env_t: np.ndarray
    peak_db: np.ndarray
    rms_db: np.ndarray
    loud_t: np.ndarray
    loudness: np.ndarray
    loud_window: float
    span: tuple[float, float]
    spectrogram: Any
    cutoff: float | None = None
    lufs: float | None = None
    title: str = ""


# ---------------------------------------------------------------- shared arithmetic
def level_limits(card: Card) -> tuple[float, float]:
    """The dB range of the level panel: 0 dBFS (or a little above loud material) down past the quiet parts."""
    values = [v for v in (card.cutoff, card.lufs) if v is not None and math.isfinite(v)]
    for series in (card.rms_db, card.loudness):
        finite = series[np.isfinite(series)]
        if finite.size:
            # The quietest few percent only decide the floor if they are more than a blip.
            values += [float(np.percentile(finite, 3)), float(finite.max())]
    peak = card.peak_db[np.isfinite(card.peak_db)]
    high = max([0.0, *(values + ([float(peak.max())] if peak.size else []))])
    high = math.ceil(high / 5) * 5
    low = math.floor((min(values, default=-60.0) - 6) / 10) * 10
    low = min(max(low, _LEVEL_FLOOR), high - 30)
    return float(low), float(high)


def gaps(values: np.ndarray, low: float) -> np.ndarray:
    """``values`` as float64 with NaN where they are silent or below ``low``: lines break there."""
    out = np.asarray(values, dtype=np.float64).copy()
    out[~np.isfinite(out) | (out < low)] = np.nan
    return out


def spectrum_limits(spectrogram: Any) -> tuple[float, float]:
    top = float(spectrogram.db.max()) if spectrogram.db.size else 0.0
    top = math.ceil(max(top, -120.0) / 10) * 10
    return top - _SPECTRUM_RANGE, top


def ramp_rgb(db: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(..., 3)`` uint8 colours of ``db`` values on the card's colour ramp."""
    t = np.clip((np.asarray(db, dtype=np.float64) - low) / max(high - low, 1e-9), 0.0, 1.0)
    position = t * (len(_RAMP) - 1)
    index = np.minimum(position.astype(np.int64), len(_RAMP) - 2)
    frac = (position - index)[..., None]
    rgb = _RAMP[index] * (1 - frac) + _RAMP[index + 1] * frac
    return np.round(rgb * 255).astype(np.uint8)


def _time_edges(spectrogram: Any, start: float, end: float) -> np.ndarray:
    half = spectrogram.hop_seconds / 2
    edges = np.concatenate([spectrogram.times - half, [spectrogram.times[-1] + half]]) + start
    # The first and last frames cover the excerpt's ends (their windows reach them).
    edges[0], edges[-1] = start, max(end, edges[-2] + 1e-6)
    return np.clip(edges, start, max(end, start + 1e-6))


def _hz_label(hz: float) -> str:
    return f"{hz / 1000:g}k" if hz >= 1000 else f"{hz:g}"


def frequency_ticks(low_hz: float, high_hz: float) -> list[float]:
    """1-2-5 ticks per decade within ``[low_hz, high_hz]``, thinned to at most 6."""
    ticks = [m * 10**k for k in range(1, 6) for m in (1, 2, 5) if low_hz <= m * 10**k <= high_hz]
    while len(ticks) > 6:
        ticks = ticks[::2]
    return ticks


def legend_entries(card: Card) -> list[tuple[str, str, str]]:
    """``(kind, colour, text)`` of each legend entry, in order."""
    entries = [("fill", COLOURS["peak"], "peak dBFS"), ("fill", COLOURS["rms"], "RMS dBFS")]
    if card.loudness.size:
        entries.append(("line", COLOURS["loudness"], f"loudness {card.loud_window:g} s"))
    excerpt = "excerpt" if card.lufs is None else f"excerpt {card.lufs:.1f} LUFS"
    entries.append(("span", COLOURS["excerpt"], excerpt))
    if card.cutoff is not None:
        entries.append(("dash", COLOURS["cutoff"], f"cutoff {card.cutoff:g}"))
    return entries


# ---------------------------------------------------------------- PNG (matplotlib)
def _fraction_box(left: float, top: float, right: float, bottom: float) -> tuple[float, float, float, float]:
    return (left / WIDTH, 1 - bottom / HEIGHT, (right - left) / WIDTH, (bottom - top) / HEIGHT)


def draw_png(path: str | Path, card: Card) -> None:
    """Draws ``card`` into a ``WIDTH`` x ``HEIGHT`` PNG at ``path``."""
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import ConnectionPatch, Patch

    fig = new_figure(WIDTH, HEIGHT)
    t0, t1 = card.view[0], max(card.view[1], card.view[0] + 1e-3)
    low, high = level_limits(card)
    ax = fig.add_axes(_fraction_box(_LEFT, _LEVEL_TOP, _RIGHT, _LEVEL_BOTTOM))
    peak, rms = gaps(card.peak_db, low), gaps(card.rms_db, low)
    ax.fill_between(card.env_t, low, peak, where=np.isfinite(peak), color=COLOURS["peak"], linewidth=0, step="mid")
    ax.fill_between(card.env_t, low, rms, where=np.isfinite(rms), color=COLOURS["rms"], linewidth=0, step="mid")
    s0, s1 = card.span
    ax.axvspan(s0, s1, color=COLOURS["excerpt"], alpha=0.18, linewidth=0)
    if card.loudness.size:
        ax.plot(card.loud_t, gaps(card.loudness, low), color=COLOURS["loudness"], linewidth=1.4)
    if card.lufs is not None and low <= card.lufs <= high:
        ax.plot([s0, s1], [card.lufs, card.lufs], color=COLOURS["excerpt"], linewidth=3, solid_capstyle="butt")
    if card.cutoff is not None:
        ax.axhline(card.cutoff, color=COLOURS["cutoff"], linestyle="--", linewidth=1.1)
    ax.set_xlim(t0, t1)
    ax.set_ylim(low, high)
    ax.set_ylabel("dBFS", fontsize=READABLE_PT, labelpad=2)
    ax.tick_params(labelsize=READABLE_PT, pad=2)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    right = ax.twinx()  # the same dB scale, read as LUFS
    right.set_ylim(low, high)
    right.set_ylabel("LUFS", fontsize=READABLE_PT, labelpad=2, color=COLOURS["loudness"])
    right.tick_params(labelsize=READABLE_PT, pad=2, colors=COLOURS["loudness"])

    handles, labels = [], []
    for kind, colour, text in legend_entries(card):
        if kind == "fill":
            handles.append(Patch(color=colour, linewidth=0))
        elif kind == "span":
            handles.append(Patch(facecolor=colour, alpha=0.35, edgecolor=colour))
        else:
            handles.append(Line2D([], [], color=colour, linewidth=1.5, linestyle="--" if kind == "dash" else "-"))
        labels.append(text)
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(_LEFT / WIDTH - 0.01, 1 - 20 / HEIGHT),
               ncol=len(handles), fontsize=READABLE_PT, frameon=False, handlelength=1.4, handletextpad=0.4,
               columnspacing=1.0, borderaxespad=0)
    if card.title:
        fig.text(_LEFT / WIDTH - 0.01, 1 - 4 / HEIGHT, card.title, ha="left", va="top", fontsize=READABLE_PT,
                 color="#222")

    spec = card.spectrogram
    sx = fig.add_axes(_fraction_box(_LEFT, _SPEC_TOP, _RIGHT, _SPEC_BOTTOM))
    vmin, vmax = spectrum_limits(spec)
    cmap = ListedColormap(ramp_rgb(np.linspace(0, 1, 256), 0, 1) / 255.0)
    mesh = sx.pcolormesh(_time_edges(spec, s0, s1), spec.edges_hz, spec.db, cmap=cmap, vmin=vmin, vmax=vmax,
                         shading="flat", rasterized=True)
    sx.set_yscale("log")
    sx.set_ylim(spec.edges_hz[0], spec.edges_hz[-1])
    sx.set_xlim(s0, max(s1, s0 + 1e-6))
    ticks = frequency_ticks(spec.edges_hz[0], spec.edges_hz[-1])
    sx.set_yticks(ticks, [_hz_label(t) for t in ticks])
    sx.minorticks_off()
    sx.set_ylabel("Hz", fontsize=READABLE_PT, labelpad=2)
    sx.set_xlabel("seconds in the file", fontsize=READABLE_PT, labelpad=1)
    sx.tick_params(labelsize=READABLE_PT, pad=2)
    bar = fig.add_axes(_fraction_box(_RIGHT + 8, _SPEC_TOP, _RIGHT + 16, _SPEC_BOTTOM))
    colorbar = fig.colorbar(mesh, cax=bar)
    colorbar.set_ticks([vmin, (vmin + vmax) / 2, vmax])
    colorbar.ax.tick_params(labelsize=READABLE_PT - 1, pad=1, length=2)
    colorbar.ax.set_xlabel("dB", fontsize=READABLE_PT - 1, labelpad=2)
    # Two thin lines from the span down to the spectrogram: this is the part it shows.
    for x_top, x_bottom in ((s0, s0), (s1, max(s1, s0 + 1e-6))):
        fig.add_artist(ConnectionPatch(xyA=(x_top, low), coordsA=ax.transData, xyB=(x_bottom, spec.edges_hz[-1]),
                                       coordsB=sx.transData, color=COLOURS["excerpt"], linewidth=0.8, alpha=0.7))
    save_png(fig, path)


# ---------------------------------------------------------------- SVG (NumPy only)
def png_bytes(rgb: np.ndarray) -> bytes:
    """A minimal RGB PNG of ``(height, width, 3)`` uint8 pixels (for the spectrogram inside an SVG)."""
    height, width, _ = rgb.shape
    rows = b"".join(b"\x00" + np.ascontiguousarray(rgb[y]).tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` index ranges where ``mask`` is True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def _points(xs: np.ndarray, ys: np.ndarray) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))


def _ticks(t0: float, t1: float, target: int = 6) -> list[float]:
    """Round tick positions (steps of 1, 2 or 5 x 10^k) covering [t0, t1]."""
    span = max(t1 - t0, 1e-9)
    raw = span / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(t0 / step) * step
    return [round(first + i * step, 10) for i in range(int((t1 - first) / step + 1e-9) + 1)]


def draw_svg(path: str | Path, card: Card) -> None:
    """Draws ``card`` as a ``WIDTH`` x ``HEIGHT`` SVG at ``path`` (no matplotlib needed)."""
    t0, t1 = card.view[0], max(card.view[1], card.view[0] + 1e-3)
    low, high = level_limits(card)
    left, right = float(_LEFT), float(_RIGHT)

    def x_of(t: Any) -> Any:
        return left + (np.asarray(t, dtype=np.float64) - t0) / (t1 - t0) * (right - left)

    def y_of(db: Any) -> Any:
        return _LEVEL_BOTTOM - (np.asarray(db, dtype=np.float64) - low) / (high - low) * (_LEVEL_BOTTOM - _LEVEL_TOP)

    font = f"{READABLE_PT * 100 / 72:.1f}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'font-family="sans-serif" font-size="{font}">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left - 6}" y="14">{html.escape(card.title)}</text>',
    ]
    # Legend row.
    x = left - 6
    for kind, colour, text in legend_entries(card):
        if kind in ("fill", "span"):
            opacity = ' fill-opacity="0.35"' if kind == "span" else ""
            out.append(f'<rect x="{x:.1f}" y="25" width="14" height="9" fill="{colour}"{opacity}/>')
        else:
            dash = ' stroke-dasharray="4 2"' if kind == "dash" else ""
            out.append(f'<line x1="{x:.1f}" x2="{x + 14:.1f}" y1="30" y2="30" stroke="{colour}" stroke-width="1.5"{dash}/>')
        out.append(f'<text x="{x + 18:.1f}" y="34">{html.escape(text)}</text>')
        x += 30 + 7.2 * len(text)
    # Level panel: fills and the loudness line break at silence.
    for series, colour in ((card.peak_db, COLOURS["peak"]), (card.rms_db, COLOURS["rms"])):
        values = gaps(series, low)
        for a, b in _runs(np.isfinite(values)):
            xs = x_of(card.env_t[a:b])
            ys = y_of(values[a:b])
            outline = _points(np.concatenate([xs, xs[::-1]]), np.concatenate([ys, np.full(b - a, _LEVEL_BOTTOM)]))
            out.append(f'<polygon points="{outline}" fill="{colour}"/>')
    s0, s1 = card.span
    xa, xb = float(x_of(max(s0, t0))), float(x_of(min(s1, t1)))
    out.append(f'<rect x="{xa:.1f}" y="{_LEVEL_TOP}" width="{max(xb - xa, 1):.1f}" '
               f'height="{_LEVEL_BOTTOM - _LEVEL_TOP}" fill="{COLOURS["excerpt"]}" fill-opacity="0.18"/>')
    loud = gaps(card.loudness, low)
    for a, b in _runs(np.isfinite(loud)):
        out.append(f'<polyline points="{_points(x_of(card.loud_t[a:b]), y_of(loud[a:b]))}" fill="none" '
                   f'stroke="{COLOURS["loudness"]}" stroke-width="1.4"/>')
    if card.lufs is not None and low <= card.lufs <= high:
        y = float(y_of(card.lufs))
        out.append(f'<line x1="{xa:.1f}" x2="{xb:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{COLOURS["excerpt"]}" '
                   'stroke-width="3"/>')
    if card.cutoff is not None and low <= card.cutoff <= high:
        y = float(y_of(card.cutoff))
        out.append(f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{COLOURS["cutoff"]}" '
                   'stroke-dasharray="4 3"/>')
    out.append(f'<rect x="{left}" y="{_LEVEL_TOP}" width="{right - left}" height="{_LEVEL_BOTTOM - _LEVEL_TOP}" '
               'fill="none" stroke="#555"/>')
    for value in _ticks(low, high, 5):
        y = float(y_of(value))
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
        out.append(f'<text x="{right + 4}" y="{y + 4:.1f}" fill="{COLOURS["loudness"]}">{value:g}</text>')
    out.append(f'<text x="14" y="{(_LEVEL_TOP + _LEVEL_BOTTOM) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(_LEVEL_TOP + _LEVEL_BOTTOM) / 2:.0f})">dBFS</text>')
    out.append(f'<text x="{WIDTH - 16}" y="{(_LEVEL_TOP + _LEVEL_BOTTOM) / 2:.0f}" text-anchor="middle" '
               f'fill="{COLOURS["loudness"]}" transform="rotate(90 {WIDTH - 16} {(_LEVEL_TOP + _LEVEL_BOTTOM) / 2:.0f})">'
               'LUFS</text>')
    for tick in _ticks(t0, t1):
        out.append(f'<text x="{float(x_of(tick)):.1f}" y="{_LEVEL_BOTTOM + 13}" text-anchor="middle">{tick:g}</text>')
    # Spectrogram panel: the excerpt's mel bands as an embedded PNG, one pixel row per
    # row of the panel so that the bands sit on the same log-frequency axis as the ticks.
    spec = card.spectrogram
    vmin, vmax = spectrum_limits(spec)
    height = _SPEC_BOTTOM - _SPEC_TOP
    log_lo, log_hi = math.log(spec.edges_hz[0]), math.log(spec.edges_hz[-1])
    row_hz = np.exp(log_hi - (np.arange(height) + 0.5) / height * (log_hi - log_lo))  # top row first
    band = np.clip(np.searchsorted(spec.edges_hz, row_hz) - 1, 0, spec.db.shape[0] - 1)
    pixels = ramp_rgb(spec.db[band], vmin, vmax)
    data = base64.b64encode(png_bytes(pixels)).decode("ascii")
    out.append(f'<image x="{left}" y="{_SPEC_TOP}" width="{right - left}" height="{height}" preserveAspectRatio="none" '
               f'style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>')
    out.append(f'<rect x="{left}" y="{_SPEC_TOP}" width="{right - left}" height="{height}" fill="none" stroke="#555"/>')
    for hz in frequency_ticks(spec.edges_hz[0], spec.edges_hz[-1]):
        y = _SPEC_BOTTOM - (math.log(hz) - log_lo) / (log_hi - log_lo) * height
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_hz_label(hz)}</text>')
    middle = (_SPEC_TOP + _SPEC_BOTTOM) / 2
    out.append(f'<text x="14" y="{middle:.0f}" text-anchor="middle" transform="rotate(-90 14 {middle:.0f})">Hz</text>')
    for line_x, line_b in ((xa, left), (xb, right)):
        out.append(f'<line x1="{line_x:.1f}" y1="{_LEVEL_BOTTOM}" x2="{line_b:.1f}" y2="{_SPEC_TOP}" '
                   f'stroke="{COLOURS["excerpt"]}" stroke-opacity="0.7"/>')
    span = max(s1 - s0, 1e-6)
    for tick in _ticks(s0, s0 + span, 5):
        tx = left + (tick - s0) / span * (right - left)
        out.append(f'<text x="{tx:.1f}" y="{_SPEC_BOTTOM + 13}" text-anchor="middle">{tick:g}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{_SPEC_BOTTOM + 28}" text-anchor="middle">seconds in the file</text>')
    out.append(f'<text x="{right + 6}" y="{_SPEC_TOP + 10}">{vmax:g} dB</text>')
    out.append(f'<text x="{right + 6}" y="{_SPEC_BOTTOM}">{vmin:g} dB</text>')
    out.append("</svg>")
    Path(path).write_text("\n".join(out), encoding="utf-8")
