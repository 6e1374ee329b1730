"""audiotree changes no process-wide state on import, and scopes its worker preparation.

See ``audiotree.sources.workers.start``: spawn's preparation data and Grain's absl flag
are prepared only for the workers of audiotree pipelines; a plain Grain pipeline
in the same process behaves exactly as without audiotree.
"""

from __future__ import annotations

import json
import multiprocessing.spawn as spawn
import pickle
import subprocess
import sys
import threading

import pytest

from helpers import run_script

_MAIN_KEYS = {"init_main_from_path", "init_main_from_name"}

SNAPSHOT_AND_IMPORT_ALL = r'''
import atexit, importlib, json, multiprocessing, multiprocessing.spawn as spawn, os, pkgutil, signal, sys, warnings

# Import the dependencies first: flags and classes they define are theirs, not ours.
import absl.flags, absl.logging, grain, jax, numpy, soundfile
for optional in ("scipy.signal", "scipy.special", "soxr", "pyarrow", "fsspec", "click", "rich", "tqdm",
                 "matplotlib", "torch", "torch.utils.data", "av"):
    try:
        importlib.import_module(optional)
    except ImportError:
        pass
for info in pkgutil.walk_packages(grain.__path__, "grain."):
    if not info.name.endswith("_test"):
        try:
            importlib.import_module(info.name)
        except Exception:
            pass
FLAGS = absl.flags.FLAGS

def snapshot():
    classes = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("grain") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__.startswith("grain"):
                classes[f"{name}.{attr}"] = (id(value), {k: id(v) for k, v in vars(value).items()})
    flag_state = {n: (FLAGS[n].present, repr(FLAGS[n].value), FLAGS[n].using_default_value) for n in FLAGS}
    return {
        "spawn": {k: id(v) for k, v in vars(spawn).items()},
        # Importing a submodule adds it as an attribute; that is not a patch.
        "multiprocessing": {k: id(v) for k, v in vars(multiprocessing).items() if not isinstance(v, type(os))},
        "flags_parsed": FLAGS.is_parsed(),
        "flags": flag_state,
        "classes": classes,
        "atexit": atexit._ncallbacks(),
        "fd2": [os.fstat(2).st_ino, os.fstat(2).st_dev],
        "stderr": id(sys.stderr),
        "warnings": len(warnings.filters),
        "signals": {int(s): id(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)},
    }

before = snapshot()
# Record who registers exit hooks during the walk (dependencies imported lazily may).
registered = []
_register = atexit.register
def _recording_register(fn, *args, **kwargs):
    registered.append(getattr(fn, "__module__", None) or repr(fn))
    return _register(fn, *args, **kwargs)
atexit.register = _recording_register
import audiotree
imported, skipped = [], []
for info in pkgutil.walk_packages(audiotree.__path__, "audiotree."):
    if info.name.endswith("__main__"):
        continue  # running it is running the CLI
    try:
        importlib.import_module(info.name)
        imported.append(info.name)
    except ModuleNotFoundError as exc:
        # An optional extra that is not installed (torch, av, ray, ...).
        if exc.name and exc.name.split(".")[0] == "audiotree":
            raise
        skipped.append((info.name, exc.name))
atexit.register = _register
after = snapshot()
after["atexit"] -= len(registered)
new_flags = {n: FLAGS.find_module_defining_flag(n) for n in set(after["flags"]) - set(before["flags"])}
for n in new_flags:
    after["flags"].pop(n)
print(json.dumps({"before": before, "after": after, "imported": imported, "skipped": skipped, "new_flags": new_flags,
                  "exit_hooks": registered}))
'''


