"""Measure, then scale up: find the parallelism a pipeline actually needs.

:func:`tune` reads a few batches of a dataset at every combination of
``num_workers`` (``mp_prefetch`` processes), ``num_threads`` (``ReadOptions``
read threads) and ``per_worker_buffer_size`` and records, for each:

* items/s over the batches after the first (the steady state);
* the time to the first batch (start-up: spawning workers, first reads);
* the peak resident memory of the whole process tree (this process plus every
  worker), sampled every 20 ms with psutil when installed, else from ``/proc``.
  RSS counts shared pages once per process, so it is an upper bound;
* what the setting read from storage, workers included
  (:func:`audiotree.io.read_totals.read_stats`: requests, bytes, cache hits,
  seconds waited), and per item delivered (workers may have read a few items
  ahead that were never delivered).

The **knee** is the cheapest setting (fewest workers, then threads, then
buffer) within ``tolerance`` (5 %) of the best throughput: past it, more
parallelism buys memory, not speed. With ``ram_budget_mb`` only settings whose
peak stays within the budget are candidates, and the result also says how
large the buffers may grow at the knee before the budget is reached, using the
same arithmetic as :mod:`audiotree.sources.audio_datasets`.

Example::

    from audiotree.tuning import tune

    result = tune(ds, workers=[0, 1, 2, 4], threads=[0, 2], batch_size=32, batches=8)
    print(result.summary())
    it = (ds.to_iter_dataset(result.read_options)
            .batch(32, batch_fn=AudioTree.batch)
            .mp_prefetch(result.multiprocessing_options))

Every setting runs in this process, one after the other, after one warm-up
batch (imports, page cache). Settings are independent: workers are shut down
before the next setting starts.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from audiotree.plots.tuning import PLOT_HEIGHT as PLOT_HEIGHT, PLOT_WIDTH as PLOT_WIDTH  # re-exported
from audiotree.validation import is_int

__all__ = [
    "Setting", "Measurement", "TuneResult", "tune", "measure", "select_knee", "default_workers", "process_tree_rss",
]

_SAMPLE_INTERVAL = 0.02
_MAX_BUFFER_HINT = 1024


# ------------------------------------------------------------------ memory of the process tree
def _proc_children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: parse after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _proc_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def process_tree_rss(pid: int | None = None) -> int | None:
    """Resident memory in bytes of ``pid`` (default: this process) and all its descendants.

    Uses psutil when installed, else ``/proc`` (Linux); ``None`` where neither works.
    """
    pid = os.getpid() if pid is None else pid
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return None
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total
    if not os.path.isdir("/proc"):
        return None
    tree = _proc_children()
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += _proc_rss(current)
        stack.extend(tree.get(current, ()))
    return total


class _PeakSampler:
    """Samples :func:`process_tree_rss` in a daemon thread; ``peak`` is the maximum seen."""

    def __init__(self, interval: float = _SAMPLE_INTERVAL):
        self.interval = interval
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audiotree-rss-sampler", daemon=True)

    def _sample(self) -> None:
        value = process_tree_rss()
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "_PeakSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._sample()
        self._stop.set()
        self._thread.join()


# The plot itself lives in audiotree.plots.tuning; its PNG size is re-exported here.


# ------------------------------------------------------------------ settings and measurements
@dataclasses.dataclass(frozen=True, order=True)
class Setting:
    """One point of the grid. ``prefetch_buffer_size`` is the ReadOptions buffer (0 without threads)."""

    num_workers: int
    num_threads: int
    per_worker_buffer_size: int
    prefetch_buffer_size: int

    @property
    def read_options(self):
        import grain

        return grain.ReadOptions(num_threads=self.num_threads, prefetch_buffer_size=self.prefetch_buffer_size)

    @property
    def multiprocessing_options(self):
        import grain

        return grain.MultiprocessingOptions(num_workers=self.num_workers,
                                            per_worker_buffer_size=self.per_worker_buffer_size)

    @property
    def label(self) -> str:
        buffer = f"buffer {self.per_worker_buffer_size}" if self.num_workers else "no mp"
        workers = f"{self.num_workers} worker{'' if self.num_workers == 1 else 's'}"
        threads = f"{self.num_threads} thread{'' if self.num_threads == 1 else 's'}"
        return f"{workers}, {threads}, {buffer}"

    def buffered_bytes(self, item_bytes: int, batch_bytes: int) -> int:
        """Decoded audio the buffers can hold (the arithmetic of :mod:`audiotree.sources.audio_datasets`)."""
        read = (self.prefetch_buffer_size + self.num_threads) * item_bytes
        if not self.num_workers:
            return read
        per_worker = read + self.per_worker_buffer_size * batch_bytes
        parent_queue = self.num_workers * self.per_worker_buffer_size * batch_bytes
        return self.num_workers * per_worker + parent_queue


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one setting did."""

    setting: Setting
    items_per_second: float
    first_batch_seconds: float
    peak_rss_bytes: int | None
    items: int  # items timed (after the first batch and the pre-filled buffers)
    seconds: float  # time over which they were timed
    reads: Any = None  # ReadStats: what the setting read from storage, over all its processes
    items_delivered: int = 0  # every item the setting delivered (first batch and buffers included)

    @property
    def remote(self) -> bool:
        """Whether the setting made any request to storage."""
        return self.reads is not None and self.reads.requests > 0

    @property
    def peak_rss_mb(self) -> float | None:
        return None if self.peak_rss_bytes is None else self.peak_rss_bytes / 2**20

    def to_dict(self) -> dict:
        return {
            "num_workers": self.setting.num_workers,
            "num_threads": self.setting.num_threads,
            "per_worker_buffer_size": self.setting.per_worker_buffer_size,
            "prefetch_buffer_size": self.setting.prefetch_buffer_size,
            "items_per_second": round(self.items_per_second, 3),
            "first_batch_seconds": round(self.first_batch_seconds, 3),
            "peak_rss_mb": None if self.peak_rss_bytes is None else round(self.peak_rss_bytes / 2**20, 1),
            "items": self.items,
            "seconds": round(self.seconds, 3),
            "items_delivered": self.items_delivered,
            "reads": None if self.reads is None else self.reads.to_dict(),
        }


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The measurements, the best and the knee settings, and what fits the RAM budget.

    ``read_options`` and ``multiprocessing_options`` are the knee's, ready for
    ``ds.to_iter_dataset(result.read_options)...mp_prefetch(result.multiprocessing_options)``.
    """

    measurements: list[Measurement]
    best: Measurement
    knee: Measurement
    tolerance: float
    batch_size: int
    item_bytes: int
    batch_bytes: int
    baseline_rss_bytes: int | None
    ram_budget_bytes: int | None = None
    fits_budget: bool | None = None  # None without a budget; False when no setting fitted
    max_per_worker_buffer_size: int | None = None  # at the knee, within the budget (mp settings)
    max_prefetch_buffer_size: int | None = None  # at the knee, within the budget (threaded reads)

    @property
    def read_options(self):
        return self.knee.setting.read_options

    @property
    def multiprocessing_options(self):
        return self.knee.setting.multiprocessing_options

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "item_bytes": self.item_bytes,
            "batch_bytes": self.batch_bytes,
            "tolerance": self.tolerance,
            "baseline_rss_mb": None if self.baseline_rss_bytes is None else round(self.baseline_rss_bytes / 2**20, 1),
            "ram_budget_mb": None if self.ram_budget_bytes is None else round(self.ram_budget_bytes / 2**20, 1),
            "fits_budget": self.fits_budget,
            "measurements": [m.to_dict() for m in self.measurements],
            "best": self.best.to_dict(),
            "knee": self.knee.to_dict(),
            "max_per_worker_buffer_size": self.max_per_worker_buffer_size,
            "max_prefetch_buffer_size": self.max_prefetch_buffer_size,
        }

    def summary(self) -> str:
        """A plain-text table and the recommendation."""
        lines = [f"{'workers':>7} {'threads':>7} {'buffer':>6} {'items/s':>9} {'first batch s':>13} {'peak RSS MB':>11}"]
        for m in self.measurements:
            s = m.setting
            mark = "  <- knee" if m is self.knee else ("  <- best" if m is self.best else "")
            rss = "-" if m.peak_rss_mb is None else f"{m.peak_rss_mb:.0f}"
            buffer = str(s.per_worker_buffer_size) if s.num_workers else "-"
            lines.append(f"{s.num_workers:>7} {s.num_threads:>7} {buffer:>6} {m.items_per_second:>9.1f} "
                         f"{m.first_batch_seconds:>13.2f} {rss:>11}{mark}")
        lines.append(self.recommendation())
        for m in self.measurements:
            if m.remote:
                lines.append(f"Reads, {m.setting.label}: {m.reads.summary(items=m.items_delivered)}")
        return "\n".join(lines)

    def recommendation(self) -> str:
        k = self.knee.setting
        text = (f"Knee: {k.label} at {self.knee.items_per_second:.1f} items/s "
                f"(best {self.best.items_per_second:.1f} items/s with {self.best.setting.label}; "
                f"tolerance {self.tolerance:.0%}).")
        if self.ram_budget_bytes is not None:
            budget = self.ram_budget_bytes / 2**20
            if not self.fits_budget:
                text += f" No setting stayed within the {budget:.0f} MB budget."
            else:
                hints = []
                for name, size in (("per_worker_buffer_size", self.max_per_worker_buffer_size),
                                   ("prefetch_buffer_size", self.max_prefetch_buffer_size)):
                    if size is not None:
                        hints.append(f"{name} <= {size}" + (" (the largest checked)" if size >= _MAX_BUFFER_HINT else ""))
                if hints:
                    text += f" Within {budget:.0f} MB at the knee: " + ", ".join(hints) + "."
        return text

    def plot(self, path: str | os.PathLike, *, corpus: str | None = None, pipeline: str | None = None) -> Any:
        """Items/s and peak RSS against workers, one line per threads x buffer (needs matplotlib).

        A ``PLOT_WIDTH`` x ``PLOT_HEIGHT`` PNG with a title and a caption naming
        ``corpus`` and ``pipeline`` (free text, e.g. the sources and the dataset
        options) and this machine's cores. Lines that would lie on top of each
        other get their own marker and line style and a small sideways offset;
        the knee is starred in both panels. Returns the matplotlib ``Figure``.
        """
        from audiotree.plots.tuning import plot_tune_result

        return plot_tune_result(self, path, corpus=corpus, pipeline=pipeline)


# ------------------------------------------------------------------ measuring
def default_workers(cpu_count: int | None = None) -> list[int]:
    """0, 1, then powers of two up to the core count, and the core count itself."""
    cpus = max(1, cpu_count or os.cpu_count() or 1)
    out = {0, 1, cpus}
    power = 2
    while power < cpus:
        out.add(power)
        power *= 2
    return sorted(out)


def _batch_items(batch: Any, fallback: int) -> int:
    size = getattr(batch, "batch_size", None)
    if isinstance(size, int):
        return size
    import jax

    for leaf in jax.tree_util.tree_leaves(batch):
        shape = getattr(leaf, "shape", None)
        if shape:
            return int(shape[0])
    return fallback


def _nbytes(batch: Any) -> int:
    import jax

    return int(sum(getattr(leaf, "nbytes", 0) for leaf in jax.tree_util.tree_leaves(batch)))


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _pipeline(ds: Any, setting: Setting, batch_size: int, batch_fn: Callable):
    it = ds.to_iter_dataset(setting.read_options).batch(batch_size, batch_fn=batch_fn)
    if setting.num_workers:
        it = it.mp_prefetch(setting.multiprocessing_options)
    return it


def _buffered_batches(setting: Setting, batch_size: int) -> int:
    """Batches the buffers can already hold when the first batch arrives."""
    read_items = setting.prefetch_buffer_size if setting.num_threads else 0
    mp = setting.num_workers * setting.per_worker_buffer_size if setting.num_workers else 0
    return mp + -(-read_items // batch_size)


def measure(ds: Any, setting: Setting, *, batch_size: int = 32, batches: int = 8,
            batch_fn: Callable | None = None) -> tuple[Measurement, int]:
    """Reads one setting; returns the measurement and the first batch's bytes.

    Reads the first batch (timed from ``iter()``: start-up), then the batches the
    buffers may already hold (untimed: they were filled during start-up), then
    ``batches`` batches over which items/s is timed.
    """
    if batch_fn is None:
        from audiotree.core import AudioTree

        batch_fn = AudioTree.batch
    from audiotree.io.read_totals import read_stats

    skip = _buffered_batches(setting, batch_size)
    gc.collect()
    reads_before = read_stats()
    delivered = 0
    with _PeakSampler() as sampler:
        started = time.perf_counter()
        iterator = iter(_pipeline(ds, setting, batch_size, batch_fn))
        try:
            first = next(iterator, None)
            if first is None:
                raise RuntimeError("The dataset produced no batch; tune() needs at least one batch per setting.")
            first_at = time.perf_counter()
            batch_bytes = _nbytes(first)
            delivered = _batch_items(first, batch_size)
            del first
            exhausted = False
            for _ in range(skip):
                batch = next(iterator, None)
                if batch is None:
                    exhausted = True
                    break
                delivered += _batch_items(batch, batch_size)
                del batch
            timed_from = time.perf_counter()
            items = 0
            for _ in range(0 if exhausted else batches):
                batch = next(iterator, None)
                if batch is None:
                    break
                items += _batch_items(batch, batch_size)
                del batch
            finished = time.perf_counter()
        finally:
            _close(iterator)
            del iterator
            gc.collect()
    seconds = finished - timed_from
    rate = items / seconds if items and seconds > 0 else 0.0
    reads = read_stats() - reads_before  # after the close: the workers are gone and their counts are in
    return Measurement(setting, rate, first_at - started, sampler.peak, items, seconds, reads,
                       delivered + items), batch_bytes


def _check_ints(name: str, values: Iterable[int] | None, minimum: int) -> list[int] | None:
    if values is None:
        return None
    out = []
    for v in values:
        if not is_int(v) or v < minimum:
            raise ValueError(f"{name} must be ints >= {minimum}, got {v!r}.")
        if v not in out:
            out.append(v)
    if not out:
        raise ValueError(f"{name} is empty; give at least one value.")
    return out


def _grid(workers: Sequence[int], threads: Sequence[int], buffers: Sequence[int], read_buffer: int | None) -> list[Setting]:
    settings = []
    for w in workers:
        for t in threads:
            prefetch = 0 if t == 0 else (read_buffer if read_buffer is not None else 2 * t)
            for b in (buffers if w else buffers[:1]):
                settings.append(Setting(w, t, b if w else 1, prefetch))
    return settings


def _max_buffer(knee: Measurement, item_bytes: int, batch_bytes: int, budget: int, field: str) -> int | None:
    """Largest buffer (``field`` of the knee's setting) whose estimated peak stays within ``budget``."""
    if knee.peak_rss_bytes is None:
        return None
    base = knee.peak_rss_bytes - knee.setting.buffered_bytes(item_bytes, batch_bytes)
    best = None
    for size in range(1, _MAX_BUFFER_HINT + 1):
        candidate = dataclasses.replace(knee.setting, **{field: size})
        if base + candidate.buffered_bytes(item_bytes, batch_bytes) <= budget:
            best = size
        else:
            break
    return best


def select_knee(measurements: Sequence[Measurement], *, tolerance: float = 0.05,
                ram_budget_bytes: int | None = None) -> tuple[Measurement, Measurement, bool | None]:
    """``(best, knee, fits_budget)`` of some measurements.

    Candidates are the settings whose peak RSS stays within ``ram_budget_bytes``
    (all of them when there is no budget, or when none fits: ``fits_budget`` is
    then False). ``best`` has the highest items/s among them; the knee is the
    cheapest candidate (fewest workers, then threads, then buffer, then memory)
    within ``tolerance`` of it.
    """
    if not measurements:
        raise ValueError("select_knee() needs at least one measurement.")
    candidates = list(measurements)
    fits = None
    if ram_budget_bytes is not None:
        within = [m for m in candidates if m.peak_rss_bytes is None or m.peak_rss_bytes <= ram_budget_bytes]
        fits = bool(within)
        candidates = within or candidates
    best = max(candidates, key=lambda m: m.items_per_second)
    good = [m for m in candidates if m.items_per_second >= (1 - tolerance) * best.items_per_second]
    knee = min(good, key=lambda m: (m.setting.num_workers, m.setting.num_threads, m.setting.per_worker_buffer_size,
                                    m.peak_rss_bytes or 0))
    return best, knee, fits


def tune(
    ds: Any,
    *,
    workers: Sequence[int] | None = None,
    threads: Sequence[int] = (0, 2),
    buffers: Sequence[int] = (1, 4),
    read_buffer: int | None = None,
    batch_size: int = 32,
    batches: int = 8,
    ram_budget_mb: float | None = None,
    tolerance: float = 0.05,
    batch_fn: Callable | None = None,
    warmup: bool = True,
    on_measurement: Callable[[Measurement], None] | None = None,
) -> TuneResult:
    """Measures ``ds`` at every ``workers x threads x buffers`` setting; see the module docstring.

    Args:
      ds: a Grain ``MapDataset`` (such as the builders of :mod:`audiotree.sources`
        return) long enough for ``batches * batch_size`` items per setting;
        an endless one (``num_epochs=None``) is simplest.
      workers: ``num_workers`` values (default :func:`default_workers`: 0, 1, 2, 4, ... cores).
      threads: ``ReadOptions.num_threads`` values.
      buffers: ``per_worker_buffer_size`` values (settings without workers use none).
      read_buffer: ``ReadOptions.prefetch_buffer_size`` when threads > 0 (default ``2 x threads``).
      batch_size, batches: items/s is timed over ``batches`` batches, read after
        the first batch and after the batches the buffers may already hold.
      ram_budget_mb: only settings whose peak RSS stays within this are candidates.
      tolerance: the knee is the cheapest setting within this fraction of the best items/s.
      batch_fn: default ``AudioTree.batch``.
      warmup: read one batch without workers first (imports, OS page cache).
      on_measurement: called after each setting (progress reporting).

    Returns:
      A :class:`TuneResult`.
    """
    workers = _check_ints("workers", default_workers() if workers is None else workers, 0)
    threads = _check_ints("threads", threads, 0)
    buffers = _check_ints("buffers", buffers, 1)
    if read_buffer is not None:
        _check_ints("read_buffer", [read_buffer], 1)
    _check_ints("batch_size", [batch_size], 1)
    _check_ints("batches", [batches], 1)
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}.")
    if ram_budget_mb is not None and not (isinstance(ram_budget_mb, (int, float)) and ram_budget_mb > 0):
        raise ValueError(f"ram_budget_mb must be > 0, got {ram_budget_mb!r}.")
    if not hasattr(ds, "to_iter_dataset"):
        raise TypeError(f"tune() needs a grain.MapDataset, got {type(ds).__name__}.")

    item_bytes = int(getattr(ds, "item_bytes", 0))
    if warmup:
        measure(ds, Setting(0, 0, 1, 0), batch_size=batch_size, batches=2, batch_fn=batch_fn)
    gc.collect()
    baseline = process_tree_rss()
    measurements: list[Measurement] = []
    batch_bytes = 0
    for setting in _grid(workers, threads, buffers, read_buffer):
        m, nbytes = measure(ds, setting, batch_size=batch_size, batches=batches, batch_fn=batch_fn)
        batch_bytes = max(batch_bytes, nbytes)
        measurements.append(m)
        if on_measurement is not None:
            on_measurement(m)
    if not item_bytes:
        item_bytes = max(1, batch_bytes // batch_size)

    budget = None if ram_budget_mb is None else int(ram_budget_mb * 2**20)
    best, knee, fits = select_knee(measurements, tolerance=tolerance, ram_budget_bytes=budget)
    max_worker_buffer = max_read_buffer = None
    if budget is not None and fits:
        if knee.setting.num_workers:
            max_worker_buffer = _max_buffer(knee, item_bytes, batch_bytes, budget, "per_worker_buffer_size")
        if knee.setting.num_threads:
            max_read_buffer = _max_buffer(knee, item_bytes, batch_bytes, budget, "prefetch_buffer_size")
    return TuneResult(
        measurements=measurements, best=best, knee=knee, tolerance=float(tolerance), batch_size=batch_size,
        item_bytes=item_bytes, batch_bytes=batch_bytes, baseline_rss_bytes=baseline, ram_budget_bytes=budget,
        fits_budget=fits, max_per_worker_buffer_size=max_worker_buffer, max_prefetch_buffer_size=max_read_buffer,
    )

