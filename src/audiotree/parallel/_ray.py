"""The Ray backend of ``executor="ray"`` (the ``audiotree[ray]`` extra).

Ray is imported only here, and only when a job asks for it. Each chunk is one
Ray task needing one CPU, placed with Ray's ``SPREAD`` strategy: chunks are
independent, so every node takes its share from the start instead of the
driver's node taking them all while the other nodes start their workers. The
function is put in the object store once and shared by every task. Tasks are
submitted in a window of ``4 x cluster CPUs``, so the driver holds a bounded
number of results; ``ray.wait`` hands each finished one back as it completes,
so progress reaches the driver per chunk.

Faults: a task whose worker process dies (killed, out of memory, node lost)
is re-run by Ray up to ``max_retries`` times. Tasks must therefore be
idempotent: every audiotree task either returns its result or writes into a
folder of its own attempt, which the driver adopts only once the task has
returned (see :mod:`audiotree.writers.parts`). An exception raised by the work
(a bad file) is not retried and is raised to the caller as itself.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from audiotree.errors import MissingExtraError
from audiotree.parallel.runner import Runner

__all__ = ["RayRunner", "import_ray", "TASK_NAME"]

#: Every chunk task carries this name (its worker's process title is ``ray::audiotree-chunk``).
TASK_NAME = "audiotree-chunk"
_EXTRA_HINT = "pip install 'audiotree[ray]'"


def import_ray():
    """The ``ray`` module, or an ImportError naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError(f"executor='ray' needs Ray, which is not installed: {_EXTRA_HINT} ({exc}).") from None
    return ray


def _made_token_path():
    """``(~/.ray/auth_token, whether ~/.ray existed)`` when no token file exists yet (Ray may save one when it starts
    a local cluster), else ``None``: a token that was there is never touched."""
    from pathlib import Path

    folder = Path.home() / ".ray"
    path = folder / "auth_token"
    return None if path.exists() else (path, folder.exists())


def _remove_made_token(made) -> None:
    """Removes the token file (and the ``~/.ray`` folder, left empty) that Ray saved during this run.

    Why: ``ray.init()`` of a local cluster turns token authentication on by
    default and saves a fresh token to ``~/.ray/auth_token`` for it; the
    cluster is gone after the run, and the file would make every later
    ``ray.init()`` on this machine use token authentication.
    """
    if made is None:
        return
    path, folder_existed = made
    with contextlib.suppress(OSError):
        path.unlink()
    if not folder_existed:
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when empty


def _call(func, chunk):
    return func(chunk)


class RayRunner(Runner):
    """Chunks as Ray tasks on the cluster this process is connected to."""

    name = "ray"

    def __init__(self, ray: Any, *, max_retries: int = 3):
        self._ray = ray
        self.max_retries = int(max_retries)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)(_call).options(
            name=TASK_NAME, scheduling_strategy="SPREAD")

    @classmethod
    @contextlib.contextmanager
    def connect(cls, *, address: str | None = None, max_retries: int = 3) -> Iterator["RayRunner"]:
        """Joins ``address`` (or the running cluster, or starts a local one); leaves what it started."""
        ray = import_ray()
        started = False
        token = _made_token_path()
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False}
            if address is None:
                kwargs["include_dashboard"] = False
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as exc:
                raise RuntimeError(f"Cannot connect to the Ray cluster at {address!r} ({exc}); start it with "
                                   "'ray start --head', or pass ray_address=None to start a local one.") from None
            started = True
        try:
            yield cls(ray, max_retries=max_retries)
        finally:
            if started:
                ray.shutdown()
                _remove_made_token(token)

    def run(self, func, chunks):
        ray = self._ray
        func_ref = ray.put(func)

        def wait(refs: list) -> list:
            ready, rest = ray.wait(refs, num_returns=1)
            if rest:  # everything else already finished, without waiting: fewer passes over the pending tasks
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            return ready

        def cancel(ref) -> None:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)

        return self.run_bounded(chunks, submit=lambda chunk: self._task.remote(func_ref, chunk), wait=wait,
                                result=self._get, cancel=cancel)

    def _get(self, ref, index: int):
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
            raise RuntimeError(f"Ray task {index} failed {self.max_retries + 1} times (its worker died each time: "
                               f"{type(exc).__name__}); check the workers' memory and logs.") from None
