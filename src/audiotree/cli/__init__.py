"""The ``audiotree`` command: ``demo``, ``scan``, ``preview``, ``bench`` and ``render``.

Every command mirrors the Python API's keyword names (``--sample-rate``,
``--duration``, ``--strategy``, ``--weights`` ...). Bad arguments and unusable
inputs end with one ``Error: ...`` line on stderr and exit code 2, never a
traceback (set ``AUDIOTREE_DEBUG=1`` to print the traceback behind the line).
A command stopped by SIGTERM exits 143 (Ctrl-C: 130); ``render``, which keeps
its finished parts, then says that rerunning the same command resumes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from typing import Sequence

import click

from audiotree.cli._common import CliError, known_errors, one_line

__all__ = ["cli", "main", "CliError"]

_COMMANDS = {
    "demo": ("audiotree.cli.demo", "demo"),
    "scan": ("audiotree.cli.scan", "scan"),
    "preview": ("audiotree.cli.preview", "preview"),
    "bench": ("audiotree.cli.bench", "bench"),
    "render": ("audiotree.cli.render", "render"),
    "index": ("audiotree.cli.index", "index"),
}


class _Group(click.Group):
    """Lists the commands in a fixed order and imports each one only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str):
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        import importlib

        module, attr = target
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context):
        # Bad input found by the library (a ValueError naming the argument, a missing
        # folder, an unreadable file): one line naming the command, exit code 2.
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            # click ends `--help` and `--version` with Exit, and Ctrl-C with Abort; both
            # subclass RuntimeError, which known_errors() turns into one-line errors.
            raise
        except known_errors() as exc:
            where = f"audiotree {ctx.invoked_subcommand}: " if ctx.invoked_subcommand else ""
            raise CliError(f"{where}{one_line(_cli_words(exc))}") from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="audiotree", prog_name="audiotree", message="%(prog)s %(version)s")
def cli() -> None:
    """Endless, balanced, reproducible streams of audio excerpts.

    \b
    SOURCES are folders, files or globs. Name groups to mix them by weight:
      audiotree preview speech=data/speech music=data/music --weights speech=0.7
    Plain folders (no GROUP=) are read as one pool.
    """


#: Commands that keep their finished work and pick up where they stopped when run again.
_RESUMABLE = ("render",)
#: How long a SIGTERM waits while a finaliser runs (a raise there would be swallowed).
_SIGTERM_RETRY_SECONDS = 0.05


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread so that pools shut down and writers keep what they committed."""


def _in_finaliser(frame) -> bool:
    # An exception raised inside __del__ or a weakref callback is printed ("Exception ignored in ...")
    # and dropped, so the process would go on, and that finaliser would leave its work half done.
    while frame is not None:
        if frame.f_code.co_name in ("__del__", "_release_at_exit") or \
                frame.f_code.co_filename.endswith(("weakref.py", "shared_memory.py")):
            return True
        frame = frame.f_back
    return False


def _cli_words(exc: BaseException) -> str:
    """The message of ``exc``, naming command-line options where it has such a variant."""
    cli_message = getattr(exc, "cli_message", None)
    return cli_message() if callable(cli_message) else str(exc)


def _exit_on_sigterm(signum, frame) -> None:
    if _in_finaliser(frame):  # ask again once the finaliser has finished
        timer = threading.Timer(_SIGTERM_RETRY_SECONDS, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    raise Terminated(128 + signum)


def _resume_hint(argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args if not a.startswith("-")), None)
    if command in _RESUMABLE:
        return f"audiotree {command}: interrupted; its finished parts are kept. Rerun the same command to resume."
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (2 for bad arguments)."""
    debug = bool(os.environ.get("AUDIOTREE_DEBUG"))
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="audiotree", standalone_mode=False)
    except Terminated as exc:
        hint = _resume_hint(argv)
        if hint:
            click.echo(hint, err=True)
        return int(exc.code)
    except click.exceptions.Abort:
        hint = _resume_hint(argv)
        click.echo(f"Aborted. {hint}".strip(), err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as exc:
        # Bare `audiotree`: the whole usage, laid out as click formats it, not one line.
        click.echo(exc.format_message(), err=True)
        return exc.exit_code
    except click.ClickException as exc:
        if debug:
            traceback.print_exception(exc)
        message = one_line(exc.format_message())
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path != "audiotree" else ""
        click.echo(f"Error: {where}{message}", err=True)
        return exc.exit_code
    except known_errors() as exc:
        if debug:
            traceback.print_exception(exc)
        click.echo(f"Error: {one_line(_cli_words(exc))}", err=True)
        return 2
    except BrokenPipeError:
        # `audiotree scan ... | head`: stop quietly like other Unix tools.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the interpreter closes it at exit
        except OSError:
            pass
        return 1
    return code if isinstance(code, int) else 0

