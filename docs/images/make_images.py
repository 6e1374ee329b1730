"""Regenerates the README's pictures: docs/images/{preview,scan,bench}.png.

    python docs/images/make_images.py        # needs matplotlib and Debian's chromium

It writes a small two-class corpus (tones against noise bursts, with digital
silence between them) to a temporary folder, runs the three documented commands
on it, takes a headless-Chromium screenshot of the preview page (opened from
disk), and stores every picture as a 256-colour PNG so each stays well under
150 KB. The bench numbers are measured on the machine that runs this script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile

HERE = Path(__file__).resolve().parent
RATE = 16_000


def _corpus(root: Path) -> dict[str, Path]:
    """Six tone files and six noise files, 3-9 s, with stretches of digital silence."""
    rng = np.random.default_rng(19)
    groups = {"tones": root / "tones", "noise": root / "noise"}
    for folder in groups.values():
        folder.mkdir(parents=True)
    for i in range(6):
        seconds = rng.uniform(3, 9)
        t = np.arange(int(seconds * RATE)) / RATE
        gate = (np.sin(2 * np.pi * rng.uniform(0.15, 0.4) * t + rng.uniform(0, 6)) > -0.4).astype(np.float32)
        f0 = rng.uniform(150, 500) * (1 + 0.3 * np.sin(2 * np.pi * 0.3 * t))  # a slow glide
        phase = 2 * np.pi * np.cumsum(f0) / RATE
        tone = sum(0.5 / k * np.sin(k * phase) for k in range(1, 6)) * gate * rng.uniform(0.2, 0.6)
        soundfile.write(groups["tones"] / f"tone_{i:02d}.wav", tone.astype(np.float32), RATE)
        seconds = rng.uniform(3, 9)
        n = int(seconds * RATE)
        burst = (rng.uniform(size=n // 800).repeat(800)[:n] > 0.35).astype(np.float32)
        burst = np.pad(burst, (0, n - burst.size))
        noise = rng.standard_normal(n) * burst * rng.uniform(0.02, 0.3)
        soundfile.write(groups["noise"] / f"noise_{i:02d}.flac", noise.astype(np.float32), RATE)
    return groups


def _cli(cwd: Path, *args: object) -> None:
    command = [sys.executable, "-m", "audiotree.cli", *map(str, args)]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, cwd=cwd)  # relative paths: the captions name corpus/tones, not /tmp/...


def _shrink(path: Path) -> None:
    """Rewrites ``path`` as a 256-colour PNG (the plots have few colours; screenshots lose little)."""
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    print(f"{path.relative_to(HERE.parent.parent)}: {path.stat().st_size / 1024:.0f} KB")


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is needed for the preview screenshot: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        groups = _corpus(work / "corpus")
        sources = [f"{name}={folder.relative_to(work)}" for name, folder in groups.items()]
        _cli(work, "scan", *sources, "--duration", "4", "--lufs-cutoff", "-20", "--plot", HERE / "scan.png")
        _cli(work, "bench", *sources, "--duration", "1", "--sample-rate", str(RATE), "--workers", "0,1,2",
             "--threads", "0,2", "--buffers", "1,4", "--batches", "8", "--batch-size", "16", "--plot", HERE / "bench.png")
        _cli(work, "preview", *sources, "--out", work / "preview", "-n", "4", "--duration", "1.5", "--sample-rate", str(RATE),
             "--strategy", "loudest", "--lufs-cutoff", "-30")
        shot = HERE / "preview.png"
        subprocess.run([
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--mute-audio", f"--user-data-dir={work / 'profile'}",
            "--hide-scrollbars", "--virtual-time-budget=10000", "--window-size=1390,1060", f"--screenshot={shot}",
            (work / "preview" / "index.html").as_uri(),
        ], check=True, capture_output=True)
    for name in ("preview.png", "scan.png", "bench.png"):
        _shrink(HERE / name)


if __name__ == "__main__":
    main()
