"""One benchmark run, in its own interpreter. Started by ``benchmarks/run.py``.

Runs under the dev venv (``ours``, ``torch``, ``floor``) or the reference venv
(``reference``), so it imports nothing from this repository except the sibling
``floor`` module, and only the public dataset API of whichever ``audiotree`` the
interpreter has installed.

Protocol on stdout (one line each, flushed):

* ``AUDIOTREE_BENCH_FIRST_BATCH`` right after the first batch arrives (the
  harness times interpreter start to this line from outside);
* ``AUDIOTREE_BENCH_RESULT {json}`` at the end: items/s over ``--batches``
  batches after the warm-up (the first batch; with ``k`` workers, the first ``2k``), the CPU seconds
  (user + system) of the whole process tree over the same window (this process, its threads and
  every live descendant: worker processes included), items per CPU-second, and the versions of what ran.

**Items per CPU-second count the items the tree produced, between two quiet points.** Workers
and read threads run ahead of the consumer: when the clock stops, one may have a whole batch done
and not yet taken, or be half-way through one, and that CPU would be charged to items the window
never counts (0 to 1 extra batch per window was measured, up to 8 % of a 12-batch window; the
0-worker synchronous path has no such edge). So every dataset's items are stamped where they are
made (:class:`ItemStamp`, one byte per item appended to a file, in whichever process makes it), and
the CPU window starts and ends when the tree is quiet (:func:`_quiet`: no item made and no CPU
spent for a moment; workers are then blocked on full buffers, holding only whole batches). The
CPU of the window is then exactly the work of the items stamped in it. The wall rate is the same
items over the time from the window's start to the last of them being made (the waits excluded).

Implementations: ``ours`` / ``reference`` (the installed audiotree's Grain pipeline; ``--reads sync``
passes ``ReadOptions(num_threads=0, prefetch_buffer_size=0)``, ``default`` the library's own), ``torch``
(our ``audiotree.torch`` adapter), ``floor`` (``floor.py``), ``plain`` (a plain torch ``Dataset``
doing soundfile seek+read, mono, soxr HQ and padding, under a ``DataLoader``) and ``lhotse`` (a
``CutSet`` of the recordings, random 3 s ``truncate``, ``resample`` and ``load_audio`` under a
``DataLoader``; run from its own venv, ``benchmarks/.venv-lhotse``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time

FIRST = "AUDIOTREE_BENCH_FIRST_BATCH"
RESULT = "AUDIOTREE_BENCH_RESULT"
GROUPS = ("speech", "music", "effects")
WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}
CONFIGS = {
    "random": dict(strategy="random", duration=3.0, sample_rate=44_100),
    "loudest": dict(strategy="loudest", duration=3.0, sample_rate=48_000, num_tries=5, lufs_cutoff=-40.0),
}
#: Every format the benchmark corpora hold. audiotree 1.0 discovers only ``.wav``/``.flac`` unless told,
#: so without this it read a different (smaller, cheaper) file set, or none (the hires effects are MP3/OGG).
CORPUS_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg")


def _folders(corpus: str) -> dict[str, str]:
    return {g: os.path.join(corpus, g) for g in GROUPS}


def grain_dataset(config: str, corpus: str):
    """The map dataset a user writes for ``config``, with the installed audiotree."""
    from audiotree.sources import ExcerptConfig, create_audio_dataset, create_balanced_audio_dataset

    cfg = CONFIGS[config]
    folders = _folders(corpus)
    # The same files for everyone: ours discovers every decodable format by default; a release
    # whose builders take ``extensions=`` (audiotree 1.0) is told the corpus's formats.
    same_files = {}
    if "extensions" in inspect.signature(create_audio_dataset).parameters:
        same_files["extensions"] = list(CORPUS_EXTENSIONS)
    if config == "random":
        return create_audio_dataset(list(folders.values()), duration=cfg["duration"], sample_rate=cfg["sample_rate"],
                                    num_epochs=None, **same_files)
    excerpt = ExcerptConfig(strategy="loudest", lufs_cutoff=cfg["lufs_cutoff"], num_tries=cfg["num_tries"])
    return create_balanced_audio_dataset(
        folders, weights=WEIGHTS, duration=cfg["duration"], sample_rate=cfg["sample_rate"], excerpt=excerpt, **same_files,
    )


class ItemStamp:
    """A per-item ``map``: appends one byte to ``path`` per item, in whichever process makes the item.

    ``O_APPEND`` writes of one byte are atomic, so workers and read threads share the file; the
    descriptor is opened once per process (about 2 us per item).
    """

    def __init__(self, path: str):
        self.path = path
        self._fd = None
        self._pid = None

    def __getstate__(self):
        return {"path": self.path, "_fd": None, "_pid": None}

    def __call__(self, item):
        if self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), os.getpid()
        os.write(self._fd, b".")
        return item


def _made(path: str | None) -> int:
    """Items stamped so far."""
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def grain_batches(config: str, corpus: str, workers: int, batch_size: int, reads: str = "default",
                  stamp: ItemStamp | None = None):
    import grain

    from audiotree import AudioTree

    ds = grain_dataset(config, corpus)
    if stamp is not None:
        ds = ds.map(stamp)
    if reads == "sync":  # the seed page's advice: no read threads, no prefetch buffer
        it = ds.to_iter_dataset(read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    else:
        it = ds.to_iter_dataset()
    it = it.batch(batch_size, batch_fn=AudioTree.batch)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(it)


# Names the torch adapter may use; the first that exists wins.
_TORCH_LOADERS = ("create_dataloader", "make_dataloader", "dataloader", "DataLoader", "data_loader", "as_dataloader", "to_dataloader")
_TORCH_DATASETS = ("TorchDataset", "AudioTorchDataset", "MapStyleDataset", "as_torch_dataset", "to_torch_dataset", "to_torch", "torch_dataset")
_TORCH_COLLATES = ("collate", "collate_fn", "collate_audio_trees", "collate_trees")


def torch_batches(config: str, corpus: str, workers: int, batch_size: int, reads: str = "default",
                  stamp: ItemStamp | None = None):
    """Our ``audiotree.torch`` path: a torch ``DataLoader`` over the same dataset."""
    import audiotree.torch as att  # ImportError -> the harness reports n/a

    ds = grain_dataset(config, corpus)
    if stamp is not None:
        ds = ds.map(stamp)
    loader_fn = next((getattr(att, n) for n in _TORCH_LOADERS if hasattr(att, n)), None)
    if loader_fn is not None:
        loader = loader_fn(ds, batch_size=batch_size, num_workers=workers)
        return iter(loader)
    wrap = next((getattr(att, n) for n in _TORCH_DATASETS if hasattr(att, n)), None)
    if wrap is None:
        public = sorted(n for n in dir(att) if not n.startswith("_"))
        raise ImportError(f"audiotree.torch has no DataLoader entry point the harness knows (it exports {public})")
    import torch.utils.data

    collate = next((getattr(att, n) for n in _TORCH_COLLATES if hasattr(att, n)), None)
    from audiotree import AudioTree

    loader = torch.utils.data.DataLoader(
        wrap(ds), batch_size=batch_size, num_workers=workers, shuffle=False,
        collate_fn=collate or AudioTree.batch, persistent_workers=workers > 0,
    )
    return iter(loader)


def floor_batches(config: str, corpus: str, workers: int, batch_size: int, reads: str = "default",
                  stamp: ItemStamp | None = None):
    # Not stamped: with 0 workers it makes exactly what it hands over; with workers, the window's
    # edges are not corrected (the harness runs the floor with 0 workers only).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import floor

    cfg = dict(CONFIGS[config], batch_size=batch_size)
    folders = _folders(corpus)
    if config == "random":  # one pool of files, like create_audio_dataset(folders)
        groups = {"all": sorted(f for folder in folders.values() for f in floor.list_files(folder))}
        weights = {}
    else:
        groups = {g: floor.list_files(folder) for g, folder in folders.items()}
        weights = WEIGHTS
    return floor.floor_batches(groups, weights, cfg, workers=workers)


def _all_files(corpus: str) -> list[str]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import floor

    return sorted(f for folder in _folders(corpus).values() for f in floor.list_files(folder))


class _PlainDataset:
    """Item ``i``: a random file, a random 3 s excerpt, mono, soxr HQ to the target rate, padded.

    Seeded per item (``default_rng([0, i])``), so any worker computes the same item.
    """

    def __init__(self, files: list[str], duration: float, rate: int, stamp: ItemStamp | None = None):
        self.files, self.duration, self.rate, self.stamp = files, duration, rate, stamp

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        import numpy as np
        import soundfile
        import soxr

        if self.stamp is not None:
            self.stamp(None)

        rng = np.random.default_rng([0, i])
        path = self.files[int(rng.integers(len(self.files)))]
        with soundfile.SoundFile(path) as f:
            rate, frames = f.samplerate, f.frames
            need = int(self.duration * rate + 0.999999) + 1
            f.seek(int(rng.integers(0, max(frames - need, 0) + 1)))
            x = f.read(need, dtype="float32", always_2d=True)
        x = x.mean(axis=1, keepdims=True, dtype=np.float32)
        if rate != self.rate:
            x = soxr.resample(x, rate, self.rate)
        target = int(round(self.duration * self.rate))
        out = np.zeros((1, target), dtype=np.float32)
        n = min(target, x.shape[0])
        out[0, :n] = x[:n, 0]
        return out


class _LhotseDataset:
    """Item ``i``: a random cut of the ``CutSet``, truncated to a random 3 s, resampled, loaded, mono, padded."""

    def __init__(self, cuts: list, duration: float, rate: int, stamp: ItemStamp | None = None):
        self.cuts, self.duration, self.rate, self.stamp = cuts, duration, rate, stamp

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        import numpy as np

        if self.stamp is not None:
            self.stamp(None)

        rng = np.random.default_rng([0, i])
        cut = self.cuts[int(rng.integers(len(self.cuts)))]
        if cut.duration > self.duration:
            cut = cut.truncate(offset=float(rng.uniform(0.0, cut.duration - self.duration)), duration=self.duration)
        cut = cut.resample(self.rate)
        audio = cut.load_audio()  # (channels, samples)
        x = audio.mean(axis=0, dtype=np.float32)
        target = int(round(self.duration * self.rate))
        out = np.zeros((1, target), dtype=np.float32)
        n = min(target, x.shape[0])
        out[0, :n] = x[:n]
        return out


def _loader(dataset, workers: int, batch_size: int):
    import torch
    import torch.utils.data

    if not workers:
        # DataLoader workers run torch single-threaded; in-process, torch's intra-op pool
        # (default_collate's torch.stack) would otherwise keep a second core spinning.
        torch.set_num_threads(1)

    return iter(torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=False,
                                            persistent_workers=workers > 0))


def plain_batches(config: str, corpus: str, workers: int, batch_size: int, reads: str = "default",
                  stamp: ItemStamp | None = None):
    cfg = CONFIGS[config]
    return _loader(_PlainDataset(_all_files(corpus), cfg["duration"], cfg["sample_rate"], stamp), workers, batch_size)


def lhotse_batches(config: str, corpus: str, workers: int, batch_size: int, reads: str = "default",
                   stamp: ItemStamp | None = None):
    from lhotse import CutSet, Recording, RecordingSet

    cfg = CONFIGS[config]
    recordings = RecordingSet.from_recordings(Recording.from_file(p) for p in _all_files(corpus))
    cuts = list(CutSet.from_manifests(recordings=recordings))
    return _loader(_LhotseDataset(cuts, cfg["duration"], cfg["sample_rate"], stamp), workers, batch_size)


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads) and every live descendant.

    Reaped children count too (``children_user``/``children_system``), so a worker that
    exits inside the window is not lost.
    """
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += c.user + c.system
    return total


