"""A static HTML page to listen to and look at the excerpts a pipeline produces.

:func:`render_preview` takes excerpts from a dataset (or any iterable of
``AudioTree`` items or batches) and writes, into one folder:

* ``index.html``: the excerpts in sections (by ``source`` unless ``group_by``
  names another column), each card with an ``<audio controls>`` player, its
  labels and a picture; no external resources and no server needed: it opens
  from disk (``file://``), from ``python -m http.server`` or as a CI artifact;
* ``<group>/NNN.wav``: the excerpt exactly as the pipeline returned it
  (16-bit PCM, at the pipeline's sample rate), referenced by a relative URL;
* ``<group>/NNN.png``: the card picture (see :mod:`audiotree.plots.card`): the
  source file's peak/RMS level in dBFS and loudness curve in LUFS (3 s windows
  every 0.1 s; momentary 0.4 s windows when less than 15 s is plotted), silent
  stretches left as gaps, the excerpt's span, its loudness and the cutoff line;
  and under it a mel spectrogram of the excerpt. Drawn with matplotlib's Agg backend
  (a dependency of audiotree), or, with ``image_format="svg"``, as SVG;
* ``manifest.json``: one record per excerpt (machine-readable, stable keys).

**Labels.** Each card lists the item's labels: the ``pitch``, ``velocity`` and
``note_duration`` fields and every per-item scalar or string in ``extras``
(nested dicts read as ``outer.inner``), e.g. the label columns a corpus index
carries into items. Integer ids are shown by name when ``vocabularies`` maps
them (``{"speaker": ["alice", "bob"]}``). ``group_by`` arranges the cards by any
of these columns, or by ``source``, ``folder`` (the file's parent folder) or
``format`` (its extension).

The page carries a small script that, once every player has fired
``loadedmetadata`` (or ``error``) and every picture has loaded (or failed),
writes the counts, the players' durations and each picture's decoded size into
``<pre id="media-status">`` as JSON, so a headless browser can check the page.

Files longer than ``context_seconds`` are plotted over a window of that length
around the excerpt instead of whole, so a preview of hour-long files stays cheap.
When an item's source file cannot be read (e.g. items of a pre-rendered
dataset whose originals moved), its level panel shows the excerpt alone.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import re
import stat
import urllib.parse
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from audiotree.validation import is_int, is_real

__all__ = ["render_preview", "PreviewResult", "item_labels", "BUILTIN_COLUMNS"]

_MANIFEST = "manifest.json"
_ENVELOPE_BINS = 640
_MAX_SCANNED_PER_EXCERPT = 50
_SHORT_TERM_MIN_VIEW = 15.0  # seconds of plotted audio below which the curve uses 0.4 s windows
_LABEL_FIELDS = ("pitch", "velocity", "note_duration")
#: Columns every item has, besides its labels: usable as ``group_by``.
BUILTIN_COLUMNS = ("source", "folder", "format")
_NO_VALUE = "(none)"


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


# ---------------------------------------------------------------- labels
def _scalar(value: Any) -> Any:
    """The item's value of one per-item leaf of a batch-of-1 tree, or None if it is not one value."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):  # one string (or number) per item
        return _scalar(value[0]) if len(value) == 1 and not isinstance(value[0], (list, tuple)) else None
    try:
        arr = np.asarray(value)
    except Exception:  # an object NumPy cannot hold: not a label we can show
        return None
    if arr.dtype.kind not in "biuf" or arr.size != 1:
        return None
    item = arr.reshape(-1)[0].item()
    if isinstance(item, float) and not math.isfinite(item):
        return None
    return item


