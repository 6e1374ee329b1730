"""Regenerates docs/index.md's quality pictures: docs/images/quality-{before,after}.png.

    python docs/images/make_quality_images.py

It writes the synthetic cases of :mod:`audiotree.quality_synth` (upsampled,
clipped, DC-shifted, noisy and mostly silent files beside clean ones) to a
temporary folder, indexes them, and draws ``audiotree scan INDEX --plot`` of
the whole corpus (before) and of the files the cleaning expression of
docs/index.md keeps (after), as 256-colour PNGs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import soundfile

HERE = Path(__file__).resolve().parent
CLEAN = "bandwidth_hz >= 19845 and clip_share < 1e-4 and silence_share < 0.5"


def _scan_plot(index: Path, out: Path) -> None:
    plot = index.with_suffix(".png")
    subprocess.run([sys.executable, "-m", "audiotree.cli", "scan", str(index), "--plot", str(plot)], check=True,
                   stdout=subprocess.DEVNULL)
    quality = plot.with_name(plot.stem + "-quality.png")
    from PIL import Image

    Image.open(quality).convert("RGB").quantize(256).save(out, optimize=True)


def main() -> None:
    from audiotree.index import build_index, open_index
    from audiotree.quality_synth import RATE, quality_cases
    from audiotree.sources import Corpus, create_audio_dataset

    root = Path(tempfile.mkdtemp())
    try:
        (root / "all").mkdir()
        for case in quality_cases(seconds=4.0):
            soundfile.write(root / "all" / f"{case.name}.wav", case.samples, RATE, subtype="PCM_16")
        build_index(root / "all", root / "before.parquet", executor="serial", show_progress=False)
        rows = len(open_index(root / "before.parquet").table)
        ds = create_audio_dataset(corpus=Corpus(index=root / "before.parquet", where=CLEAN), num_epochs=1,
                                  shuffle=False, sample_rate=16_000, duration=1.0)
        kept = sorted({ds[i].filepath[0] for i in range(len(ds))})  # the rows Corpus(where=CLEAN) keeps
        (root / "clean").mkdir()
        for path in kept:
            shutil.copy(path, root / "clean")
        build_index(root / "clean", root / "after.parquet", executor="serial", show_progress=False)
        _scan_plot(root / "before.parquet", HERE / "quality-before.png")
        _scan_plot(root / "after.parquet", HERE / "quality-after.png")
        print(f"{rows} files before, {len(kept)} after: {HERE / 'quality-before.png'}, {HERE / 'quality-after.png'}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
