"""The keywords every writer shares, with one meaning each: ``exist_ok`` and the progress bar.

* ``exist_ok``: a folder that already holds a dataset is refused by
  :func:`refuse_existing` (one message for every writer, local folder or URL),
  unless ``exist_ok=True`` replaces it.
* ``pbar`` / ``close_pbar`` / ``show_progress`` / ``progress_desc``: the bar a
  writer advances, made by :func:`progress_bar`.

>>> refuse_existing("out", "a dataset", ["manifest.npz"], exist_ok=True)   # nothing to refuse
>>> refuse_existing("out", "a dataset", ["manifest.npz"], exist_ok=False)
Traceback (most recent call last):
FileExistsError: out already holds a dataset (manifest.npz); pass exist_ok=True to replace it, or choose another folder.
>>> progress_bar(None, False, False, None, default_desc="Writing", unit="item")   # no bar asked for
(None, False)
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["refuse_existing", "progress_bar"]


def refuse_existing(where: Any, what: str, found: Sequence[str], *, exist_ok: bool) -> None:
    """``FileExistsError`` when ``found`` (the files of ``what`` in ``where``) is not empty and not ``exist_ok``."""
    if found and not exist_ok:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise FileExistsError(f"{where} already holds {what} ({shown}); pass exist_ok=True to replace it, or "
                              "choose another folder.")


def progress_bar(pbar: Any, close_pbar: bool, show_progress: bool, progress_desc: str | None, *,
                 default_desc: str, unit: str, total: int | None = None) -> tuple[Any, bool]:
    """(the bar a writer advances, whether the writer closes it).

    A ``pbar`` given is used as is, closed on the writer's close if
    ``close_pbar``; with none, ``show_progress=True`` makes a tqdm bar
    (``progress_desc`` or ``default_desc``, counting ``unit``) that the writer
    always closes.
    """
    if show_progress and pbar is None:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=progress_desc or default_desc, unit=unit), True
    return pbar, bool(close_pbar)