def _flatten_extras(extras: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in extras.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten_extras(value, name + ".")
        else:
            yield name, value


def _named(name: str, value: Any, vocabularies: Mapping[str, Any]) -> Any:
    vocabulary = vocabularies.get(name)
    if vocabulary is None or isinstance(value, (str, float)) or isinstance(value, bool):
        return value
    try:
        return vocabulary[value]
    except (IndexError, KeyError, TypeError):
        return value  # an id outside the vocabulary is shown as the id


def item_labels(tree: Any, vocabularies: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The labels of a batch-of-1 ``AudioTree``: ``{column: value}``.

    Reads ``pitch``, ``velocity``, ``note_duration`` and every per-item scalar
    or string in ``extras`` (nested dicts as ``outer.inner``); arrays with more
    than one value per item (embeddings, codes) are not labels and are left out.
    ``vocabularies[column]`` (a sequence or a mapping) turns integer ids into names.

    >>> import numpy as np
    >>> from audiotree import AudioTree
    >>> tree = AudioTree.create(np.zeros((1, 1, 8), np.float32), 8000, pitch=[60.0],
    ...                         extras={"speaker": np.array([1]), "meta": {"lang": "fr"}})
    >>> item_labels(tree, {"speaker": ["alice", "bob"]})
    {'pitch': 60.0, 'speaker': 'bob', 'meta.lang': 'fr'}
    """
    vocabularies = vocabularies or {}
    out: dict[str, Any] = {}
    for name in _LABEL_FIELDS:
        value = _scalar(getattr(tree, name, None)) if getattr(tree, name, None) is not None else None
        if value is not None:
            out[name] = _named(name, value, vocabularies)
    for name, leaf in _flatten_extras(getattr(tree, "extras", None) or {}):
        value = _scalar(leaf)
        if value is not None:
            out[name] = _named(name, value, vocabularies)
    return out


def _column(record: dict, column: str) -> Any:
    if column == "source":
        return record["source"]
    if column == "folder":
        return os.path.basename(os.path.dirname(record["filepath"] or "")) or None
    if column == "format":
        return os.path.splitext(record["filepath"] or "")[1].lstrip(".").lower() or None
    return record["labels"].get(column)


def _group_key(value: Any) -> tuple:
    """Sort key: numbers in numeric order, then strings, then items without the column."""
    if value is None:
        return (2, "")
    if is_real(value):
        return (0, float(value), "")
    return (1, str(value))


def _format_value(value: Any) -> str:
    if value is None:
        return _NO_VALUE
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------- the curves of one file
def _db(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(values)


def _card(frames: np.ndarray, rate: int, view_start: float, span: tuple[float, float], spectrogram: Any,
          cutoff: float | None, lufs: float | None, title: str):
    """The card of native frames ``(n, C)`` that start at ``view_start`` seconds."""
    from audiotree.dsp.edits import downmix
    from audiotree.dsp.loudness import k_weighted_power, windowed_from_power
    from audiotree.plots.card import Card

    n = frames.shape[0]
    mono = downmix(frames, axis=1)[:, 0]
    bins = max(1, min(_ENVELOPE_BINS, n))
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    peak = np.zeros(bins, np.float64)
    mean_square = np.zeros(bins, np.float64)
    square = mono.astype(np.float64) ** 2
    for b in range(bins):
        chunk = slice(edges[b], max(edges[b + 1], edges[b] + 1))
        if square[chunk].size:
            peak[b] = square[chunk].max()
            mean_square[b] = square[chunk].mean()
    env_t = view_start + (edges[:-1] + edges[1:]) / 2 / rate
    # Short-term (3 s) loudness where there is room for it; momentary (0.4 s) on short views.
    window = 3.0 if n >= _SHORT_TERM_MIN_VIEW * rate else 0.4
    if n >= int(round(window * rate)):
        power = k_weighted_power(np.ascontiguousarray(frames[:, :5].T), rate)
        loud = np.asarray(windowed_from_power(power, rate, window_sec=window, hop_sec=0.1), dtype=np.float64)
        loud_t = view_start + window / 2 + 0.1 * np.arange(loud.shape[-1])
    else:
        loud, loud_t = np.zeros(0), np.zeros(0)
    return Card(view=(view_start, view_start + n / rate), env_t=env_t, peak_db=_db(peak), rms_db=_db(mean_square),
                loud_t=loud_t, loudness=loud, loud_window=window, span=span, spectrogram=spectrogram,
                cutoff=cutoff, lufs=lufs, title=title)


def _read_view(path: str, offset: float, duration: float, context_seconds: float):
    """``(frames, rate, view_start, file_duration)`` around the excerpt; None when the file cannot be read."""
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
    return frames, rate, view_start, total


def _resolve_image_format(image_format: str) -> str:
    if image_format not in ("auto", "png", "svg"):
        raise ValueError(f"image_format must be 'auto', 'png' or 'svg', got {image_format!r}.")
    if image_format == "svg":
        return "svg"
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        # A dependency of audiotree: its absence is a broken install, not a reason to change format silently.
        raise RuntimeError(
            f"PNG plots need matplotlib, which audiotree depends on but which cannot be imported here ({exc}); "
            "reinstall it (pip install audiotree), or pass image_format='svg'."
        ) from None
    return "png"


# ---------------------------------------------------------------- the page
_STATUS_SCRIPT = """
(function () {
  var players = Array.prototype.slice.call(document.querySelectorAll("audio"));
  var images = Array.prototype.slice.call(document.querySelectorAll("figure img"));
  var status = document.getElementById("media-status");
  var state = players.map(function () { return null; });
  var pictures = images.map(function () { return null; });
  function report() {
    var loaded = 0, errors = 0, shown = 0, broken = 0;
    var durations = players.map(function (p, i) {
      if (state[i] === "ok") { loaded++; return Math.round(p.duration * 1000) / 1000; }
      if (state[i] === "error") { errors++; }
      return null;
    });
    var sizes = images.map(function (img, i) {
      if (pictures[i] === "ok") { shown++; }
      if (pictures[i] === "error") { broken++; }
      return {src: img.getAttribute("src"), complete: img.complete, width: img.naturalWidth, height: img.naturalHeight};
    });
    status.textContent = JSON.stringify({players: players.length, loaded: loaded, errors: errors, durations: durations,
                                         images: images.length, decoded: shown, broken: broken, sizes: sizes});
    if (loaded + errors === players.length && shown + broken === images.length) {
      status.setAttribute("data-complete", "true");
    }
  }
  function watch(element, list, i, event, isReady, isBroken) {
    function ok() { if (list[i] === null) { list[i] = "ok"; report(); } }
    function bad() { if (list[i] === null) { list[i] = "error"; report(); } }
    element.addEventListener(event, ok);
    element.addEventListener("error", bad);
    if (isBroken(element)) { bad(); } else if (isReady(element)) { ok(); }
  }
  players.forEach(function (p, i) {
    watch(p, state, i, "loadedmetadata", function (e) { return e.readyState >= 1; }, function (e) { return !!e.error; });
  });
  images.forEach(function (img, i) {
    // decode() resolves once the picture is really decoded (a broken one rejects).
    function decoded() { img.decode().then(function () { if (pictures[i] === null) { pictures[i] = "ok"; report(); } },
                                           function () { if (pictures[i] === null) { pictures[i] = "error"; report(); } }); }
    if (img.complete) { decoded(); } else { img.addEventListener("load", decoded); }
    img.addEventListener("error", function () { if (pictures[i] === null) { pictures[i] = "error"; report(); } });
  });
  report();
})();
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; background: #fafafa; }
h1 { font-size: 1.3rem; margin-bottom: 0.2rem; }
p.meta { color: #555; margin-top: 0; }
h2 { font-size: 1.1rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
h2 small { color: #666; font-weight: normal; }
.legend { display: flex; flex-wrap: wrap; gap: 0.4rem 1.2rem; font-size: 0.85rem; color: #333; margin: 0.6rem 0 1rem; }
.legend span { display: inline-flex; align-items: center; gap: 0.35rem; }
.legend i { display: inline-block; width: 1.2rem; height: 0.7rem; }
.legend i.line { height: 0; border-top: 2px solid; }
.legend i.dash { height: 0; border-top: 2px dashed; }
.grid { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; background: white; border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem; width: WIDTHpx; }
figure img { width: WIDTHpx; height: HEIGHTpx; display: block; }
figure audio { width: 100%; margin-top: 0.3rem; }
figcaption { font-size: 0.8rem; color: #444; word-break: break-all; }
ul.labels { list-style: none; display: flex; flex-wrap: wrap; gap: 0.3rem; margin: 0.3rem 0 0; padding: 0; }
ul.labels li { font-size: 0.78rem; background: #eef2f7; border: 1px solid #d5dde8; border-radius: 3px; padding: 0 0.35rem; }
ul.labels b { font-weight: 600; color: #445; }
#media-status { font-size: 0.75rem; color: #666; white-space: pre-wrap; }
"""


def _legend_html(cutoff: float | None) -> str:
    from audiotree.plots.card import COLOURS

    entries = [
        ("", COLOURS["peak"], "peak level (dBFS)"), ("", COLOURS["rms"], "RMS level (dBFS)"),
        ("line", COLOURS["loudness"], "loudness curve (LUFS; gaps are silence)"),
        ("", COLOURS["excerpt"] + "55", "the excerpt, with its loudness as a bar"),
    ]
    if cutoff is not None:
        entries.append(("dash", COLOURS["cutoff"], f"cutoff {cutoff:g} LUFS"))
    entries.append(("", "linear-gradient(90deg, #08061e, #a83060, #fac846, #fcfab4)",
                    "excerpt spectrogram (mel bands, quiet to loud)"))
    parts = []
    for kind, colour, text in entries:
        style = f"border-color: {colour}" if kind else f"background: {colour}"
        parts.append(f'<span><i class="{kind}" style="{style}"></i>{html.escape(text)}</span>')
    return '<div class="legend">' + "".join(parts) + "</div>"


def _card_html(r: dict) -> str:
    wav = urllib.parse.quote(r["wav"])
    image = urllib.parse.quote(r["image"])
    name = os.path.basename(r["filepath"] or "")
    lufs = "" if r["lufs"] is None else f" &middot; {r['lufs']:.1f} LUFS"
    length = "" if r["file_duration"] is None else " of %.2f s" % r["file_duration"]
    labels = "".join(f"<li><b>{html.escape(k)}</b> {html.escape(_format_value(v))}</li>"
                     for k, v in r["labels"].items())
    return (
        f'<figure id="excerpt-{r["index"]}">'
        f'<img src="{image}" width="{r["width"]}" height="{r["height"]}" '
        f'alt="level, loudness and spectrogram of {html.escape(name, quote=True)}">'
        f'<audio controls preload="metadata" src="{wav}"></audio>'
        f'<figcaption title="{html.escape(r["filepath"] or "", quote=True)}">'
        f'#{r["index"]} {html.escape(name or "?")} &middot; '
        f'{r["offset"]:.2f}&ndash;{r["offset"] + r["duration"]:.2f} s{length}'
        f'{lufs} &middot; {r["sample_rate"]} Hz, {r["channels"]} ch</figcaption>'
        + (f'<ul class="labels">{labels}</ul>' if labels else "")
        + "</figure>"
    )


def _page(title: str, subtitle: str, group_by: str | None, groups: dict[Any, list[dict]],
          cutoff: float | None, width: int, height: int) -> str:
    style = _STYLE.replace("WIDTH", str(width)).replace("HEIGHT", str(height))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{style}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(subtitle)}</p>',
        _legend_html(cutoff),
    ]
    for value, records in groups.items():
        shown = _format_value(value)
        heading = shown if group_by in (None, "source") else f"{group_by}: {shown}"
        if group_by is None:
            heading = "all excerpts"
        out.append(
            f'<section data-group="{html.escape(shown, quote=True)}" data-source="{html.escape(shown, quote=True)}">'
            f"<h2>{html.escape(heading)} <small>({len(records)} excerpt{'s' if len(records) != 1 else ''})</small>"
            '</h2><div class="grid">'
        )
        out.extend(_card_html(r) for r in records)
        out.append("</div></section>")
    out.append('<h2>Players and pictures loaded</h2><pre id="media-status">waiting for the players</pre>')
    out.append(f"<script>{_STATUS_SCRIPT}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _remove_previous(out_dir: Path) -> None:
    """Deletes the files a previous preview in ``out_dir`` listed in its manifest.

    The manifest is input like any other file: only names that are regular
    files reached through real folders of ``out_dir`` (no ``..``, no absolute
    name, no symlink anywhere on the way) are deleted.
    """
    try:
        previous = json.loads((out_dir / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for record in previous.get("excerpts", []) if isinstance(previous, dict) else []:
        for key in ("wav", "image"):
            name = record.get(key) if isinstance(record, dict) else None
            if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts:
                continue
            path, modes = out_dir, []
            try:
                for part in Path(name).parts:
                    path = path / part
                    modes.append(os.lstat(path).st_mode)
                if all(stat.S_ISDIR(m) for m in modes[:-1]) and stat.S_ISREG(modes[-1]):  # lstat: links are neither
                    path.unlink()
            except OSError:
                pass


def _check_arguments(n: Any, context_seconds: Any, group_by: Any, vocabularies: Any) -> None:
    if not is_int(n) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}.")
    if not (isinstance(context_seconds, (int, float)) and context_seconds > 0):
        raise ValueError(f"context_seconds must be > 0, got {context_seconds!r}.")
    if group_by is not None and (not isinstance(group_by, str) or not group_by):
        raise ValueError(f"group_by must be a column name or None, got {group_by!r}.")
    if vocabularies is not None and not isinstance(vocabularies, Mapping):
        raise TypeError(f"vocabularies must be a mapping {{column: names}}, got {type(vocabularies).__name__}.")


def _offset(tree: Any) -> float:
    """The excerpt's start in its file; 0 when unknown (NaN for items of pre-built datasets)."""
    value = _first(tree.offset)
    return float(value) if value is not None and math.isfinite(float(value)) else 0.0


def _records(trees: list[Any], vocabularies: Mapping[str, Any]) -> list[dict]:
    """One record (without file names yet) per excerpt, with its waveform kept aside."""
    records = []
    for index, tree in enumerate(trees):
        filepath = _first(tree.filepath) or ""
        waveform = np.asarray(tree.waveform, dtype=np.float32)[0]
        rate = int(tree.sample_rate)
        lufs = None if tree.lufs is None else float(np.asarray(tree.lufs).reshape(-1)[0])
        records.append({
            "index": index, "filepath": filepath, "rate": rate, "waveform": waveform,
            "source": _first(tree.source) or os.path.basename(os.path.dirname(filepath)) or "audio",
            "offset": _offset(tree),
            "lufs": lufs if lufs is not None and math.isfinite(lufs) else None,
            "labels": {k: v for k, v in item_labels(tree, vocabularies).items() if k != "excerpt_method"},
            "excerpt_method": _excerpt_method(tree),
        })
    return records


def _group(records: list[dict], group_by: str | None) -> dict[Any, list[dict]]:
    if group_by is None:
        return {None: records}
    if group_by not in BUILTIN_COLUMNS and not any(group_by in r["labels"] for r in records):
        known = sorted({k for r in records for k in r["labels"]})
        raise ValueError(
            f"group_by={group_by!r} is not a column of these excerpts; use one of {list(BUILTIN_COLUMNS) + known} "
            "(labels come from the items' pitch/velocity/note_duration and extras, e.g. an index's label columns)."
        )
    groups: dict[Any, list[dict]] = {}
    for r in records:
        groups.setdefault(_column(r, group_by), []).append(r)
    if group_by == "source":
        return groups  # sources keep the order they first appear in (the mix's order)
    return {k: groups[k] for k in sorted(groups, key=_group_key)}


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
    group_by: str | None = "source",
    vocabularies: Mapping[str, Sequence[str] | Mapping[int, str]] | None = None,
) -> PreviewResult:
    """Writes a static preview of ``n`` excerpts to ``out_dir`` (see the module docstring).

    Args:
      items: a dataset from :mod:`audiotree.sources` (items ``0, 1, ...`` are
        read by random access; dropped ``None`` items are passed over), or any
        iterable of ``AudioTree`` items or batches (e.g. an ``IterDataset``).
      out_dir: the folder to write (created). Files of an earlier preview in it
        are replaced.
      n: how many excerpts.
      lufs_cutoff: draw this loudness threshold on every card (``None``: no line).
      title, subtitle: page heading and a line under it.
      image_format: ``"png"`` (matplotlib), ``"svg"`` (vector, drawn without matplotlib) or
        ``"auto"`` (the same as ``"png"``).
      context_seconds: longest stretch of a source file to plot around its excerpt.
      group_by: the column whose values make the page's sections: ``"source"``,
        ``"folder"``, ``"format"`` or a label (see :func:`item_labels`); ``None``
        puts every card in one section. Items without the label go last.
      vocabularies: ``{column: names}`` to show integer label ids by name.

    Returns:
      A :class:`PreviewResult` with the index path and one record per excerpt.

    Raises:
      ValueError: a bad argument, or ``group_by`` naming no column of the excerpts.
      RuntimeError: the dataset gave no excerpts; ``image_format="png"`` without matplotlib.
    """
    import soundfile

    from audiotree.dsp.spectrogram import mel_spectrogram
    from audiotree.plots import card as cards

    _check_arguments(n, context_seconds, group_by, vocabularies)
    fmt = _resolve_image_format(image_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trees = _take(items, n)
    if not trees:
        raise RuntimeError("The dataset produced no excerpts to preview.")
    groups = _group(_records(trees, vocabularies or {}), group_by)
    _remove_previous(out)

    folders: dict[Any, str] = {}
    draw = cards.draw_png if fmt == "png" else cards.draw_svg
    for value, records in groups.items():
        folder = _safe_name(_format_value(value) if group_by is not None else "excerpts")
        if folder in folders.values():  # two values that clean up to the same folder
            folder = f"{folder}_{len(folders)}"
        folders[value] = folder
        (out / folder).mkdir(exist_ok=True)
        for k, r in enumerate(records):
            waveform, rate = r.pop("waveform"), r.pop("rate")
            duration = waveform.shape[-1] / rate
            offset = r["offset"]
            r["wav"], r["image"] = f"{folder}/{k:03d}.wav", f"{folder}/{k:03d}.{fmt}"
            soundfile.write(out / r["wav"], np.clip(waveform.T, -1.0, 1.0), rate, subtype="PCM_16")
            span = (offset, offset + duration)
            spectrogram = mel_spectrogram(waveform, rate)
            caption = f"{os.path.basename(r['filepath'])}  [{span[0]:.2f}, {span[1]:.2f}] s"
            if r["excerpt_method"] is not None:  # how loudest chose it: from the corpus index or by search
                caption += f"  ({r['excerpt_method']})"
            view = _read_view(r["filepath"], offset, duration, float(context_seconds))
            if view is None:  # the source file is gone: plot the excerpt alone
                frames, native, view_start, file_duration = np.ascontiguousarray(waveform.T), rate, offset, None
            else:
                frames, native, view_start, file_duration = view
            draw(out / r["image"], _card(frames, native, view_start, span, spectrogram, lufs_cutoff, r["lufs"], caption))
            r.update({
                "group": value,
                "offset": round(offset, 6), "duration": round(duration, 6),
                "file_duration": None if file_duration is None else round(file_duration, 6),
                "sample_rate": rate, "channels": int(waveform.shape[0]),
                "lufs": None if r["lufs"] is None else round(r["lufs"], 3),
                "width": cards.WIDTH, "height": cards.HEIGHT,
            })

    keys = ("index", "source", "group", "filepath", "offset", "duration", "file_duration", "sample_rate", "channels",
            "lufs", "labels", "wav", "image", "width", "height", "excerpt_method")
    groups = {value: [{k: r[k] for k in keys} for r in records] for value, records in groups.items()}
    ordered = [r for records in groups.values() for r in records]
    if subtitle is None:
        sources = len({r["source"] for r in ordered})
        subtitle = f"{len(ordered)} excerpts from {sources} source{'s' if sources != 1 else ''}"
        if lufs_cutoff is not None:
            subtitle += f"; loudness cutoff {lufs_cutoff:g} LUFS"
    if group_by not in (None, "source"):
        subtitle += f"; grouped by {group_by}"
    index_path = out / "index.html"
    index_path.write_text(_page(title, subtitle, group_by, groups, lufs_cutoff, cards.WIDTH, cards.HEIGHT),
                          encoding="utf-8")
    manifest = {"title": title, "image_format": fmt, "lufs_cutoff": lufs_cutoff, "group_by": group_by,
                "excerpts": ordered}
    (out / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return PreviewResult(index=index_path, excerpts=ordered, image_format=fmt)


def _excerpt_method(tree: Any) -> str | None:
    """``"index"``/``"search"`` from ``extras["excerpt_method"]`` (``None`` when absent)."""
    code = (getattr(tree, "extras", None) or {}).get("excerpt_method")
    if code is None:
        return None
    from audiotree.excerpts.plan import method_name

    return method_name(np.asarray(code).reshape(-1)[0])
