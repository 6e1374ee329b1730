"""The benchmark corpus: deterministic, synthetic, shaped like a real mixed corpus.

Signals come from :func:`audiotree.synth.synthesize` (the same synthesiser the
demo and the tests use); this module only decides *which* files to write so the
duration mix is exact, which ``CorpusSpec``/``write_corpus`` cannot promise:

* three groups (``speech``, ``music``, ``effects``), ``files_per_group`` each;
* per group: half the files are short (``< 2 s``), a quarter medium
  (2 to 30 s) and a quarter long (30 to 120 s);
* WAV, FLAC, MP3 and OGG/Vorbis; 16, 22.05, 44.1 and 48 kHz; mono and stereo,
  rotated so every duration class holds every format;
* near-silent stretches everywhere (the synthesiser's gaps), and a third of the
  long and medium files are "mostly silent": everything outside one loud passage
  is attenuated by 60 dB, like a field recording or an interview with long
  pauses. That is what makes a loudness-based excerpt search work for a living.

The corpus is cached: ``manifest.json`` records the spec, and a folder whose
manifest matches (and whose files all exist with the recorded sizes) is reused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np

GROUPS = ("speech", "music", "effects")
WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}
_FORMATS = {  # extension -> (libsndfile format, subtype)
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "ogg": ("OGG", "VORBIS"),
}
_EXTS = tuple(_FORMATS)
_RATES = (16_000, 22_050, 44_100, 48_000)
_VERSION = 1  # bump when the layout below changes


@dataclasses.dataclass(frozen=True)
class BenchCorpusSpec:
    files_per_group: int = 24  # multiple of 4: 1/2 short, 1/4 medium, 1/4 long
    short: tuple[float, float] = (0.4, 1.95)
    medium: tuple[float, float] = (2.0, 30.0)
    long: tuple[float, float] = (30.0, 120.0)
    quiet_every: int = 3  # every n-th medium/long file is mostly silent
    seed: int = 2024
    exts: tuple[str, ...] = _EXTS  # rotated per duration class (repeat one to weight it)
    rates: tuple[int, ...] = _RATES  # rotated likewise
    mp3_rates: tuple[int, ...] | None = None  # MP3's own rates when ``rates`` exceed MPEG's 48 kHz
    stereo_only: bool = False


FULL_SPEC = BenchCorpusSpec()
QUICK_SPEC = BenchCorpusSpec(files_per_group=4, medium=(3.0, 6.0), long=(30.5, 32.0))
#: Corpus 3 (issue 27): high rates, stereo, MP3-heavy, files of 1 to 10 minutes. MPEG audio stops at
#: 48 kHz, so the MP3s (half the files) are 44.1/48 kHz and the rest 88.2/96 kHz.
HIRES_SPEC = BenchCorpusSpec(files_per_group=4, short=(60.0, 120.0), medium=(120.0, 300.0), long=(300.0, 600.0),
                             seed=2027, exts=("mp3", "flac", "mp3", "ogg", "mp3", "wav"), rates=(88_200, 96_000),
                             mp3_rates=(44_100, 48_000), stereo_only=True)


def _plan(spec: BenchCorpusSpec) -> list[dict]:
    """The file list: group, name, class, seconds, rate, channels, format, quiet."""
    if spec.files_per_group % 4:
        raise ValueError("files_per_group must be a multiple of 4.")
    plan = []
    n = spec.files_per_group
    classes = ["short"] * (n // 2) + ["medium"] * (n // 4) + ["long"] * (n // 4)
    for g_index, group in enumerate(GROUPS):
        rng = np.random.default_rng([spec.seed, g_index, 0])
        counters = {"short": 0, "medium": 0, "long": 0}
        for i, cls in enumerate(classes):
            k = counters[cls]
            counters[cls] += 1
            lo, hi = getattr(spec, cls)
            ext = spec.exts[(k + g_index) % len(spec.exts)]
            rates = spec.mp3_rates if ext == "mp3" and spec.mp3_rates else spec.rates
            plan.append(
                {
                    "group": group,
                    "class": cls,
                    "seconds": float(rng.uniform(lo, hi)),
                    # Rotate per class so every class sees every format, rate and layout.
                    "ext": ext,
                    "rate": rates[(k // 2 + g_index + (cls == "long")) % len(rates)],
                    "channels": 2 if spec.stereo_only else 1 + (k + g_index + (cls == "medium")) % 2,
                    "quiet": cls != "short" and k % spec.quiet_every == spec.quiet_every - 1,
                    "index": i,
                }
            )
    for entry in plan:
        entry["name"] = f"{entry['group']}_{entry['index']:03d}_{entry['class']}.{entry['ext']}"
    return plan


def _mostly_silent(data: np.ndarray, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Keeps one loud passage of 4 to 12 s, attenuates the rest by 60 dB."""
    n = data.shape[0]
    loud = min(n, int(rng.uniform(4.0, 12.0) * rate))
    start = int(rng.integers(0, max(n - loud, 0) + 1))
    gain = np.full(n, 1e-3, dtype=np.float32)
    gain[start : start + loud] = 1.0
    return data * gain[:, None]


