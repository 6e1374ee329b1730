"""The :class:`Runner` interface every executor is adapted to, and its bounded task loop.

A runner yields ``(chunk index, result)`` pairs as chunks finish; callers put
results back in chunk order, so the order of completion never shows in the
output. Remote runners keep at most :data:`IN_FLIGHT_PER_WORKER` tasks per
worker submitted, which bounds driver memory on corpora of any size.

>>> list(Runner().run(lambda chunk: sum(chunk), [[1, 2], [3]]))
[(0, 3), (1, 3)]
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

__all__ = ["IN_FLIGHT_PER_WORKER", "Runner"]

#: Tasks kept in flight per worker: enough to keep workers busy, few enough to bound memory.
IN_FLIGHT_PER_WORKER = 4


class Runner:
    """Runs ``func(chunk)`` for every chunk and yields ``(chunk index, result)`` as each finishes.

    ``workers`` is how many chunks can run at once (used to size chunks);
    ``name`` says where they run (``"serial"``, ``"process"``, ``"ray"``,
    ``"executor"``). The base class runs chunks here, one after the other.
    """

    name = "serial"
    workers = 1

    def run(self, func: Callable[[Any], Any], chunks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for index, chunk in enumerate(chunks):
            yield index, func(chunk)

    def run_bounded(
        self,
        chunks: Iterable[Any],
        *,
        submit: Callable[[Any], Any],
        wait: Callable[[list], list],
        result: Callable[[Any, int], Any],
        cancel: Callable[[Any], None],
    ) -> Iterator[tuple[int, Any]]:
        """The task loop of remote runners, over their own task handles.

        ``submit(chunk)`` starts a task and returns its handle; ``wait(handles)``
        blocks until at least one has finished and returns the finished ones;
        ``result(handle, index)`` returns the value of chunk ``index`` or raises its error. At most
        ``workers * IN_FLIGHT_PER_WORKER`` tasks are in flight; finished ones
        are yielded in chunk order, and whatever is still pending when the
        caller stops (or an error escapes) is cancelled.
        """
        pending: dict[Any, int] = {}
        upcoming = iter(enumerate(chunks))
        limit = self.workers * IN_FLIGHT_PER_WORKER
        try:
            while True:
                for index, chunk in upcoming:
                    pending[submit(chunk)] = index
                    if len(pending) >= limit:
                        break
                if not pending:
                    return
                for handle in sorted(wait(list(pending)), key=pending.__getitem__):
                    index = pending.pop(handle)
                    yield index, result(handle, index)
        finally:
            for handle in pending:
                cancel(handle)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, workers={self.workers})"