@pytest.mark.slow
def test_importing_every_module_changes_no_process_state(tmp_path):
    result = run_script(SNAPSHOT_AND_IMPORT_ALL, tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    before, after = report["before"], report["after"]
    # The walk really imported the package, subpackages included.
    assert {"audiotree.sources", "audiotree.sources.workers.start", "audiotree.sources.workers.lifecycle", "audiotree.io.decode",
            "audiotree.core", "audiotree.cli"} <= set(report["imported"]), report
    assert len(report["imported"]) >= 40, report["imported"]
    assert before["spawn"] == after["spawn"], "multiprocessing.spawn was modified on import"
    assert before["multiprocessing"] == after["multiprocessing"]
    assert after["flags_parsed"] is False and before["flags_parsed"] is False
    assert before["flags"] == after["flags"], "absl flags were modified on import"
    assert not any(str(m).startswith("audiotree") for m in report["new_flags"].values()), report["new_flags"]
    changed = [name for name, state in before["classes"].items() if after["classes"].get(name) != state]
    assert len(before["classes"]) > 200 and not changed, changed[:10]
    assert not any(str(m).startswith("audiotree") for m in report["exit_hooks"]), report["exit_hooks"]
    for key in ("atexit", "fd2", "stderr", "warnings", "signals"):
        assert before[key] == after[key], key


def test_a_worker_init_armed_thread_drops_main_only_for_its_own_next_grain_start():
    from audiotree.sources.workers.start import WorkerInit

    original = spawn.get_preparation_data
    pickle.loads(pickle.dumps(WorkerInit(None)))  # Grain pickles it right before Process.start()
    assert spawn.get_preparation_data is not original  # armed: wrapped until the start
    other: list = []
    thread = threading.Thread(target=lambda: other.append(spawn.get_preparation_data("grain-process-prefetch-Z")))
    thread.start()
    thread.join()
    # Another thread's Grain worker keeps the standard preparation (pytest's __main__ is re-imported).
    assert _MAIN_KEYS & set(other[0])
    assert spawn.get_preparation_data is not original  # still armed for this thread
    ours = spawn.get_preparation_data("grain-process-prefetch-X")
    assert not _MAIN_KEYS & set(ours)
    assert set(other[0]) - set(ours) <= _MAIN_KEYS
    assert spawn.get_preparation_data is original  # restored right after the start
    # Consumed: the next start from this thread is standard again.
    assert _MAIN_KEYS & set(spawn.get_preparation_data("grain-process-prefetch-X"))


def test_an_armed_thread_starting_a_non_grain_process_keeps_main():
    from audiotree.sources.workers.start import WorkerInit

    original = spawn.get_preparation_data
    pickle.dumps(WorkerInit(print))
    assert _MAIN_KEYS & set(spawn.get_preparation_data("SpawnProcess-1"))
    assert spawn.get_preparation_data is original


def test_worker_init_runs_the_users_function():
    from audiotree.sources.workers.start import WorkerInit

    calls = []
    init = pickle.loads(pickle.dumps(WorkerInit(lambda i, n: calls.append((i, n))))) if False else WorkerInit(
        lambda i, n: calls.append((i, n))
    )
    init(1, 2)
    WorkerInit(None)(0, 2)
    assert calls == [(1, 2)]
    spawn.get_preparation_data("SpawnProcess-1")  # nothing armed: a plain call


def test_grain_flag_hold_is_reference_counted_and_never_parses():
    from absl import flags

    from audiotree.sources.workers.start import GRAIN_PROFILING_FLAG, hold_grain_flag

    import grain  # noqa: F401 - defines the flag

    if flags.FLAGS.is_parsed():
        pytest.skip("flags were parsed in this process")
    flag = flags.FLAGS[GRAIN_PROFILING_FLAG]
    assert not flag.present
    first, second = hold_grain_flag(), hold_grain_flag()
    assert flag.present == 1 and flags.FLAGS[GRAIN_PROFILING_FLAG].value is False
    assert getattr(flags.FLAGS, GRAIN_PROFILING_FLAG) is False  # readable although unparsed
    first()
    first()  # a release is idempotent
    assert flag.present == 1
    second()
    assert not flag.present and not flags.FLAGS.is_parsed()
    with pytest.raises(flags.UnparsedFlagAccessError):
        getattr(flags.FLAGS, GRAIN_PROFILING_FLAG)


IS_PARSED_PATTERN = """
import sys
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 10, "")
import grain
import audiotree
from audiotree import AudioTree
from audiotree.sources import create_audio_dataset

# An audiotree pipeline with workers runs (and closes) before the script parses flags.
ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
it = iter(ds.to_iter_dataset().batch(2, batch_fn=AudioTree.batch).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
print("batch", next(it).waveform.shape)
print("parsed while open:", FLAGS.is_parsed())
it.close()
flags.DEFINE_integer("late", 3, "")
try:
    FLAGS.late
    print("late flag read before parsing")
except flags.UnparsedFlagAccessError:
    print("late flag raises before parsing")
if not FLAGS.is_parsed():
    FLAGS(sys.argv)
print("steps =", FLAGS.steps, "late =", FLAGS.late)
"""


@pytest.mark.slow
def test_absl_is_parsed_pattern_reads_the_command_line(corpus, tmp_path):
    script = tmp_path / "flags_script.py"
    script.write_text(IS_PARSED_PATTERN.format(folder=str(corpus["music"])))
    result = subprocess.run(
        [sys.executable, str(script), "--steps", "500", "--late=7"], capture_output=True, text=True, timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batch (2, 1, 1600)" in result.stdout
    assert "parsed while open: False" in result.stdout
    assert "late flag raises before parsing" in result.stdout
    assert "steps = 500 late = 7" in result.stdout


PLAIN_GRAIN = """
import os, sys
import grain
from absl import flags
{audiotree_import}
# Top-level set-up that spawn re-runs in every worker of a plain Grain pipeline.
sys.stderr.write("TOP %d\\n" % os.getpid()); sys.stderr.flush()  # one write: workers print at once

def pid_of(x):
    return (x, os.getpid())

if __name__ == "__main__":
    flags.FLAGS(sys.argv)  # plain Grain needs parsed flags in a plain script
    {audiotree_first}
    ds = grain.MapDataset.range(6).map(pid_of).to_iter_dataset()
    it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    items = list(it)
    it.close()
    print("ITEMS", sorted(x for x, _ in items))
    print("WORKERS", sorted({{pid for _, pid in items}}))
    import multiprocessing.spawn as spawn
    print("SPAWN ORIGINAL", spawn.get_preparation_data.__qualname__ == "get_preparation_data"
          and spawn.get_preparation_data.__module__ == "multiprocessing.spawn")
"""

# An audiotree pipeline whose iterator is still open (workers running) while the plain one runs.
AUDIOTREE_FIRST = """from audiotree.sources import create_audio_dataset
    ours = iter(create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000, num_epochs=None)
                .to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    print("OURS", next(ours).waveform.shape)"""


def _plain_grain_run(tmp_path, name, **fmt):
    script = tmp_path / f"{name}.py"
    script.write_text(PLAIN_GRAIN.format(**fmt))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    workers = json.loads(next(l for l in lines if l.startswith("WORKERS")).split(" ", 1)[1])
    tops = [int(l.split()[1]) for l in result.stderr.splitlines() if l.startswith("TOP ")]
    return result, workers, tops


@pytest.mark.slow
def test_plain_grain_pipeline_behaves_as_without_audiotree(corpus, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    runs = [("without", dict(audiotree_import="", audiotree_first="")),
            ("with_lib", dict(audiotree_import="import audiotree.sources", audiotree_first="")),
            ("alongside", dict(audiotree_import="import audiotree.sources",
                               audiotree_first=AUDIOTREE_FIRST.format(folder=str(corpus["music"]))))]
    with ThreadPoolExecutor(2) as pool:  # separate scripts, two at a time: one per core
        done = list(pool.map(lambda run: _plain_grain_run(tmp_path, run[0], **run[1]), runs))
    (without, w_workers, w_tops), (with_lib, workers, tops), (alongside, a_workers, a_tops) = done
    for result, worker_pids, top_pids in ((without, w_workers, w_tops), (with_lib, workers, tops),
                                          (alongside, a_workers, a_tops)):
        assert "ITEMS [0, 1, 2, 3, 4, 5]" in result.stdout
        assert "SPAWN ORIGINAL True" in result.stdout
        # The parent and each plain worker ran the script's top level ...
        assert len(worker_pids) == 2 and set(worker_pids) <= set(top_pids), (worker_pids, top_pids)
    # ... exactly as often as without audiotree, while audiotree's own workers did not.
    assert len(w_tops) == len(tops) == len(a_tops) == 3, (w_tops, tops, a_tops)
    assert "OURS (1, 1, 1600)" in alongside.stdout


OPT_OUT = """
import os, sys
import grain
from absl import flags
from audiotree.sources import create_audio_dataset
sys.stderr.write("TOP %d\\n" % os.getpid()); sys.stderr.flush()  # one write: workers print at once

if __name__ == "__main__":
    flags.FLAGS(sys.argv)
    ds = create_audio_dataset({folder!r}, duration=0.2, sample_rate=8000)
    it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    print("N", sum(1 for _ in it))
    it.close()
"""


@pytest.mark.slow
def test_opt_out_starts_audiotree_workers_exactly_as_grain_does(corpus, tmp_path):
    result = run_script(OPT_OUT.format(folder=str(corpus["music"])), tmp_path, timeout=240,
                        env={"AUDIOTREE_PLAIN_WORKERS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "N 8" in result.stdout
    # Grain's spawn re-ran the (guarded) script in both workers.
    assert result.stderr.count("TOP ") == 3, result.stderr[-3000:]
