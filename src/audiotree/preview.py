"""A static HTML page to listen to and look at the excerpts a pipeline produces.

:func:`render_preview` takes excerpts from a dataset (or any iterable of
``AudioTree`` items or batches) and writes, into one folder:

* ``index.html``: the excerpts grouped by source, each with an
  ``<audio controls>`` player and a plot; no external resources, so it works
  from disk, from ``python -m http.server`` or as a CI artifact;
* ``<group>/NNN.wav``: the excerpt exactly as the pipeline returned it
  (16-bit PCM, at the pipeline's sample rate), referenced by a relative URL;
* ``<group>/NNN.png``: the whole source file's waveform envelope and its
  short-term loudness curve (3 s windows every 0.1 s; momentary 0.4 s
  windows when less than 15 s is plotted), the excerpt's span highlighted and the ``lufs_cutoff`` line.
  Drawn with matplotlib's Agg backend when matplotlib is installed
  (``pip install 'audiotree[plot]'``); without it the same plot is written as
  a hand-made SVG (``image_format="svg"`` forces that);
* ``manifest.json``: one record per excerpt (machine-readable, stable keys).

The page carries a small script that, once every player has fired
``loadedmetadata`` (or ``error``), writes the count and durations into
``<pre id="media-status">`` as JSON, so a headless browser can check that every
player really loads.

Files longer than ``context_seconds`` are plotted over a window of that length
around the excerpt instead of whole, so a preview of hour-long files stays cheap.
When an item's source file cannot be read (e.g. items of a pre-rendered
dataset whose originals moved), its plot shows the excerpt alone.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

__all__ = ["render_preview", "PreviewResult"]

_MANIFEST = "manifest.json"
_ENVELOPE_BINS = 640
_MAX_SCANNED_PER_EXCERPT = 50
_LOUDNESS_FLOOR = -70.0
_WIDTH, _HEIGHT = 640, 200
_SHORT_TERM_MIN_VIEW = 15.0  # seconds of plotted audio below which the curve uses 0.4 s windows


@dataclasses.dataclass(frozen=True)
class PreviewResult:
    """What :func:`render_preview` wrote."""

    index: Path  # the index.html
    excerpts: list[dict]  # one manifest record per excerpt, in page order
    image_format: str  # "png" or "svg"

    @property
    def directory(self) -> Path:
        return self.index.parent

    def __len__(self) -> int:
        return len(self.excerpts)


# ---------------------------------------------------------------- collecting items
def _split_batch(tree: Any) -> Iterator[Any]:
    if tree is None:
        return
    if getattr(tree, "batch_size", 1) == 1:
        yield tree
    else:
        yield from tree


def _take(items: Any, n: int) -> list[Any]:
    """The first ``n`` excerpts (batch-of-1 trees) of a MapDataset or an iterable."""
    out: list[Any] = []
    if n <= 0:
        return out
    if hasattr(items, "__getitem__") and hasattr(items, "__len__") and hasattr(items, "to_iter_dataset"):
        # Dropped items read as None; an endless dataset of nothing but dropped items must still end.
        length = min(len(items), _MAX_SCANNED_PER_EXCERPT * n + 100)
        index = 0
        while len(out) < n and index < length:
            for tree in _split_batch(items[index]):  # None (a dropped item) yields nothing
                out.append(tree)
            index += 1
        return out[:n]
    for element in items:
        out.extend(_split_batch(element))
        if len(out) >= n:
            break
    return out[:n]


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "audio"
    return cleaned[:64]


def _first(values: Any) -> Any:
    if values is None:
        return None
    if isinstance(values, (list, tuple)):
        return values[0] if values else None
    arr = np.asarray(values).reshape(-1)
    return arr[0].item() if arr.size else None


# ---------------------------------------------------------------- the curves of one file
@dataclasses.dataclass
class _Curves:
    view_start: float
    view_end: float
    file_duration: float
    env_t: np.ndarray
    env_lo: np.ndarray
    env_hi: np.ndarray
    loud_t: np.ndarray
    loud: np.ndarray
    loud_window: float


def _curves(frames: np.ndarray, rate: int, view_start: float, file_duration: float) -> _Curves:
    """Envelope and loudness curve of native frames ``(n, C)`` that start at ``view_start`` seconds."""
    from audiotree.dsp.loudness import k_weighted_power, windowed_from_power

    n = frames.shape[0]
    mono = frames.mean(axis=1, dtype=np.float32) if frames.shape[1] > 1 else frames[:, 0]
    bins = max(1, min(_ENVELOPE_BINS, n))
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    lo = np.zeros(bins, np.float32)
    hi = np.zeros(bins, np.float32)
    for b in range(bins):
        chunk = mono[edges[b] : max(edges[b + 1], edges[b] + 1)]
        if chunk.size:
            lo[b], hi[b] = chunk.min(), chunk.max()
    env_t = view_start + (edges[:-1] + edges[1:]) / 2 / rate
    # Short-term (3 s) loudness where there is room for it; momentary (0.4 s) on short views.
    window = 3.0 if n >= _SHORT_TERM_MIN_VIEW * rate else 0.4
    if n >= int(round(window * rate)):
        power = k_weighted_power(np.ascontiguousarray(frames[:, :5].T), rate)
        loud = windowed_from_power(power, rate, window_sec=window, hop_sec=0.1)
        loud_t = view_start + window / 2 + 0.1 * np.arange(loud.shape[-1])
    else:
        loud, loud_t = np.zeros(0), np.zeros(0)
    loud = np.where(np.isfinite(loud), np.maximum(loud, _LOUDNESS_FLOOR), _LOUDNESS_FLOOR)
    view_end = view_start + n / rate
    return _Curves(view_start, view_end, file_duration, env_t, lo, hi, loud_t, loud, window)


def _file_curves(path: str, offset: float, duration: float, context_seconds: float) -> _Curves | None:
    """Curves of the source file around the excerpt; None when the file cannot be read (moved, deleted)."""
    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile

    if not path or not os.path.isfile(path):
        return None
    try:
        with AudioFile(path) as f:
            info = f.info
            rate = info.sample_rate
            total = info.duration
            if total <= context_seconds:
                view_start = 0.0
            else:
                centre = offset + duration / 2
                view_start = min(max(centre - context_seconds / 2, 0.0), total - context_seconds)
            first = int(round(view_start * rate))
            frames = f.read(first, max(int(round(min(context_seconds, total) * rate)), 1))
    except AudioReadError:
        return None
    if frames.shape[0] == 0:
        return None
    return _curves(frames, rate, view_start, total)


def _loudness_limits(curves: _Curves, cutoff: float | None, lufs: float | None) -> tuple[float, float]:
    values = [v for v in (cutoff, lufs) if v is not None and math.isfinite(v)]
    if curves.loud.size:
        values += [float(curves.loud.min()), float(curves.loud.max())]
    low = min(values, default=-60.0)
    high = max(values, default=0.0)
    low = max(_LOUDNESS_FLOOR, math.floor((low - 3) / 10) * 10)
    high = min(10.0, math.ceil((high + 3) / 10) * 10)
    if high - low < 20:
        low = high - 20
    return low, high


# ---------------------------------------------------------------- drawing
def _draw_png(path: Path, curves: _Curves, span: tuple[float, float], cutoff: float | None, lufs: float | None,
              title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_WIDTH / 100, _HEIGHT / 100), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.07, 0.2, 0.84, 0.68))
    ax.fill_between(curves.env_t, curves.env_lo, curves.env_hi, color="#9aa5b1", linewidth=0, step="mid")
    ax.set_xlim(curves.view_start, max(curves.view_end, curves.view_start + 1e-3))
    peak = float(max(np.abs(curves.env_lo).max(initial=0), np.abs(curves.env_hi).max(initial=0), 1e-3))
    ax.set_ylim(-peak * 1.05, peak * 1.05)
    ax.set_yticks([])
    ax.set_xlabel("seconds", fontsize=8, labelpad=1)
    ax.tick_params(labelsize=7)
    ax.axvspan(span[0], span[1], color="#2f80ed", alpha=0.22, linewidth=0)
    loud_ax = ax.twinx()
    if curves.loud.size:
        loud_ax.plot(curves.loud_t, curves.loud, color="#e8710a", linewidth=1.2,
                     label=f"loudness ({curves.loud_window:g} s)")
    if cutoff is not None:
        loud_ax.axhline(cutoff, color="#c0392b", linestyle="--", linewidth=1, label=f"cutoff {cutoff:g} LUFS")
    loud_ax.set_ylim(*_loudness_limits(curves, cutoff, lufs))
    loud_ax.set_ylabel("LUFS", fontsize=8, labelpad=1)
    loud_ax.tick_params(labelsize=7)
    if curves.loud.size or cutoff is not None:
        loud_ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=6, frameon=False,
                       borderaxespad=0.2)
    ax.set_title(title, fontsize=8, loc="left")
    fig.savefig(path, format="png")


def _svg_points(xs: Iterable[float], ys: Iterable[float]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))


def _nice_ticks(t0: float, t1: float, target: int = 6) -> list[float]:
    """Round tick positions (steps of 1, 2 or 5 x 10^k) covering [t0, t1]."""
    span = max(t1 - t0, 1e-9)
    raw = span / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(t0 / step) * step
    return [round(first + i * step, 10) for i in range(int((t1 - first) / step + 1e-9) + 1)]


def _draw_svg(path: Path, curves: _Curves, span: tuple[float, float], cutoff: float | None, lufs: float | None,
              title: str) -> None:
    left, right, top, bottom = 40.0, _WIDTH - 48.0, 22.0, _HEIGHT - 30.0
    t0, t1 = curves.view_start, max(curves.view_end, curves.view_start + 1e-3)

    def x_of(t: Any) -> Any:
        return left + (np.asarray(t, dtype=np.float64) - t0) / (t1 - t0) * (right - left)

    peak = float(max(np.abs(curves.env_lo).max(initial=0), np.abs(curves.env_hi).max(initial=0), 1e-3)) * 1.05
    mid = (top + bottom) / 2

    def y_of_amp(a: Any) -> Any:
        return mid - np.asarray(a, dtype=np.float64) / peak * (bottom - top) / 2

    low, high = _loudness_limits(curves, cutoff, lufs)

    def y_of_lufs(v: Any) -> Any:
        return bottom - (np.asarray(v, dtype=np.float64) - low) / (high - low) * (bottom - top)

    xs = x_of(curves.env_t)
    outline = _svg_points(np.concatenate([xs, xs[::-1]]), np.concatenate([y_of_amp(curves.env_hi), y_of_amp(curves.env_lo)[::-1]]))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        'font-family="sans-serif" font-size="10">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="14">{html.escape(title)}</text>',
        f'<polygon points="{outline}" fill="#9aa5b1"/>',
    ]
    s0, s1 = (float(x_of(max(span[0], t0))), float(x_of(min(span[1], t1))))
    parts.append(f'<rect x="{s0:.1f}" y="{top}" width="{max(s1 - s0, 1):.1f}" height="{bottom - top}" fill="#2f80ed" fill-opacity="0.22"/>')
    if curves.loud.size:
        parts.append(f'<polyline points="{_svg_points(x_of(curves.loud_t), y_of_lufs(curves.loud))}" fill="none" '
                     'stroke="#e8710a" stroke-width="1.2"/>')
    if cutoff is not None:
        yc = float(y_of_lufs(cutoff))
        parts.append(f'<line x1="{left}" x2="{right}" y1="{yc:.1f}" y2="{yc:.1f}" stroke="#c0392b" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{right - 4}" y="{yc - 3:.1f}" text-anchor="end" fill="#c0392b">cutoff {cutoff:g} LUFS</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#555"/>')
    for value in (low, (low + high) / 2, high):
        parts.append(f'<text x="{right + 4}" y="{float(y_of_lufs(value)) + 3:.1f}">{value:g}</text>')
    parts.append(f'<text x="{right + 4}" y="{top - 6}">LUFS</text>')
    for tick in _nice_ticks(t0, t1):
        parts.append(f'<text x="{float(x_of(tick)):.1f}" y="{bottom + 13}" text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{(left + right) / 2}" y="{bottom + 26}" text-anchor="middle">seconds</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts), encoding="utf-8")


def _resolve_image_format(image_format: str) -> str:
    if image_format not in ("auto", "png", "svg"):
        raise ValueError(f"image_format must be 'auto', 'png' or 'svg', got {image_format!r}.")
    if image_format != "auto":
        if image_format == "png":
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise RuntimeError("PNG plots need matplotlib: pip install 'audiotree[plot]'.") from None
        return image_format
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "svg"
    return "png"


# ---------------------------------------------------------------- the page
_STATUS_SCRIPT = """
(function () {
  var players = Array.prototype.slice.call(document.querySelectorAll("audio"));
  var status = document.getElementById("media-status");
  var state = players.map(function () { return null; });
  function report() {
    var loaded = 0, errors = 0;
    var durations = players.map(function (p, i) {
      if (state[i] === "ok") { loaded++; return Math.round(p.duration * 1000) / 1000; }
      if (state[i] === "error") { errors++; }
      return null;
    });
    status.textContent = JSON.stringify({players: players.length, loaded: loaded, errors: errors, durations: durations});
    if (loaded + errors === players.length) { status.setAttribute("data-complete", "true"); }
  }
  players.forEach(function (p, i) {
    function ok() { if (state[i] === null) { state[i] = "ok"; report(); } }
    function bad() { if (state[i] === null) { state[i] = "error"; report(); } }
    p.addEventListener("loadedmetadata", ok);
    p.addEventListener("error", bad);
    if (p.readyState >= 1) { ok(); }
    if (p.error) { bad(); }
  });
  report();
})();
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; background: #fafafa; }
h1 { font-size: 1.3rem; margin-bottom: 0.2rem; }
p.meta { color: #555; margin-top: 0; }
h2 { font-size: 1.1rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
.grid { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; background: white; border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem; width: 640px; }
figure img { width: 640px; height: 200px; display: block; }
figure audio { width: 100%; margin-top: 0.3rem; }
figcaption { font-size: 0.8rem; color: #444; word-break: break-all; }
#media-status { font-size: 0.75rem; color: #666; white-space: pre-wrap; }
"""


def _page(title: str, subtitle: str, groups: dict[str, list[dict]]) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(subtitle)}</p>',
    ]
    for group, records in groups.items():
        out.append(f'<section data-source="{html.escape(group, quote=True)}"><h2>{html.escape(group)} '
                   f"<small>({len(records)} excerpt{'s' if len(records) != 1 else ''})</small></h2><div class=\"grid\">")
        for r in records:
            wav = urllib.parse.quote(r["wav"])
            image = urllib.parse.quote(r["image"])
            lufs = "" if r["lufs"] is None else f" &middot; {r['lufs']:.1f} LUFS"
            out.append(
                f'<figure id="excerpt-{r["index"]}">'
                f'<img src="{image}" alt="waveform and loudness of {html.escape(os.path.basename(r["filepath"] or ""), quote=True)}" '
                f'loading="lazy">'
                f'<audio controls preload="metadata" src="{wav}"></audio>'
                f'<figcaption title="{html.escape(r["filepath"] or "", quote=True)}">'
                f'#{r["index"]} {html.escape(os.path.basename(r["filepath"] or "?"))} &middot; '
                f'{r["offset"]:.2f}&ndash;{r["offset"] + r["duration"]:.2f} s'
                f'{"" if r["file_duration"] is None else " of %.2f s" % r["file_duration"]}'
                f'{lufs} &middot; {r["sample_rate"]} Hz, {r["channels"]} ch</figcaption></figure>'
            )
        out.append("</div></section>")
    out.append('<h2>Players loaded</h2><pre id="media-status">waiting for the players</pre>')
    out.append(f"<script>{_STATUS_SCRIPT}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _remove_previous(out_dir: Path) -> None:
    """Deletes the files a previous preview in ``out_dir`` listed in its manifest."""
    manifest = out_dir / _MANIFEST
    try:
        previous = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for record in previous.get("excerpts", []) if isinstance(previous, dict) else []:
        for key in ("wav", "image"):
            name = record.get(key) if isinstance(record, dict) else None
            if not isinstance(name, str) or os.path.isabs(name) or ".." in Path(name).parts:
                continue
            try:
                (out_dir / name).unlink()
            except OSError:
                pass


def render_preview(
    items: Any,
    out_dir: str | os.PathLike,
    *,
    n: int = 12,
    lufs_cutoff: float | None = None,
    title: str = "audiotree preview",
    subtitle: str | None = None,
    image_format: str = "auto",
    context_seconds: float = 120.0,
) -> PreviewResult:
    """Writes a static preview of ``n`` excerpts to ``out_dir`` (see the module docstring).

    Args:
      items: a dataset from :mod:`audiotree.sources` (items ``0, 1, ...`` are
        read by random access; dropped ``None`` items are passed over), or any
        iterable of ``AudioTree`` items or batches (e.g. an ``IterDataset``).
      out_dir: the folder to write (created). Files of an earlier preview in it
        are replaced.
      n: how many excerpts.
      lufs_cutoff: draw this loudness threshold on every plot (``None``: no line).
      title, subtitle: page heading and a line under it.
      image_format: ``"auto"`` (PNG with matplotlib, else SVG), ``"png"`` or ``"svg"``.
      context_seconds: longest stretch of a source file to plot around its excerpt.

    Returns:
      A :class:`PreviewResult` with the index path and one record per excerpt.
    """
    import soundfile

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}.")
    if not (isinstance(context_seconds, (int, float)) and context_seconds > 0):
        raise ValueError(f"context_seconds must be > 0, got {context_seconds!r}.")
    fmt = _resolve_image_format(image_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trees = _take(items, n)
    if not trees:
        raise RuntimeError("The dataset produced no excerpts to preview.")
    _remove_previous(out)

    groups: dict[str, list[dict]] = {}
    folders: dict[str, str] = {}
    counters: dict[str, int] = {}
    for index, tree in enumerate(trees):
        filepath = _first(tree.filepath) or ""
        source = _first(tree.source) or os.path.basename(os.path.dirname(filepath)) or "audio"
        offset = float(_first(tree.offset) or 0.0)
        waveform = np.asarray(tree.waveform, dtype=np.float32)[0]
        rate = int(tree.sample_rate)
        duration = waveform.shape[-1] / rate
        lufs = None if tree.lufs is None else float(np.asarray(tree.lufs).reshape(-1)[0])
        if lufs is not None and not math.isfinite(lufs):
            lufs = None
        if source not in folders:
            folder = _safe_name(source)
            if folder in folders.values():  # two names that clean up to the same folder
                folder = f"{folder}_{len(folders)}"
            folders[source] = folder
        folder = folders[source]
        (out / folder).mkdir(exist_ok=True)
        k = counters.get(source, 0)
        counters[source] = k + 1
        wav_name = f"{folder}/{k:03d}.wav"
        image_name = f"{folder}/{k:03d}.{fmt}"
        soundfile.write(out / wav_name, np.clip(waveform.T, -1.0, 1.0), rate, subtype="PCM_16")
        curves = _file_curves(filepath, offset, duration, float(context_seconds))
        if curves is None:  # the source file is gone: plot the excerpt alone
            curves = _curves(np.ascontiguousarray(waveform.T), rate, offset, math.nan)
        caption = f"{os.path.basename(filepath)}  [{offset:.2f}, {offset + duration:.2f}] s"
        if lufs is not None:
            caption += f"  {lufs:.1f} LUFS"
        method = _excerpt_method(tree)
        if method is not None:  # how loudest chose it: from the corpus index or by search
            caption += f"  ({method})"
        draw = _draw_png if fmt == "png" else _draw_svg
        draw(out / image_name, curves, (offset, offset + duration), lufs_cutoff, lufs, caption)
        groups.setdefault(source, []).append({
            "index": index, "source": source, "filepath": filepath, "offset": round(offset, 6),
            "duration": round(duration, 6), "file_duration": round(curves.file_duration, 6) if math.isfinite(curves.file_duration) else None, "sample_rate": rate,
            "channels": int(waveform.shape[0]), "lufs": None if lufs is None else round(lufs, 3),
            "wav": wav_name, "image": image_name, "excerpt_method": method,
        })

    records = [r for group in groups.values() for r in group]
    if subtitle is None:
        subtitle = f"{len(records)} excerpts from {len(groups)} source{'s' if len(groups) != 1 else ''}"
        if lufs_cutoff is not None:
            subtitle += f"; loudness cutoff {lufs_cutoff:g} LUFS"
    index_path = out / "index.html"
    index_path.write_text(_page(title, subtitle, groups), encoding="utf-8")
    manifest = {"title": title, "image_format": fmt, "lufs_cutoff": lufs_cutoff, "excerpts": records}
    (out / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return PreviewResult(index=index_path, excerpts=records, image_format=fmt)


def _excerpt_method(tree: Any) -> str | None:
    """``"index"``/``"search"`` from ``extras["excerpt_method"]`` (``None`` when absent)."""
    code = (getattr(tree, "extras", None) or {}).get("excerpt_method")
    if code is None:
        return None
    from audiotree.excerpt_search import method_name

    return method_name(np.asarray(code).reshape(-1)[0])
