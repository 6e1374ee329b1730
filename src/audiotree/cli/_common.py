"""What the commands share: the SOURCES syntax, pipeline options, errors, output.

Everything heavy (Grain, JAX, NumPy) is imported inside functions, so
``audiotree --help`` and argument errors stay instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
import warnings
from typing import Any, Callable, Sequence

import click

_GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_GLOB_MAGIC = ("*", "?", "[")


class CliError(click.ClickException):
    """A one-line error with exit code 2 (bad arguments or bad input data)."""

    exit_code = 2


def one_line(message: Any) -> str:
    return " ".join(str(message).split())


@contextlib.contextmanager
def warnings_as_lines():
    """Prints the library's warnings raised inside as one ``warning: ...`` line each on stderr.

    Python's own display shows the source line that called the library (a line
    of the CLI), which means nothing to a user. The filters in force still
    decide which warnings are shown.
    """
    with warnings.catch_warnings(record=True) as caught:
        try:
            yield
        finally:
            shown = []
            for w in caught:
                line = f"warning: {one_line(w.message)}"
                if line not in shown:
                    shown.append(line)
            for line in shown:
                click.echo(line, err=True)


def known_errors() -> tuple[type[BaseException], ...]:
    """What the library raises for bad arguments or unusable input: one line and exit code 2 at the CLI."""
    from audiotree.errors import AudioReadError, MissingExtraError

    return (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, RuntimeError, AudioReadError,
            MissingExtraError)


# ------------------------------------------------------------------ sources
@dataclasses.dataclass(frozen=True)
class Sources:
    """Parsed SOURCES: named groups (balanced) or one plain pool of folders."""

    groups: dict[str, list[str]]  # group name -> folders/globs/files, in the order given
    pool: list[str]  # plain paths when no group is named (create_audio_dataset)
    index: str | None = None  # a corpus index (.parquet) read instead of folders
    group_by: str | None = None  # the index label whose values are the balanced groups
    where: str | None = None  # keep the index rows where this expression holds (Corpus(where=...))
    weight_by: str | None = None  # draw each group's rows in proportion to this column (Corpus(weight_by=...))
    labels: tuple = ()  # index columns the items carry (Corpus(labels=...)), e.g. preview --sort-by's

    @property
    def balanced(self) -> bool:
        return bool(self.groups) or self.group_by is not None

    def labelled(self) -> list[tuple[str | None, str]]:
        """(group or None, path) for every source entry."""
        if self.index is not None:
            return [(self.group_by and f"by {self.group_by}", self.index)]
        if self.groups:
            return [(name, p) for name, paths in self.groups.items() for p in paths]
        return [(None, p) for p in self.pool]


def _exists_or_glob(path: str) -> bool:
    from audiotree.io import storage

    if storage.is_url(path):  # checked when listed (the error names the URL and the bucket)
        return True
    expanded = os.path.expandvars(os.path.expanduser(path))
    brace = "{" in expanded and "}" in expanded  # a shard pattern, train-{000000..000099}.tar
    return any(ch in expanded for ch in _GLOB_MAGIC) or brace or os.path.exists(expanded)


def _group_from_folder(path: str) -> str:
    return os.path.basename(os.path.normpath(os.path.expanduser(path))) or "audio"


def parse_sources(values: Sequence[str], *, named: bool = False) -> Sources:
    """``speech=DIR`` names a group; a plain ``DIR`` is a group named after the folder
    when any group is named (or ``named``), else all plain DIRs form one pool.

    Raises ``click.BadParameter`` for an empty group name or a path that does not exist.
    """
    entries: list[tuple[str | None, str]] = []
    for value in values:
        name: str | None = None
        path = value
        if "=" in value and not os.path.exists(value):
            left, _, right = value.partition("=")
            if not left or not right:
                raise click.BadParameter(f"{value!r}: write GROUP=FOLDER (e.g. speech=data/speech) or a plain FOLDER.",
                                         param_hint="SOURCES")
            if not _GROUP_NAME.match(left):
                raise click.BadParameter(f"{value!r}: group name {left!r} may only use letters, digits, '_', '.', '-'.",
                                         param_hint="SOURCES")
            name, path = left, right
        if not _exists_or_glob(path):
            raise click.BadParameter(f"'{path}' does not exist.", param_hint="SOURCES")
        entries.append((name, path))
    if not entries:
        raise click.BadParameter("give at least one folder.", param_hint="SOURCES")
    if not named and all(name is None for name, _ in entries):
        return Sources(groups={}, pool=[p for _, p in entries])
    groups: dict[str, list[str]] = {}
    for name, path in entries:
        groups.setdefault(name or _group_from_folder(path), []).append(path)
    return Sources(groups=groups, pool=[])


def parse_weights(ctx: click.Context | None, param: Any, value: str | None) -> dict[str, float] | None:
    """``speech=0.5,music=0.3`` -> {"speech": 0.5, "music": 0.3}; each weight finite and > 0."""
    if value is None:
        return None
    weights: dict[str, float] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, number = part.partition("=")
        name, number = name.strip(), number.strip()
        if not sep or not name or not number:
            raise click.BadParameter(f"{part!r} is not GROUP=WEIGHT (e.g. speech=0.5,music=0.3).")
        try:
            weight = float(number)
        except ValueError:
            raise click.BadParameter(f"weight {number!r} for group {name!r} is not a number.") from None
        if not math.isfinite(weight) or weight <= 0:
            raise click.BadParameter(f"weight for group {name!r} must be a finite number > 0, got {number}.")
        if name in weights:
            raise click.BadParameter(f"group {name!r} is given twice.")
        weights[name] = weight
    if not weights:
        raise click.BadParameter("give at least one GROUP=WEIGHT.")
    return weights


def parse_int_list(ctx: click.Context | None, param: Any, value: str | None) -> list[int] | None:
    """``0,1,2`` -> [0, 1, 2] (non-negative ints, duplicates dropped, order kept)."""
    if value is None:
        return None
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            number = int(part)
        except ValueError:
            raise click.BadParameter(f"{part!r} is not an integer (write e.g. 0,1,2).") from None
        if number < 0:
            raise click.BadParameter(f"{number} is negative.")
        if number not in out:
            out.append(number)
    if not out:
        raise click.BadParameter("give at least one integer (e.g. 0,1,2).")
    return out


def _positive_float(ctx: Any, param: Any, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"must be a positive number, got {value}.")
    return value


# ------------------------------------------------------------------ pipeline options
@dataclasses.dataclass
class PipelineOptions:
    """The keyword arguments of create_audio_dataset / create_balanced_audio_dataset."""

    sample_rate: int = 44_100
    duration: float = 1.0
    strategy: str = "random"
    lufs_cutoff: float | None = None
    num_tries: int | None = None
    max_silence_share: float | None = None
    max_clip_share: float | None = None
    weights: dict[str, float] | None = None
    mono: bool = True
    seed: int = 0
    shuffle: bool = True
    on_read_error: str = "raise"

    def excerpt_config(self):
        from audiotree.excerpts.config import ExcerptConfig

        knobs: dict[str, Any] = {"strategy": self.strategy}
        if self.lufs_cutoff is not None:
            knobs["lufs_cutoff"] = self.lufs_cutoff
        if self.num_tries is not None:
            knobs["num_tries"] = self.num_tries
        for knob in ("max_silence_share", "max_clip_share"):
            if getattr(self, knob) is not None:
                knobs[knob] = getattr(self, knob)
        return ExcerptConfig(**knobs)

    @property
    def cutoff_for_plots(self) -> float | None:
        if self.strategy != "loudest":
            return self.lufs_cutoff
        from audiotree.excerpts.config import ExcerptConfig

        return float(self.lufs_cutoff if self.lufs_cutoff is not None else ExcerptConfig.lufs_cutoff)


def _duration_or_none(ctx: Any, param: Any, value: str | None) -> float | None:
    if value is None or str(value).strip().lower() in ("none", "whole"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise click.BadParameter(f"must be a positive number of seconds or 'none' (whole files), got {value!r}.")
    return _positive_float(ctx, param, seconds)


def pipeline_options(*, duration: float = 1.0, sample_rate: int = 44_100, whole_files: bool = False) -> Callable:
    """Decorator adding the dataset options; the command receives ``pipeline=PipelineOptions``.

    ``whole_files``: ``--duration none`` reads whole files (utterances) instead of excerpts.
    """

    def decorator(func: Callable) -> Callable:
        duration_option = (
            click.option("--duration", default=str(duration), show_default=True, callback=_duration_or_none,
                         help="Excerpt length in seconds (duration), or 'none' for whole files.")
            if whole_files else
            click.option("--duration", type=float, default=duration, show_default=True, callback=_positive_float,
                         help="Excerpt length in seconds (duration).")
        )
        options = [
            click.option("--sample-rate", type=click.IntRange(min=1), default=sample_rate, show_default=True,
                         help="Output sample rate in Hz (sample_rate)."),
            duration_option,
            click.option("--strategy", type=click.Choice(["random", "start", "loudest"]), default="random",
                         show_default=True, help="How the excerpt offset is chosen (ExcerptConfig.strategy)."),
            click.option("--lufs-cutoff", type=float, default=None,
                         help="Loudness an excerpt must exceed, LUFS (loudest only; default -40)."),
            click.option("--num-tries", type=click.IntRange(min=1), default=None,
                         help="Metered attempts per excerpt (loudest only; default 8)."),
            click.option("--max-silence-share", type=click.FloatRange(0, 1, max_open=True), default=None,
                         metavar="SHARE", help="Refuse windows with more than this share of silent 100 ms blocks "
                                               "(loudest over --index only; ExcerptConfig.max_silence_share)."),
            click.option("--max-clip-share", type=click.FloatRange(0, 1, max_open=True), default=None,
                         metavar="SHARE", help="Refuse windows with more than this share of clipped samples; 0 "
                                               "refuses any clipping (loudest over --index only; "
                                               "ExcerptConfig.max_clip_share)."),
            click.option("--weights", callback=parse_weights, default=None, metavar="G=W,...",
                         help="Relative group weights, e.g. speech=0.5,music=0.3 (groups left out weigh 1)."),
            click.option("--mono/--stereo", default=True, show_default=True,
                         help="Average channels, or keep them (every file must then have the same count)."),
            click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                         help="Shuffle seed (shuffle_seed; the excerpt seed derives from it)."),
            click.option("--shuffle/--no-shuffle", default=True, show_default=True, help="Shuffle the file order."),
            click.option("--on-read-error", type=click.Choice(["raise", "warn", "skip"]), default="raise",
                         show_default=True, help="What an unreadable file does (on_read_error)."),
        ]

        @functools.wraps(func)
        def wrapper(*args: Any, sample_rate: int, duration: float, strategy: str, lufs_cutoff: float | None,
                    num_tries: int | None, max_silence_share: float | None, max_clip_share: float | None,
                    weights: dict | None, mono: bool, seed: int, shuffle: bool, on_read_error: str, **kwargs: Any):
            pipeline = PipelineOptions(
                sample_rate=sample_rate, duration=duration, strategy=strategy, lufs_cutoff=lufs_cutoff,
                num_tries=num_tries, max_silence_share=max_silence_share, max_clip_share=max_clip_share,
                weights=weights, mono=mono, seed=seed, shuffle=shuffle,
                on_read_error=on_read_error,
            )
            return func(*args, pipeline=pipeline, **kwargs)

        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorator


def where_option(func: Callable) -> Callable:
    """``--where EXPR`` and ``--weight-by COLUMN`` of the commands that read a corpus index (``where``, ``weight_by``)."""
    func = click.option(
        "--weight-by", "weight_by", default=None, metavar="COLUMN",
        help="With a corpus index: draw each group's rows in proportion to this numeric index column, e.g. "
             "snr_db (Corpus(weight_by=...); a missing value weighs 0).")(func)
    return click.option(
        "--where", "where", default=None, metavar="EXPR",
        help="With a corpus index: keep only its rows where EXPR holds, e.g. 'bandwidth_hz >= 16000 and clip_share < "
             "1e-4' (comparisons of index columns and numbers, and/or/not; see docs/index.md, \"Quality\").")(func)
sources_argument = click.argument("sources", nargs=-1, required=True, metavar="SOURCES...")
#: SOURCES that ``--index`` may replace.
optional_sources_argument = click.argument("sources", nargs=-1, required=False, metavar="[SOURCES]...")


def executor_options(func: Callable) -> Callable:
    """``--executor process|ray`` and ``--ray-address``; the command receives ``executor`` and ``ray_address``."""
    func = click.option("--ray-address", default=None, metavar="ADDRESS",
                        help="With --executor ray: the cluster to join (auto, ray://host:10001, ...); "
                             "default: the cluster named by RAY_ADDRESS, else a local one for this run.")(func)
    return click.option("--executor", type=click.Choice(["process", "ray"]), default=None,
                        help="Run the work on a process pool (one worker per core) or on Ray "
                             "(pip install 'audiotree[ray]'); the output is the same.")(func)


def open_executor(executor: str | None, ray_address: str | None):
    """The runner for ``--executor``/``--ray-address`` (a context manager; see audiotree.parallel)."""
    if ray_address is not None and executor != "ray":
        raise click.UsageError("--ray-address needs --executor ray.")
    from audiotree.parallel import open_executor as open_runner

    return open_runner(executor, ray_address=ray_address)


def resolve_sources(values: Sequence[str], pipeline: PipelineOptions | None = None) -> Sources:
    """Parses SOURCES and checks ``--weights`` names against the groups (before any heavy import)."""
    weights = pipeline.weights if pipeline is not None else None
    sources = parse_sources(values, named=bool(weights))
    if weights:
        unknown = sorted(set(weights) - set(sources.groups))
        if unknown:
            raise click.BadParameter(
                f"unknown group{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                f"the groups are {', '.join(sources.groups)}.",
                param_hint="'--weights'",
            )
    return sources


def index_source(values: Sequence[str], index: str | None, group_by: str | None,
                 where: str | None = None, weight_by: str | None = None) -> Sources | None:
    """The SOURCES of a command reading a corpus index: ``--index PATH``, or one ``.parquet`` SOURCE (as ``scan``).

    ``None`` when neither is given (SOURCES are folders). ``group_by`` names
    the index label whose values become the balanced groups; ``where`` keeps
    the rows where an expression holds (``--where``).
    """
    single = len(values) == 1 and str(values[0]).lower().endswith(".parquet")
    if index is None and not single:
        if group_by is not None:
            raise click.UsageError("--group-by LABEL needs a corpus index (--index corpus.parquet).")
        if where is not None:
            raise click.UsageError("--where needs a corpus index (CORPUS.parquet): it filters the index's rows.")
        if weight_by is not None:
            raise click.UsageError("--weight-by needs a corpus index (CORPUS.parquet): it weighs the index's rows.")
        return None
    if index is not None and values:
        raise click.UsageError("give --index or SOURCES, not both: the index already lists the files.")
    path = index if index is not None else str(values[0])
    from audiotree.io import storage

    if not storage.is_url(path):
        if not os.path.isfile(path):
            raise click.BadParameter(f"'{path}' does not exist.", param_hint="'--index'")
        path = os.path.abspath(path)
    return Sources(groups={}, pool=[], index=path, group_by=group_by, where=where, weight_by=weight_by)


def build_dataset(sources: Sources, pipeline: PipelineOptions, *, num_epochs: int | None = None):
    """The configured dataset: balanced when groups are named, else one pool."""
    from audiotree.sources import Corpus, Output, create_audio_dataset, create_balanced_audio_dataset

    common = dict(
        shuffle=pipeline.shuffle, num_epochs=num_epochs, shuffle_seed=pipeline.seed, sample_rate=pipeline.sample_rate,
        output=Output(mono=pipeline.mono), duration=pipeline.duration, excerpt=pipeline.excerpt_config(),
    )
    policy = {"on_read_error": pipeline.on_read_error}
    if sources.index is not None:
        if sources.group_by is not None:
            return create_balanced_audio_dataset(
                corpus=Corpus(index=sources.index, group_by=sources.group_by, where=sources.where,
                              weight_by=sources.weight_by, labels=sources.labels or None, **policy),
                weights=pipeline.weights, **common)
        return create_audio_dataset(corpus=Corpus(index=sources.index, where=sources.where, weight_by=sources.weight_by,
                                                  labels=sources.labels or None, **policy), **common)
    if sources.balanced:
        return create_balanced_audio_dataset(sources.groups, weights=pipeline.weights, corpus=Corpus(**policy),
                                             **common)
    return create_audio_dataset(sources.pool, corpus=Corpus(**policy), **common)


# ------------------------------------------------------------------ output
def stdout_console():
    """Tables and reports. No markup: paths and decoder messages may contain [brackets]."""
    from rich.console import Console

    return Console(highlight=False, markup=False, soft_wrap=False)


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False)


def progress_bar(console, *, transient: bool = True):
    """A rich progress bar on ``console`` (drawn only on a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, transient=transient, disable=not console.is_terminal,
    )


def fmt_rate(items_per_second: float) -> str:
    return f"{items_per_second:,.1f}"


# ------------------------------------------------------------------ captions of plots
def describe_sources(sources: Sources, *, files: int | None = None) -> str:
    """SOURCES in one line for a plot caption: ``speech=data/speech, music=data/music (24 files)``."""
    text = ", ".join(f"{name}={p}" if name else p for name, p in sources.labelled())
    if len(text) > 90:
        text = text[:87] + "..."
    return text + (f" ({files} files)" if files is not None else "")


def describe_pipeline(pipeline: PipelineOptions) -> str:
    """The dataset options in one line for a plot caption."""
    text = (f"{pipeline.duration:g} s excerpts at {pipeline.sample_rate} Hz, "
            f"{'mono' if pipeline.mono else 'all channels'}, strategy {pipeline.strategy}")
    if pipeline.strategy == "loudest":
        text += f" (cutoff {pipeline.cutoff_for_plots:g} LUFS)"
    if pipeline.weights:
        text += ", weights " + " / ".join(f"{k} {v:g}" for k, v in pipeline.weights.items())
    return text
