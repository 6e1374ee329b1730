"""What measuring quality costs an index build, and how accurate the measures are.

Cost: the per-file work of a build with loudness (decode, K-weighted profile)
is timed in CPU seconds with and without the quality meter
(:mod:`audiotree.dsp.quality`) fed by the same decode pass, on synthetic
44.1 kHz files (WAV and FLAC, mono and stereo: the formats whose decoding is
cheapest, so the meter's share is largest). Everything else a build does is
the same for both. Accuracy: each case of :mod:`audiotree.quality_synth`
written as a 16-bit WAV, indexed by ``build_index``, its columns beside the
truth.

    PYTHONPATH=src python benchmarks/quality_cost.py [--seconds 60] [--files 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile


def _corpus(folder: Path, files: int, seconds: float) -> list[Path]:
    from audiotree.synth import synthesize

    rng = np.random.default_rng(0)
    out = []
    for k in range(files):
        channels = 1 + k % 2
        fmt = ("wav", "flac")[(k // 2) % 2]
        x = synthesize(("speech", "music", "effects")[k % 3], seconds, 44_100, channels, rng)
        path = folder / f"f{k:03d}-{channels}ch.{fmt}"
        soundfile.write(path, x, 44_100, subtype="PCM_16")
        out.append(path)
    return out


def _profile_cpu(paths: list[Path], quality: bool, repeats: int) -> float:
    from audiotree.index.profile import file_profile
    from audiotree.index.quality import quality_meter
    from audiotree.io import AudioFile

    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for path in paths:
            with AudioFile(str(path)) as f:
                if quality:
                    meter = quality_meter(f.info)
                    profile = file_profile(f, on_frames=meter.push)
                    meter.result(profile)
                else:
                    file_profile(f)
        best = min(best, time.process_time() - start)
    return best


def _build_cpu(paths: list[Path], repeats: int) -> tuple[float, float]:
    """CPU of the build's per-file work (``index_file``: stat, open, decode, profile, quality, FLAC seek scan), and
    of the quality meter alone on the same frames (decoded beforehand): the build without quality costs the
    difference."""
    from audiotree.index._work import index_file
    from audiotree.index.profile import profile_step
    from audiotree.index.quality import quality_meter
    from audiotree.io import AudioFile

    full = meter_cpu = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for path in paths:
            index_file(str(path), None, loudness=True, mono=True)
        full = min(full, time.process_time() - start)
    chunks = []
    for path in paths:
        with AudioFile(str(path)) as f:
            step = profile_step(f.info.sample_rate)
            usable = f.info.frames // step * step
            chunks.append((f.info, [f.read(i, min(200 * step, usable - i)) for i in range(0, usable, 200 * step)]))
    for _ in range(repeats):
        start = time.process_time()
        for info, frames in chunks:
            meter = quality_meter(info)
            for x in frames:
                meter.push(x)
            meter.result()
        meter_cpu = min(meter_cpu, time.process_time() - start)
    return full, meter_cpu


def cost(files: int, seconds: float, repeats: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        paths = _corpus(Path(tmp), files, seconds)
        _profile_cpu(paths[:2], True, 1)  # warm up imports and caches
        without = _profile_cpu(paths, False, repeats)
        with_q = _profile_cpu(paths, True, repeats)
        full, meter = _build_cpu(paths, repeats)
    corpus = f"{files} files x {seconds:g} s (44.1 kHz 16-bit WAV/FLAC, mono/stereo)"
    return (f"| decode + profile | {corpus} | {without:.3f} s | {with_q:.3f} s | {with_q / without:.3f} |\n"
            f"| per-file build work (`index_file`) | {corpus} | {full - meter:.3f} s | {full:.3f} s | "
            f"{full / (full - meter):.3f} |\n\n"
            f"CPU seconds for {files * seconds:g} s of audio, best of {repeats}. The second line's cost without "
            f"quality is the build's minus the meter's own CPU ({meter:.3f} s) on the same frames.")


def accuracy(seconds: float) -> str:
    from audiotree.index import build_index, open_index
    from audiotree.quality_synth import RATE, quality_cases

    lines = ["| case | column | truth | measured | error |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "audio"
        root.mkdir()
        cases = quality_cases(seconds)
        for case in cases:
            soundfile.write(root / f"{case.name}.wav", case.samples, RATE, subtype="PCM_16")
        out = Path(tmp) / "q.parquet"
        build_index(str(root), out, executor="serial", show_progress=False)
        ix = open_index(out, columns="all")
        names = [Path(p).stem for p in ix.paths()]
        for case in cases:
            row = names.index(case.name)
            for column, truth in case.truth.items():
                got = float(ix.column(column)[row])
                error = got - truth
                shown = f"{100 * error / truth:+.1f} %" if column in ("clip_share", "bandwidth_hz") else f"{error:+.4f}"
                lines.append(f"| {case.name} | {column} | {truth:.6g} | {got:.6g} | {shown} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| work | corpus | without quality (CPU) | with quality (CPU) | ratio |\n|---|---|---|---|---|")
    print(cost(args.files, args.seconds, args.repeats))
    print()
    print(accuracy(10.0))


if __name__ == "__main__":
    main()
