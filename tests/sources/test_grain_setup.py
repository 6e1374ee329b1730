"""Grain multiprocessing from plain, unguarded scripts (see audiotree.sources.workers.start and .lifecycle)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import run_script

UNGUARDED = """
import sys
import grain
from audiotree.sources import create_audio_dataset

print("SCRIPT BODY", flush=True)

def worker_init_fn(worker_id, worker_count):
    print(f"init {{worker_id}}/{{worker_count}}", file=sys.stderr, flush=True)

ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000).map(lambda t: t.waveform.shape)
it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).mp_prefetch(
    grain.MultiprocessingOptions(num_workers=2), worker_init_fn=worker_init_fn
)
print(sorted(set(it)))
"""


@pytest.mark.slow
def test_unguarded_script_runs_workers_once(corpus, tmp_path):
    result = run_script(UNGUARDED.format(folder=str(corpus["music"])), tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    # The script body ran in the parent only: workers did not re-execute it.
    assert result.stdout.count("SCRIPT BODY") == 1
    # A function defined in the script reached both workers.
    assert "init 0/2" in result.stderr and "init 1/2" in result.stderr
    assert "[(1, 1, 1600)]" in result.stdout


ABSL_APP = """
import grain
from absl import app, flags
from audiotree.sources import create_audio_dataset

flags.DEFINE_integer("items", 3, "how many items")
FLAGS = flags.FLAGS

def main(argv):
    ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
    it = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    print("ITEMS", sum(1 for _, _ in zip(range(FLAGS.items), it)))

if __name__ == "__main__":
    app.run(main)
"""


@pytest.mark.slow
def test_absl_users_still_parse_their_flags(corpus, tmp_path):
    script = tmp_path / "app_script.py"
    script.write_text(ABSL_APP.format(folder=str(corpus["music"])))
    result = subprocess.run([sys.executable, str(script), "--items=5"], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ITEMS 5" in result.stdout


EARLY_EXIT = """
import grain
from audiotree import AudioTree
from audiotree.sources import create_balanced_audio_dataset

ds = create_balanced_audio_dataset({{"a": [{a!r}], "b": [{b!r}]}}, duration=0.2, sample_rate=8000)
iter_ds = (
    ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    .batch(4, batch_fn=AudioTree.batch)
    .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
)
for step, batch in enumerate(iter_ds):
    if step >= 3:
        break
print("DONE", batch.waveform.shape)
"""


@pytest.mark.slow
def test_script_that_breaks_out_of_the_loop_exits_cleanly(corpus, tmp_path):
    code = EARLY_EXIT.format(a=str(corpus["music"]), b=str(corpus["speech"]))
    result = run_script(code, tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DONE (4, 1, 1600)" in result.stdout
    for noise in ("Exception ignored", "leaked shared_memory", "Traceback"):
        assert noise not in result.stderr, result.stderr[-3000:]


EXIT_CHECK = """
import atexit
import grain
from grain.multiprocessing import SharedMemoryArray

ORIGINAL = (grain.DatasetIterator.__dict__.get("__del__"), SharedMemoryArray.__dict__["__del__"])

@atexit.register  # registered first, so it runs after audiotree's exit hook
def check_classes():
    now = (grain.DatasetIterator.__dict__.get("__del__"), SharedMemoryArray.__dict__["__del__"])
    print("CLASSES UNTOUCHED", now == ORIGINAL, flush=True)

from audiotree import AudioTree
from audiotree.sources import create_audio_dataset

ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
ours = iter(ds.to_iter_dataset().batch(2, batch_fn=AudioTree.batch).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
batch = next(ours)
view = batch.waveform[0]  # a view of a shared-memory leaf, alive at exit
print("HELD", type(batch.waveform).__name__, isinstance(batch.waveform, SharedMemoryArray), view.shape)
"""


@pytest.mark.slow
@pytest.mark.parametrize("slots, held", [("0", "HELD _OwnedSharedMemoryArray True (1, 1600)"),
                                         ("1", "HELD ndarray False (1, 1600)")])
def test_exit_hook_touches_no_grain_class(corpus, tmp_path, slots, held):
    # AUDIOTREE_BATCH_SLOTS=0: Grain's own segment per batch; 1: audiotree's reused batch slots.
    result = run_script(EXIT_CHECK.format(folder=str(corpus["music"])), tmp_path, timeout=180,
                        env={"AUDIOTREE_BATCH_SLOTS": slots})
    assert result.returncode == 0, result.stderr[-3000:]
    assert held in result.stdout
    assert "CLASSES UNTOUCHED True" in result.stdout
    for noise in ("Exception ignored", "leaked shared_memory", "Traceback"):
        assert noise not in result.stderr, result.stderr[-3000:]
