"""Regenerates the Hugging Face ``datasets`` Parquet fixtures of this folder (run it with ``datasets`` installed).

    python make_hf_pathonly.py        # from any folder; writes next to this script

* ``audio/`` holds three short files written by sox (a FLAC, a WAV, an Ogg Vorbis).
* ``pathonly.parquet``: ``Dataset.from_dict({"audio": [relative paths], ...}).cast_column("audio", Audio())``
  then ``to_parquet``: each audio cell is ``{"bytes": null, "path": "audio/..."}`` (the files are not embedded).
* ``embedded.parquet``: the same rows with the audio bytes inside (``{"bytes": ..., "path": "a.flac"}``),
  as ``datasets`` writes when the cells hold bytes.
* ``mixed.parquet``: one embedded row and two path-only rows in one file.

The paths are relative to this folder (the script runs from it), as they are when a user builds a dataset
from the files next to where the Parquet is written.
"""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = [("audio/tone.flac", "sine 440", "one"), ("audio/noise.wav", "pinknoise vol 0.3", "two"),
         ("audio/chirp.ogg", "sine 300-900", "three")]


def main():
    from datasets import Audio, Dataset

    os.chdir(HERE)
    os.makedirs("audio", exist_ok=True)
    for path, synth, _ in FILES:
        subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", *(["-b", "16"] if not path.endswith(".ogg") else []),
                        path, "synth", "0.5", *synth.split()], check=True)
    paths = [p for p, _, _ in FILES]
    texts = [t for _, _, t in FILES]
    Dataset.from_dict({"audio": paths, "text": texts}).cast_column("audio", Audio()).to_parquet("pathonly.parquet")
    cells = [{"bytes": open(p, "rb").read(), "path": os.path.basename(p)} for p in paths]
    Dataset.from_dict({"audio": cells, "text": texts}).cast_column("audio", Audio()).to_parquet("embedded.parquet")
    mixed = [cells[0], {"bytes": None, "path": paths[1]}, {"bytes": None, "path": paths[2]}]
    Dataset.from_dict({"audio": mixed, "text": texts}).cast_column("audio", Audio()).to_parquet("mixed.parquet")


if __name__ == "__main__":
    main()
