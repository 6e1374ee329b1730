"""State that belongs to one process: open handles, caches and locks, rebuilt fresh after pickling.

Readers and plans travel to worker processes by pickle (Grain's
``mp_prefetch``, torch ``DataLoader`` workers under spawn). What they opened or
cached in the parent must not travel with them: a lock cannot be pickled, a
file handle or memory map would be wrong in the child, and a cache would be
copied whole into every worker. A class lists those attributes with a factory
for their fresh value; pickling leaves them out and unpickling builds them new.

>>> import threading
>>> class Reader(ProcessLocal):
...     process_local = {"_lock": threading.Lock, "_open": dict}
...     def __init__(self, path):
...         self.path, self._lock, self._open = path, threading.Lock(), {"a": object()}
>>> state = Reader("x.wav").__getstate__()   # what pickle stores
>>> sorted(state)
['path']
>>> fresh = Reader.__new__(Reader); fresh.__setstate__(state)   # what unpickling does
>>> fresh.path, fresh._open
('x.wav', {})

A fresh value that depends on the object's other attributes (a buffer sized
by them) is built by :class:`FromObject`, called with the object once the
rest of its state is back:

>>> class Counts(ProcessLocal):
...     process_local = {"_rows": FromObject(lambda self: [0] * self.groups)}
...     def __init__(self, groups):
...         self.groups, self._rows = groups, [5] * groups
>>> copy = Counts.__new__(Counts); copy.__setstate__(Counts(3).__getstate__())
>>> copy._rows
[0, 0, 0]
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping

__all__ = ["ProcessLocal", "FromObject", "ExitsWithPickler"]


class FromObject:
    """A ``process_local`` factory that builds the fresh value from the object itself (``build(obj)``)."""

    def __init__(self, build: Callable[[Any], Any]):
        self.build = build


class ProcessLocal:
    """Leaves the attributes of ``process_local`` out of its pickle and rebuilds them on load."""

    #: attribute name -> a callable giving its fresh value in a new process (or a FromObject)
    process_local: ClassVar[Mapping[str, Callable[[], Any] | FromObject]] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in self.process_local:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for name, fresh in self.process_local.items():
            setattr(self, name, fresh.build(self) if isinstance(fresh, FromObject) else fresh())


class ExitsWithPickler:
    """A data source that, unpickled in a worker started by the process that pickled it, makes that worker exit
    with it (:func:`audiotree.parallel.parent_death.exit_with_pickling_parent`).

    Grain's ``mp_prefetch`` and torch's ``DataLoader`` carry a data source to
    their workers by pickle; a plain pipeline (``grain.MapDataset.source(src)``)
    runs no audiotree code when its workers start, so without this its
    workers would outlive a script killed with SIGKILL. The pickle records the
    pickling process's pid; unpickling in the same process, or in one that is
    not its child, changes nothing.

    >>> class Source(ExitsWithPickler):
    ...     def __init__(self): self.n = 3
    >>> state = Source().__getstate__()   # what pickle stores: the attributes and this pid
    >>> sorted(state)
    ['_audiotree_pickled_by', 'n']
    >>> copy = Source.__new__(Source); copy.__setstate__(state)   # unpickled here: nothing to arm
    >>> vars(copy)
    {'n': 3}
    """

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state = dict(state if state is not None else {})
        import os

        state["_audiotree_pickled_by"] = os.getpid()
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        pickled_by = state.pop("_audiotree_pickled_by", None)
        if pickled_by is not None:
            from audiotree.parallel.parent_death import exit_with_pickling_parent

            exit_with_pickling_parent(pickled_by)
        parent = super()
        if hasattr(parent, "__setstate__"):
            parent.__setstate__(state)
        else:
            self.__dict__.update(state)