def _manifest(spec: BenchCorpusSpec) -> dict:
    import hashlib

    import audiotree.synth

    # The synthesiser's code is part of the corpus' identity: a change to it rebuilds the corpus.
    synth = hashlib.sha256(Path(audiotree.synth.__file__).read_bytes()).hexdigest()[:16]
    manifest = {"version": _VERSION, "synth": synth, "spec": dataclasses.asdict(spec), "plan": _plan(spec)}
    return json.loads(json.dumps(manifest))  # as it reads back (tuples become lists)


def _is_current(root: Path, manifest: dict) -> bool:
    try:
        stored = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if {k: stored.get(k) for k in manifest} != manifest:
        return False
    sizes = stored.get("sizes", {})
    for entry in manifest["plan"]:
        path = root / entry["group"] / entry["name"]
        if not path.is_file() or path.stat().st_size != sizes.get(entry["name"]):
            return False
    return True


def build_corpus(root: str | os.PathLike, spec: BenchCorpusSpec = FULL_SPEC, log=print) -> dict[str, str]:
    """Writes (or reuses) the corpus under ``root``; returns ``{group: folder}``."""
    import soundfile

    from audiotree.synth import synthesize

    root = Path(root)
    manifest = _manifest(spec)
    folders = {g: str(root / g) for g in GROUPS}
    if _is_current(root, manifest):
        return folders
    log(f"building benchmark corpus in {root} ({len(manifest['plan'])} files) ...")
    for g in GROUPS:
        shutil.rmtree(root / g, ignore_errors=True)
        (root / g).mkdir(parents=True, exist_ok=True)
    sizes = {}
    for entry in manifest["plan"]:
        rng = np.random.default_rng([spec.seed, GROUPS.index(entry["group"]), 1, entry["index"]])
        data = synthesize(entry["group"], entry["seconds"], entry["rate"], entry["channels"], rng)
        if entry["quiet"]:
            data = _mostly_silent(data, entry["rate"], rng)
        fmt, subtype = _FORMATS[entry["ext"]]
        path = root / entry["group"] / entry["name"]
        # Written in blocks: libsndfile's Vorbis encoder can crash on one huge write.
        with soundfile.SoundFile(path, "w", entry["rate"], entry["channels"], subtype, format=fmt) as out:
            for block in range(0, data.shape[0], 1 << 16):
                out.write(data[block : block + (1 << 16)])
        sizes[entry["name"]] = path.stat().st_size
    (root / "manifest.json").write_text(json.dumps({**manifest, "sizes": sizes}, indent=1))
    return folders


def describe(root: str | os.PathLike) -> dict:
    """Counts for the report: files, bytes, hours, and the duration mix."""
    stored = json.loads((Path(root) / "manifest.json").read_text())
    plan = stored["plan"]
    seconds = [e["seconds"] for e in plan]
    return {
        "files": len(plan),
        "bytes": sum(stored["sizes"].values()),
        "hours": sum(seconds) / 3600,
        "under_2s": sum(s < 2 for s in seconds),
        "from_30_to_120s": sum(30 <= s <= 120 for s in seconds),
        "minutes_min_max": [min(seconds) / 60, max(seconds) / 60],
        "by_format": {x: sum(e["ext"] == x for e in plan) for x in sorted({e["ext"] for e in plan})},
        "mostly_silent": sum(e["quiet"] for e in plan),
        "formats": sorted({e["ext"] for e in plan}),
        "rates": sorted({e["rate"] for e in plan}),
        "channels": sorted({e["channels"] for e in plan}),
    }


if __name__ == "__main__":  # python benchmarks/corpus.py [ROOT]
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / ".corpus" / "full")
    build_corpus(target)
    print(json.dumps(describe(target), indent=1))
