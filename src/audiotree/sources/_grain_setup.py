"""Makes Grain's multiprocessing usable from a plain ``python script.py``.

Two things stop the documented ``mp_prefetch`` pipelines in a script that is not
run through ``absl.app.run`` and has no ``if __name__ == "__main__":`` guard:

1. Grain 0.2.x reads absl flags in its prefetch code and raises
   ``UnparsedFlagAccessError`` when flags were never parsed. We mark flags as
   parsed **only if nobody has parsed them**; ``absl.app.run`` (or any explicit
   ``FLAGS(argv)``) still parses the command line as usual afterwards.
2. Grain starts workers with the *spawn* method, and spawn re-runs the user's
   ``__main__`` script in every worker, which then rebuilds the pipeline and tries
   to start workers of its own. Grain already ships the whole pipeline to the
   worker with cloudpickle, which serialises functions and classes defined in
   ``__main__`` (such as a ``worker_init_fn``) *by value*, so the worker never
   needs the script. We therefore drop the "re-run the main script" step from
   the spawn preparation data of Grain's worker processes, recognised by the
   process name Grain gives them. Other spawned processes (a PyTorch
   ``DataLoader``'s, the user's own) are untouched.

Both steps are idempotent and cheap; :func:`prepare_grain` runs on import of
``audiotree.sources`` and again whenever a dataset is built.
"""

from __future__ import annotations

import multiprocessing.spawn as _spawn
import threading

__all__ = ["prepare_grain", "GRAIN_WORKER_NAME_PREFIX"]

#: Grain names its prefetch processes ``grain-process-prefetch-<dataset>``.
GRAIN_WORKER_NAME_PREFIX = "grain-process-prefetch"
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_lock = threading.Lock()


def _mark_absl_flags_parsed() -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _skip_main_for_grain_workers(get_preparation_data):
    def get_preparation_data_for_grain(name, *args, **kwargs):
        data = get_preparation_data(name, *args, **kwargs)
        if isinstance(name, str) and name.startswith(GRAIN_WORKER_NAME_PREFIX):
            for key in _MAIN_KEYS:
                data.pop(key, None)
        return data

    get_preparation_data_for_grain._audiotree_wrapped = get_preparation_data  # type: ignore[attr-defined]
    return get_preparation_data_for_grain


def prepare_grain() -> None:
    """Applies both fixes above (idempotent, thread-safe)."""
    with _lock:
        _mark_absl_flags_parsed()
        if not hasattr(_spawn.get_preparation_data, "_audiotree_wrapped"):
            _spawn.get_preparation_data = _skip_main_for_grain_workers(_spawn.get_preparation_data)
