"""Every public audiotree source and builder runs in Grain's ``mp_prefetch`` from a plain script.

A plain script: ``if __name__ == "__main__":``, no absl, 2 spawned workers. The
readers (``TreeDataSource``, ``AudioDataSource``) are used the Grain way,
``grain.MapDataset.source(src)``, where audiotree's own ``mp_prefetch`` is not
involved; ``open_render``/``open_arrayrecord`` and the builders return
audiotree datasets. One script runs them one after the other and checks
before each that no earlier source left Grain's flag prepared (absl's flags
are process-wide), and after each that it left no shared-memory segment in
``/dev/shm`` (named with the source, where the resource tracker's warning at
exit only counts them). Its stderr must hold no shared-memory leak warning.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from audiotree.sources.workers.start import GRAIN_PROFILING_FLAG

SCRIPT = """
import grain
from pathlib import Path
from audiotree import AudioTree
from audiotree.sources import (AudioDataSource, TreeDataSource, WindowConfig, create_audio_dataset,
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
        {music!r}, window=WindowConfig(duration=0.2), sample_rate=8000, num_epochs=1),
}}

def shared_segments():
    import os
    return {{n for n in os.listdir("/dev/shm") if n.startswith(("psm_", "audiotree_"))}}


def left_behind(before):
    # Segments that appeared while a source ran and outlive it; Grain unlinks the last few on a
    # background thread, so a bounded wait first. Named, so that a leak says which source left it.
    import gc, time
    for _ in range(100):
        gc.collect()
        left = shared_segments() - before
        if not left:
            return left
        time.sleep(0.1)
    return left


def main():
    import gc
    from absl import flags
    for name, make in SOURCES.items():
        # Each source on its own: nothing an earlier one prepared is still in place.
        gc.collect()
        before = shared_segments()
        assert not flags.FLAGS.is_parsed() and not flags.FLAGS[{flag!r}].present, name
        ds = make()
        it = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        try:
            n = sum(1 for _ in it)
        except Exception as exc:
            print("FAIL", name, type(exc).__name__, exc, flush=True)
            continue
        del ds, it
        for segment in sorted(left_behind(before)):
            print("LEFT", name, segment, flush=True)
        print("OK", name, n, flush=True)

if __name__ == "__main__":
    main()
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
                                    speech=str(corpus["speech"]), flag=GRAIN_PROFILING_FLAG))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("LEFT")], result.stdout
    assert [line.split()[1] for line in lines if line.startswith("OK")] == NAMES, result.stdout
    for noise in ("leaked shared_memory", "Exception ignored", "Traceback"):
        assert noise not in result.stderr, result.stderr[-3000:]
