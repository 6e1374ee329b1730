"""Writes the lhotse fixtures of tests/index/test_imports.py with lhotse itself (run in a venv with lhotse).

    python tests/data/corpora/lhotse/make_lhotse.py   # from the repository root, lhotse installed

It writes the fixture audio (tests/data/corpora/corpus_audio.py) into a temporary
folder, builds Recording/SupervisionSegment/CutSet objects with lhotse's API,
and saves recordings.jsonl.gz, supervisions.jsonl.gz and cuts.jsonl.gz here
with source paths relative to that folder ("audio/rec1.wav"), so a test can
regenerate the audio anywhere and import with audio_root=. The audio itself
is not checked in.
"""

import os
import sys
import tempfile

import lhotse
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from corpus_audio import write_recordings  # noqa: E402

SUPERVISIONS = [
    ("rec1-sup1", "rec1", 0.0, 1.25, "HELLO THERE", "spk1", "f"),
    ("rec1-sup2", "rec1", 1.5, 2.2, "THE QUICK BROWN FOX", "spk1", "f"),
    ("rec1-sup3", "rec1", 3.7, 2.3, "JUMPS OVER", "spk2", "m"),
    ("rec2-sup1", "rec2", 0.35, 1.7, "THE LAZY DOG", "spk2", "m"),
    ("rec2-sup2", "rec2", 2.5, 2.0, "GOOD BYE", "spk1", "f"),
]


def main():
    work = tempfile.mkdtemp()
    paths = write_recordings(work)
    cwd = os.getcwd()
    os.chdir(work)  # lhotse stores source paths as given: relative ones
    try:
        recordings = RecordingSet.from_recordings(
            Recording.from_file(os.path.relpath(paths[rid], work), recording_id=rid) for rid in sorted(paths))
        supervisions = SupervisionSet.from_segments(
            SupervisionSegment(id=sid, recording_id=rid, start=start, duration=duration, channel=0, text=text,
                               speaker=speaker, gender=gender, language="English")
            for sid, rid, start, duration, text, speaker, gender in SUPERVISIONS)
        cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions).trim_to_supervisions(
            keep_overlapping=False)
        recordings.to_file(os.path.join(HERE, "recordings.jsonl.gz"))
        supervisions.to_file(os.path.join(HERE, "supervisions.jsonl.gz"))
        cuts.to_file(os.path.join(HERE, "cuts.jsonl.gz"))
    finally:
        os.chdir(cwd)
    print("lhotse", lhotse.__version__, "wrote", sorted(n for n in os.listdir(HERE) if n.endswith(".gz")))


if __name__ == "__main__":
    main()
