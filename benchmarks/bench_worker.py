"""One benchmark run, in its own interpreter. Started by ``benchmarks/run.py``.

Runs under the dev venv (``ours``, ``torch``, ``floor``) or the reference venv
(``reference``), so it imports nothing from this repository except the sibling
``floor`` module, and only the public dataset API of whichever ``audiotree`` the
interpreter has installed.

Protocol on stdout (one line each, flushed):

* ``AUDIOTREE_BENCH_FIRST_BATCH`` right after the first batch arrives (the
  harness times interpreter start to this line from outside);
* ``AUDIOTREE_BENCH_RESULT {json}`` at the end: items/s over ``--batches``
  batches after the warm-up (the first batch; with ``k`` workers, the first ``2k``), CPU seconds of this process over the
  same window, and the versions of what ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

FIRST = "AUDIOTREE_BENCH_FIRST_BATCH"
RESULT = "AUDIOTREE_BENCH_RESULT"
GROUPS = ("speech", "music", "effects")
WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}
CONFIGS = {
    "random": dict(strategy="random", duration=3.0, sample_rate=44_100),
    "loudest": dict(strategy="loudest", duration=3.0, sample_rate=48_000, num_tries=5, lufs_cutoff=-40.0),
}


def _folders(corpus: str) -> dict[str, str]:
    return {g: os.path.join(corpus, g) for g in GROUPS}


def grain_dataset(config: str, corpus: str):
    """The map dataset a user writes for ``config``, with the installed audiotree."""
    from audiotree.sources import ExcerptConfig, create_audio_dataset, create_balanced_audio_dataset

    cfg = CONFIGS[config]
    folders = _folders(corpus)
    if config == "random":
        return create_audio_dataset(list(folders.values()), duration=cfg["duration"], sample_rate=cfg["sample_rate"], num_epochs=None)
    excerpt = ExcerptConfig(strategy="loudest", lufs_cutoff=cfg["lufs_cutoff"], num_tries=cfg["num_tries"])
    return create_balanced_audio_dataset(
        folders, weights=WEIGHTS, duration=cfg["duration"], sample_rate=cfg["sample_rate"], excerpt=excerpt,
    )


def grain_batches(config: str, corpus: str, workers: int, batch_size: int):
    import grain

    from audiotree import AudioTree

    it = grain_dataset(config, corpus).to_iter_dataset().batch(batch_size, batch_fn=AudioTree.batch)
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(it)


# Names the torch adapter may use; the first that exists wins.
_TORCH_LOADERS = ("create_dataloader", "make_dataloader", "dataloader", "DataLoader", "data_loader", "as_dataloader", "to_dataloader")
_TORCH_DATASETS = ("TorchDataset", "AudioTorchDataset", "MapStyleDataset", "as_torch_dataset", "to_torch_dataset", "to_torch", "torch_dataset")
_TORCH_COLLATES = ("collate", "collate_fn", "collate_audio_trees", "collate_trees")


def torch_batches(config: str, corpus: str, workers: int, batch_size: int):
    """Our ``audiotree.torch`` path: a torch ``DataLoader`` over the same dataset."""
    import audiotree.torch as att  # ImportError -> the harness reports n/a

    ds = grain_dataset(config, corpus)
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


def floor_batches(config: str, corpus: str, workers: int, batch_size: int):
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
    ap.add_argument("--impl", choices=("ours", "reference", "floor", "torch"), required=True)
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
    make = {"ours": grain_batches, "reference": grain_batches, "torch": torch_batches, "floor": floor_batches}[args.impl]
    it = make(args.config, args.corpus, args.workers, args.batch_size)
    first = next(it)
    print(FIRST, flush=True)
    # With workers, batches come round-robin: wait until every worker has delivered one
    # (and the pool is past its start-up) before the clock starts.
    for _ in range(2 * args.workers - 1 if args.workers else 0):
        next(it)
    items = 0
    cpu0, t0 = os.times(), time.perf_counter()
    for _ in range(args.batches):
        items += _batch_items(next(it))
    elapsed = time.perf_counter() - t0
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    result = {
        "items": items, "seconds": elapsed, "items_per_s": items / elapsed, "cpu_seconds": cpu,
        "first_batch_items": _batch_items(first), "versions": _versions(args.impl),
    }
    print(RESULT, json.dumps(result), flush=True)
    sys.stdout.flush()
    _shutdown()


def _shutdown() -> None:
    """Ends this run's worker processes, then exits without interpreter teardown.

    Grain's and torch's worker pools can take seconds to wind down (and would keep
    the harness' stdout pipe open if orphaned); the harness also ends the whole
    process group it started, as a second line of defence.
    """
    import multiprocessing

    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(timeout=5)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
