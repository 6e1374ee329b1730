"""The file-object protocol the decoders read through, shared by remote files and shard members.

soundfile and PyAV call ``readinto``/``seek``/``tell`` from C callbacks that
cannot raise (cffi prints the error and reports a short read). So an input
keeps the storage error its read hit in ``failure``, reads after it return
nothing, and the caller raises it with :meth:`ReadOnlyInput.check` once the
decoder returns. Subclasses provide ``read`` (``readinto`` goes through it unless overridden), ``seek``, ``tell``,
``close`` and the ``failure`` slot.

>>> class Empty(ReadOnlyInput):
...     __slots__ = ("failure",)
...     def __init__(self): self.failure = None
...     def close(self): pass
>>> with Empty() as f:
...     f.seekable(), f.readable(), f.check()
(True, True, None)
"""

from __future__ import annotations

from audiotree.errors import AudioReadError

__all__ = ["ReadOnlyInput"]


class ReadOnlyInput:
    """A read-only, seekable binary file object that records storage failures (see the module)."""

    __slots__ = ()

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        """Fills ``buffer`` by :meth:`read`; 0 bytes after a storage failure (kept in ``failure``)."""
        try:
            data = self.read(len(buffer))
        except AudioReadError:
            return 0
        buffer[: len(data)] = data
        return len(data)

    def check(self) -> None:
        """Raises the storage error a read hit (see ``failure``), if any."""
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
