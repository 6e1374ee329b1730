"""Where the time goes per item: our random and loudest paths, and the floor's.

    python benchmarks/profile_paths.py                       # both configs, ours + floor
    python benchmarks/profile_paths.py --config loudest --items 640 --cprofile /tmp/loudest.prof

The pipeline runs synchronously in this thread (``ReadOptions(num_threads=0,
prefetch_buffer_size=0)``, no workers) so every cost lands on one clock. Key
functions are wrapped with timers that account *exclusive* time (a nested timed
call is subtracted from its caller), so the categories add up to the CPU time of the thread
(``time.thread_time``: the machine is shared, wall time would measure its load):

* ``open + header``: ``AudioFile(path)`` (libsndfile open, format probing);
* ``decode``: ``AudioFile.read`` (seek + decode + finiteness check), with the
  seconds of audio decoded per item and the split by format;
* ``energy map``: the loudest search's unfiltered block energies and window estimates;
* ``meter``: the exact BS.1770 meter (``audiotree.dsp.loudness.measure``);
* ``resample``: soxr via ``audiotree.dsp.resample.resample``;
* ``finish``: mono downmix, layout, padding (``audiotree.io.excerpt.finish_frames`` minus resample);
* ``tree``: building the batch-of-1 ``AudioTree`` (provenance strings etc.);
* ``excerpt logic``: what is left inside ``ExcerptLoader.random_map`` (search loop, bookkeeping);
* ``batch``: ``AudioTree.batch`` for 32 items;
* ``grain + rest``: the remainder of the CPU time (Grain's map/shuffle/mix/batch
  machinery, per-index RNG construction, the harness loop).

The floor loop gets the same treatment (``soundfile`` open/read, ``soxr``,
libloudness). Wrapping adds ~1 µs per call; ``--cprofile`` gives a function
level view instead (with cProfile's own, larger, overhead).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_worker  # noqa: E402
import corpus as corpus_mod  # noqa: E402


# CPU time of this thread, not wall time: the machine is shared, and the pipeline runs
# synchronously in this one thread, so its CPU time is the work it does.
_now = time.thread_time


class Clock:
    """Exclusive-time accounting over nested wrapped calls."""

    def __init__(self):
        self.total = collections.Counter()
        self.calls = collections.Counter()
        self.extra = collections.Counter()
        self._stack: list[list] = []

    def reset(self):
        self.total.clear()
        self.calls.clear()
        self.extra.clear()

    def wrap(self, name, fn, after=None):
        clock = self

        def wrapped(*args, **kwargs):
            frame = [_now(), 0.0]
            clock._stack.append(frame)
            try:
                result = fn(*args, **kwargs)
            finally:
                elapsed = _now() - frame[0]
                clock._stack.pop()
                clock.total[name] += elapsed - frame[1]
                clock.calls[name] += 1
                if clock._stack:
                    clock._stack[-1][1] += elapsed
            if after is not None:
                after(args, result)
            return result

        wrapped.__wrapped__ = fn
        return wrapped


def patch(obj, attr, clock, name, after=None):
    setattr(obj, attr, clock.wrap(name, getattr(obj, attr), after))


def instrument_ours(clock: Clock) -> None:
    import importlib

    # import_module, not `import a.b as b`: packages may re-export a function under the submodule's name.
    core, loudness, resample, search, reading, io, decode, loading = (
        importlib.import_module(f"audiotree.{m}")
        for m in ("core", "dsp.loudness", "dsp.resample", "excerpts.search", "io.excerpt", "io", "io.decode",
                  "sources.loading")
    )

    def count_decoded(args, result):
        f = args[0]
        ext = os.path.splitext(f.path)[1].lower()
        seconds = result.shape[0] / f.info.sample_rate
        clock.extra["decoded_seconds"] += seconds
        clock.extra[f"decode_s_{ext}"] += seconds

    assert io.AudioFile is decode.AudioFile
    patch(decode.AudioFile, "__init__", clock, "open + header")
    patch(decode.AudioFile, "read", clock, "decode", after=count_decoded)
    # The loudest search (excerpts.search) and the read (io.excerpt) look these up as module globals.
    patch(search, "_block_energy", clock, "energy map")
    patch(search, "_gated_estimate", clock, "energy map")
    patch(search, "_loudness_ceiling", clock, "energy map")
    patch(search, "downmix", clock, "finish (mono, pad)")
    patch(search, "measure", clock, "meter")
    patch(loudness, "measure", clock, "meter")
    patch(resample, "resample", clock, "resample")
    patch(reading, "finish_frames", clock, "finish (mono, pad)")
    search.finish_frames = reading.finish_frames  # the same timed function, under the name search imported
    core.AudioTree.from_clip = classmethod(clock.wrap("tree (AudioTree.create)", core.AudioTree.from_clip.__func__))
    patch(loading.ExcerptLoader, "random_map", clock, "excerpt logic")
    core.AudioTree.batch = staticmethod(clock.wrap("batch (AudioTree.batch)", core.AudioTree.batch))


def instrument_floor(clock: Clock, floor) -> None:
    import soundfile
    import soxr

    class TimedSoundFile(soundfile.SoundFile):
        pass

    TimedSoundFile.__init__ = clock.wrap("open + header", soundfile.SoundFile.__init__)
    TimedSoundFile.seek = clock.wrap("decode", soundfile.SoundFile.seek)
    TimedSoundFile.read = clock.wrap("decode", soundfile.SoundFile.read,
                                     after=lambda a, r: clock.extra.__setitem__("decoded_seconds", clock.extra["decoded_seconds"] + r.shape[0] / a[0].samplerate))
    floor.soundfile.SoundFile = TimedSoundFile
    floor.soxr = type("soxr", (), {"resample": staticmethod(clock.wrap("resample", soxr.resample))})
    floor._meter = clock.wrap("meter", floor._meter)
    floor._item = clock.wrap("excerpt logic", floor._item)
    floor.np.stack = clock.wrap("batch (np.stack)", floor.np.stack)


def profile(impl: str, config: str, corpus_dir: str, items: int, cprofile: str | None) -> dict:
    clock = Clock()
    batch_size = 32
    if impl == "ours":
        import grain

        from audiotree import AudioTree

        instrument_ours(clock)
        sync = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        it = iter(bench_worker.grain_dataset(config, corpus_dir).to_iter_dataset(sync).batch(batch_size, batch_fn=AudioTree.batch))
    else:
        import floor

        instrument_floor(clock, floor)
        it = bench_worker.floor_batches(config, corpus_dir, 0, batch_size)
    next(it)  # warm-up
    clock.reset()
    batches = max(1, items // batch_size)
    prof = None
    if cprofile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = _now()
    for _ in range(batches):
        next(it)
    wall = _now() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(cprofile)
    n = batches * batch_size
    return {"impl": impl, "config": config, "items": n, "wall": wall, "total": dict(clock.total),
            "calls": dict(clock.calls), "extra": dict(clock.extra)}


ORDER = ("open + header", "decode", "energy map", "meter", "resample", "finish (mono, pad)", "tree (AudioTree.create)",
         "excerpt logic", "batch (AudioTree.batch)", "batch (np.stack)")


def report(res: dict) -> str:
    n, wall = res["items"], res["wall"]
    lines = [f"{res['impl']} / {res['config']}: {n} items in {wall:.2f} s = {n / wall:.1f} items/CPU-s "
             f"({1000 * wall / n:.2f} CPU ms/item, one thread, no workers)",
             f"  {'category':28s} {'ms/item':>8s} {'share':>6s} {'calls/item':>10s}"]
    accounted = 0.0
    for name in ORDER:
        if name in res["total"]:
            t = res["total"][name]
            accounted += t
            lines.append(f"  {name:28s} {1000 * t / n:8.3f} {100 * t / wall:5.1f}% {res['calls'][name] / n:10.2f}")
    rest = wall - accounted
    lines.append(f"  {'grain + rest':28s} {1000 * rest / n:8.3f} {100 * rest / wall:5.1f}%")
    extra = res["extra"]
    if extra.get("decoded_seconds"):
        split = ", ".join(f"{k[9:]} {v / n:.2f}" for k, v in sorted(extra.items()) if k.startswith("decode_s_"))
        lines.append(f"  audio decoded per item: {extra['decoded_seconds'] / n:.2f} s" + (f" (by format: {split})" if split else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=("random", "loudest", "both"), default="both")
    ap.add_argument("--impl", choices=("ours", "floor", "both"), default="both")
    ap.add_argument("--items", type=int, default=1280)
    ap.add_argument("--corpus-dir", default=str(HERE / ".corpus" / "full"))
    ap.add_argument("--cprofile", default=None, help="also write cProfile stats here (one config/impl only)")
    args = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if os.path.basename(os.path.normpath(args.corpus_dir)) == "real":
        import real_corpus

        real_corpus.build_real_corpus(args.corpus_dir)
    else:
        corpus_mod.build_corpus(args.corpus_dir, corpus_mod.FULL_SPEC)
    configs = ("random", "loudest") if args.config == "both" else (args.config,)
    impls = ("ours", "floor") if args.impl == "both" else (args.impl,)
    if args.cprofile and len(configs) * len(impls) > 1:
        ap.error("--cprofile needs one --config and one --impl")
    for config in configs:
        for impl in impls:
            # Each in a fresh interpreter would be cleaner; instrumenting is idempotent per process, so fork one.
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    print(report(profile(impl, config, args.corpus_dir, args.items, args.cprofile)), flush=True)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
