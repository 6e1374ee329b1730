"""Tasks that write files, made safe to retry: attempt folders, adopted in order.

A task that writes output (a render part, an index part) may run more than once
on Ray: its worker can die half-way and Ray runs it again. So a task never
writes where the result will live. It writes into a fresh :func:`attempt_dir`
of its own and returns that folder's name; the driver *adopts* the attempts of
finished tasks, in chunk order (:class:`InOrder`), by renaming them into place
and then recording them. An attempt whose worker died is never adopted, and
the staging folder is removed when the job ends: nothing is written twice or lost.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Callable

__all__ = ["attempt_dir", "InOrder"]


def attempt_dir(staging: str | os.PathLike, key: str) -> Path:
    """A new, unique folder name for one attempt at task ``key``: ``staging/key.<pid>-<random>``.

    The folder itself is not created (writers create it on first write).

    >>> attempt_dir("/tmp/staging", "part-3").name.startswith("part-3.")
    True
    """
    return Path(staging) / f"{key}.{os.getpid()}-{secrets.token_hex(4)}"


class InOrder:
    """Calls ``commit(index, result)`` in index order, for results arriving in any order.

    Use it as ``map_chunks(..., on_result=InOrder(commit))``: a result is held
    until every earlier chunk has been committed, so what is recorded is always
    a prefix of the job and an interrupted job resumes from its end.

    >>> seen = []
    >>> adopt = InOrder(lambda i, r: seen.append(r))
    >>> for index, result in [(1, "b"), (0, "a"), (2, "c")]:
    ...     adopt(index, result)
    >>> seen
    ['a', 'b', 'c']
    """

    def __init__(self, commit: Callable[[int, Any], Any], *, first: int = 0):
        self._commit = commit
        self._held: dict[int, Any] = {}
        self.next = first

    def __call__(self, index: int, result: Any) -> None:
        self._held[index] = result
        while self.next in self._held:
            self._commit(self.next, self._held.pop(self.next))
            self.next += 1
