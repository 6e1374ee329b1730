"""The audio of the checked-in Kaldi and lhotse fixtures, regenerated on demand (the fixtures hold no audio).

``write_recordings(folder)`` writes ``folder/audio/rec1.wav`` (6 s) and
``folder/audio/rec2.flac`` (4.5 s), 16 kHz mono noise with a deterministic
seed; ``make_lhotse.py`` wrote the lhotse manifests over exactly these files.
Only NumPy and soundfile, so it runs in the project's venv and in the benchmark venv.
"""

import os

import numpy as np
import soundfile

RECORDINGS = {"rec1": ("audio/rec1.wav", 6.0), "rec2": ("audio/rec2.flac", 4.5)}
RATE = 16_000


def write_recordings(folder):
    os.makedirs(os.path.join(folder, "audio"), exist_ok=True)
    paths = {}
    for seed, (rid, (rel, seconds)) in enumerate(sorted(RECORDINGS.items())):
        data = np.random.default_rng(seed).uniform(-0.4, 0.4, int(seconds * RATE)).astype(np.float32)
        path = os.path.join(folder, rel)
        soundfile.write(path, data, RATE, subtype="PCM_16")
        paths[rid] = path
    return paths