def _quiet(stamps: str | None, *, settle: float = 0.3, idle_cpu: float = 0.03, timeout: float = 60.0) -> tuple[float, int]:
    """Waits until the tree makes no item and spends (almost) no CPU for ``settle`` seconds.

    Returns ``(tree CPU seconds, items stamped)`` at that point. Workers are then blocked
    on full buffers (what they hold is whole batches) or idle; what is left is their idle
    polling (Grain's puts wake every 0.5 s), under ``idle_cpu`` seconds per ``settle``.
    """
    deadline = time.monotonic() + timeout
    cpu, made = tree_cpu_seconds(), _made(stamps)
    while True:
        time.sleep(settle)
        cpu2, made2 = tree_cpu_seconds(), _made(stamps)
        if (made2 == made and cpu2 - cpu < idle_cpu) or time.monotonic() > deadline:
            return cpu2, made2
        cpu, made = cpu2, made2


def _batch_items(batch) -> int:
    wave = getattr(batch, "waveform", None)
    if wave is None and isinstance(batch, dict):
        wave = batch.get("waveform")
    if wave is None:
        wave = batch
    return int(wave.shape[0])


def _versions(impl: str) -> dict:
    out = {"python": sys.version.split()[0]}
    import numpy
    import soundfile
    import soxr

    out.update(numpy=numpy.__version__, soundfile=soundfile.__version__, soxr=soxr.__version__,
               libsndfile=soundfile.__libsndfile_version__)
    if impl in ("plain", "lhotse"):
        import torch

        out["torch"] = torch.__version__
        if impl == "lhotse":
            import lhotse

            out["lhotse"] = lhotse.__version__
        return out
    if impl == "floor":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import floor

        out["meter"] = floor.meter_name()
    else:
        import audiotree
        import grain
        import jax

        out.update(audiotree=getattr(audiotree, "__version__", "?"), audiotree_path=os.path.dirname(audiotree.__file__),
                   jax=jax.__version__)
        try:
            from importlib.metadata import version

            out["grain"] = version("grain")
        except Exception:  # pragma: no cover
            out["grain"] = getattr(grain, "__version__", "?")
    if impl == "torch":
        import torch

        out["torch"] = torch.__version__
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=("ours", "reference", "floor", "torch", "plain", "lhotse"), required=True)
    ap.add_argument("--reads", choices=("sync", "default"), default="default")
    ap.add_argument("--config", choices=tuple(CONFIGS), required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)

    if args.impl == "reference":
        # The published 1.0 reads absl flags in Grain's prefetch code; a plain script must mark them parsed.
        from absl import flags

        flags.FLAGS.mark_as_parsed()
    make = {"ours": grain_batches, "reference": grain_batches, "torch": torch_batches, "floor": floor_batches,
            "plain": plain_batches, "lhotse": lhotse_batches}[args.impl]
    stamps = None
    stamp = None
    if args.impl != "floor":
        fd, stamps = tempfile.mkstemp(prefix="audiotree_bench_", suffix=".stamps")
        os.close(fd)
        stamp = ItemStamp(stamps)
    try:
        it = make(args.config, args.corpus, args.workers, args.batch_size, args.reads, stamp=stamp)
        first = next(it)
        print(FIRST, flush=True)
        # With workers, batches come round-robin: wait until every worker has delivered one
        # (and the pool is past its start-up) before the clock starts.
        consumed = _batch_items(first)
        for _ in range(2 * args.workers - 1 if args.workers else 0):
            consumed += _batch_items(next(it))
        cpu0, made0 = _quiet(stamps)
        items = 0
        t0, w0 = time.perf_counter(), time.time()
        for _ in range(args.batches):
            items += _batch_items(next(it))
        elapsed = time.perf_counter() - t0
        cpu1, made1 = _quiet(stamps)
        if stamps:
            # Producers start from full buffers: time what they made, up to the last item (the file's mtime).
            elapsed = max(elapsed, os.stat(stamps).st_mtime - w0)
    finally:
        if stamps:
            os.unlink(stamps)
    cpu = cpu1 - cpu0
    made = made1 - made0 if stamps else items
    result = {
        "items": items, "seconds": elapsed, "items_per_s": made / elapsed, "cpu_seconds": cpu,
        "items_made": made, "items_per_cpu_s": made / cpu if cpu > 0 else None,
        # Items made but not yet taken at each quiet point (0 for a synchronous pipeline).
        "ahead": [made0 - consumed if stamps else 0, made1 - consumed - items if stamps else 0],
        "first_batch_items": _batch_items(first), "versions": _versions(args.impl),
    }
    print(RESULT, json.dumps(result), flush=True)
    sys.stdout.flush()
    _shutdown(it)


def _shutdown(it=None) -> None:
    """Ends this run's worker processes, then exits without interpreter teardown.

    Grain's and torch's worker pools can take seconds to wind down (and would keep
    the harness' stdout pipe open if orphaned); the harness also ends the whole
    process group it started, as a second line of defence. The iterator is closed
    once its workers are gone, so that a pipeline holding shared memory a killed
    worker made but never sent (audiotree's batch slots) unlinks it: the harness'
    kill of the group would otherwise also take the resource tracker that would.
    """
    import multiprocessing
    import threading

    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(timeout=5)
    close = getattr(it, "close", None)
    if close is not None:
        closer = threading.Thread(target=close, daemon=True)
        closer.start()
        closer.join(timeout=10)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
