"""Every public audiotree source and builder runs in Grain's ``mp_prefetch`` from a plain script.

A plain script: ``if __name__ == "__main__":``, no absl, 2 spawned workers. The
readers (``TreeDataSource``, ``AudioDataSource``) are used the Grain way,
``grain.MapDataset.source(src)``, where audiotree's own ``mp_prefetch`` is not
involved; ``open_render``/``open_arrayrecord`` and the builders return
audiotree datasets. Each source runs in its own fresh interpreter (absl's
flags are process-wide), all at once so the test takes one script's time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import grain
from pathlib import Path
from audiotree import AudioTree
from audiotree.sources import (AudioDataSource, TreeDataSource, create_audio_dataset,
    create_balanced_audio_dataset, create_windowed_audio_dataset, open_arrayrecord, open_render)

SOURCES = {{
    "TreeDataSource": lambda: grain.MapDataset.source(TreeDataSource(sorted(Path({tree!r}).glob("part-*"))[0])),
    "AudioDataSource": lambda: grain.MapDataset.source(AudioDataSource(sorted(Path({audio!r}).glob("part-*"))[0])),
    "open_render": lambda: open_render({tree!r}),
    "open_arrayrecord": lambda: open_arrayrecord({ar!r}),
    "create_audio_dataset": lambda: create_audio_dataset({music!r}, duration=0.2, sample_rate=8000),
    "create_balanced_audio_dataset": lambda: create_balanced_audio_dataset(
        {{"a": [{music!r}], "b": [{speech!r}]}}, duration=0.2, sample_rate=8000, num_epochs=1),
    "create_windowed_audio_dataset": lambda: create_windowed_audio_dataset(
        {music!r}, duration=0.2, sample_rate=8000, num_epochs=1),
}}

def main(name):
    ds = SOURCES[name]()
    it = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    n = sum(1 for _ in it)
    print("OK", name, n, flush=True)

if __name__ == "__main__":
    import sys
    main(sys.argv[1])
"""

NAMES = ["TreeDataSource", "AudioDataSource", "open_render", "open_arrayrecord", "create_audio_dataset",
         "create_balanced_audio_dataset", "create_windowed_audio_dataset"]


@pytest.fixture(scope="module")
def renders(corpus, tmp_path_factory):
    from audiotree.cli import main

    root = tmp_path_factory.mktemp("renders")
    common = [str(corpus["speech"]), "-n", "6", "--part-size", "6", "--batch-size", "3", "--duration", "0.3",
              "--sample-rate", "8000"]
    for fmt in ("tree", "audio", "arrayrecord"):
        assert main(["render", *common, "--out", str(root / fmt), "--format", fmt]) == 0
    return root


@pytest.mark.slow
def test_every_source_runs_in_mp_prefetch_from_a_plain_script(corpus, renders, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT.format(tree=str(renders / "tree"), audio=str(renders / "audio"),
                                    ar=str(renders / "arrayrecord"), music=str(corpus["music"]),
                                    speech=str(corpus["speech"])))
    procs = {name: subprocess.Popen([sys.executable, str(script), name], cwd=tmp_path, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name in NAMES}
    failures = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0 or f"OK {name}" not in out:
            failures[name] = err.strip().splitlines()[-1:] or out
        elif "leaked shared_memory" in err or "Exception ignored" in err:
            failures[name] = err[-2000:]
    assert not failures, failures
