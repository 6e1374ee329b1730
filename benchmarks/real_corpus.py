"""The real benchmark corpus: speech, music and effects that Debian packages ship.

    python benchmarks/real_corpus.py [ROOT]    # default benchmarks/.corpus/real

Reproducible: the packages are pinned by name *and* version (``PACKAGES``), fetched
with ``apt-get download`` and unpacked with ``dpkg-deb -x`` (no root, nothing
installed); the files are picked by sorted path, evenly spaced, and converted in a
fixed rotation of formats (WAV, FLAC, OGG/Vorbis, MP3) and rates (8 to 96 kHz) with
soundfile and soxr. Only the Debian archive is contacted.

* speech: the Dutch spoken dialogues of ``fillets-ng-data-nl`` (Ogg/Vorbis voice);
* music: the soundtrack of ``colobot-common-sounds``;
* effects: desktop and game sound themes (``sound-theme-freedesktop``,
  ``deepin-sound-theme``, ``bucklespring-data``, ``tecnoballz-data``).

Files longer than ``MAX_SECONDS`` are cut to their first ``MAX_SECONDS`` (keeps the
96 kHz WAVs of the soundtrack to a sane size). MP3 cannot carry 96 kHz, so an MP3
slot in the rotation falls back to 48 kHz. The result is cached: ``manifest.json``
records the plan and the sizes, and a folder that matches is reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

GROUPS = ("speech", "music", "effects")
PACKAGES = {  # package -> (version, group); the group decides where its audio goes
    "fillets-ng-data-nl": ("1.0.1-1.1", "speech"),
    "colobot-common-sounds": ("0.2.0-2", "music"),
    "sound-theme-freedesktop": ("0.8-2", "effects"),
    "deepin-sound-theme": ("15.10.6-1", "effects"),
    "bucklespring-data": ("1.4.0-2", "effects"),
    "tecnoballz-data": ("0.93.1-10", "effects"),
}
COUNTS = {"speech": 40, "music": 20, "effects": 40}
FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS"),
           "mp3": ("MP3", "MPEG_LAYER_III")}
RATES = (8_000, 16_000, 22_050, 44_100, 48_000, 96_000)
MAX_SECONDS = 120.0
_SOURCE_EXTS = (".ogg", ".wav", ".flac", ".mp3", ".oga")
_VERSION = 1


def _plan_sources(extract: Path) -> dict[str, list[Path]]:
    """Every decodable source file per group, sorted by path."""
    import soundfile

    out: dict[str, list[Path]] = {g: [] for g in GROUPS}
    for package, (_, group) in PACKAGES.items():
        for path in sorted((extract / package).rglob("*")):
            if path.suffix.lower() not in _SOURCE_EXTS or not path.is_file() or path.is_symlink():
                continue
            try:
                info = soundfile.info(str(path))
            except Exception:  # not audio libsndfile can read: not part of the corpus
                continue
            if info.frames > 0.2 * info.samplerate:  # skip clicks shorter than 200 ms
                out[group].append(path)
    return out


def _pick(paths: list[Path], n: int) -> list[Path]:
    """``n`` evenly spaced paths (all of them when there are fewer)."""
    if len(paths) <= n:
        return list(paths)
    idx = np.linspace(0, len(paths) - 1, n).round().astype(int)
    return [paths[i] for i in idx]


def _fetch(root: Path, log) -> Path:
    debs, extract = root / "debs", root / "extract"
    debs.mkdir(parents=True, exist_ok=True)
    for package, (version, _) in PACKAGES.items():
        if not list(debs.glob(f"{package}_*.deb")):
            log(f"apt-get download {package}={version}")
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs, check=True,
                           stdout=subprocess.DEVNULL)
        target = extract / package
        if not target.is_dir():
            deb = next(debs.glob(f"{package}_*.deb"))
            tmp = extract / (package + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
            tmp.rename(target)
    return extract


def _is_current(root: Path, manifest: dict) -> bool:
    try:
        stored = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if stored.get("version") != manifest["version"] or stored.get("packages") != manifest["packages"]:
        return False
    return all((root / e["group"] / e["name"]).is_file() and (root / e["group"] / e["name"]).stat().st_size == e["bytes"]
               for e in stored.get("plan", []))


def build_real_corpus(root: str | os.PathLike, log=print) -> dict[str, str]:
    """Fetches, unpacks and converts the corpus under ``root``; returns ``{group: folder}``."""
    import soundfile
    import soxr

    root = Path(root)
    folders = {g: str(root / g) for g in GROUPS}
    manifest = {"version": _VERSION, "packages": {p: v for p, (v, _) in PACKAGES.items()}}
    if _is_current(root, manifest):
        return folders
    extract = _fetch(root, log)
    sources = _plan_sources(extract)
    log("converting the real corpus: " + ", ".join(f"{g} {len(_pick(sources[g], COUNTS[g]))}" for g in GROUPS))
    plan = []
    slot = 0
    for group in GROUPS:
        shutil.rmtree(root / group, ignore_errors=True)
        (root / group).mkdir(parents=True)
        for i, src in enumerate(_pick(sources[group], COUNTS[group])):
            ext = tuple(FORMATS)[slot % len(FORMATS)]
            rate = RATES[(slot // len(FORMATS) + slot) % len(RATES)]
            slot += 1
            if ext == "mp3" and rate > 48_000:
                rate = 48_000
            data, src_rate = soundfile.read(str(src), dtype="float32", always_2d=True)
            data = data[: int(MAX_SECONDS * src_rate), :2]
            if src_rate != rate:
                data = soxr.resample(data, src_rate, rate).astype(np.float32)
            # Vorbis/MP3 encoders dislike full scale; keep a little headroom.
            peak = float(np.max(np.abs(data))) if data.size else 0.0
            if peak > 0.98:
                data = data * (0.98 / peak)
            name = f"{group}_{i:03d}_{src.stem[:40]}.{ext}"
            path = root / group / name
            fmt, subtype = FORMATS[ext]
            with soundfile.SoundFile(str(path), "w", rate, data.shape[1], subtype, format=fmt) as out:
                for block in range(0, data.shape[0], 1 << 16):
                    out.write(data[block: block + (1 << 16)])
            plan.append({"group": group, "name": name, "source": str(src.relative_to(extract)), "ext": ext,
                         "rate": rate, "channels": int(data.shape[1]), "seconds": data.shape[0] / rate,
                         "bytes": path.stat().st_size})
    (root / "manifest.json").write_text(json.dumps({**manifest, "plan": plan}, indent=1))
    return folders


def describe(root: str | os.PathLike) -> dict:
    """Counts for the report, in the shape of ``corpus.describe``."""
    plan = json.loads((Path(root) / "manifest.json").read_text())["plan"]
    seconds = [e["seconds"] for e in plan]
    return {
        "files": len(plan), "bytes": sum(e["bytes"] for e in plan), "hours": sum(seconds) / 3600,
        "under_2s": sum(s < 2 for s in seconds), "from_30_to_120s": sum(30 <= s <= 120 for s in seconds),
        "formats": sorted({e["ext"] for e in plan}), "rates": sorted({e["rate"] for e in plan}),
        "channels": sorted({e["channels"] for e in plan}),
        "per_group": {g: sum(e["group"] == g for e in plan) for g in GROUPS},
        "packages": json.loads((Path(root) / "manifest.json").read_text())["packages"],
    }


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / ".corpus" / "real")
    build_real_corpus(target)
    print(json.dumps(describe(target), indent=1))
