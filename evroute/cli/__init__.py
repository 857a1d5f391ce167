"""The ``evroute`` command line (typer). It only parses options and calls the library.

The commands live in their own modules (:data:`COMMANDS`), imported when one of them runs or
shows its help, and those modules import the numerical libraries only inside a command: so
``evroute --version``, ``--help`` and usage errors answer at once.

Every error the user can cause is an :class:`~evroute.errors.EvrouteError`, printed as one
line ``error: ...`` on stderr with exit code 2.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
import warnings
from typing import Annotated

import typer
import typer.core
import typer.main

from .. import __version__
from ..errors import EvrouteError, EvrouteWarning, Interrupted
from .options import HELP_STYLE, NETWORK_OPTION, PanelCommand, moved

__all__ = ["app", "main", "entry", "COMMANDS"]

#: Every command: its module, the command's name in that module's app (None: the whole app is a
#: group of commands) and its one-line help (the command's own first line, checked by the tests).
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "simulate": ("evroute.cli.run", "simulate", "Run one bandit simulation (Algorithm 1) and write a run directory."),
    "compare": ("evroute.cli.experiment", "compare", "Run a grid of bandit runs (route × lengthscale × policy × "
                "seed, and any --sweep) and summarise it."),
    "plot": ("evroute.cli.experiment", "plot", "Figures: cumulative regret, β_t, regret vs lengthscale, Nyström "
             "dictionary size, the candidate priors' survival, the lower bounds' coverage, exploration maps (PNG "
             "and SVG)."),
    "export": ("evroute.cli.experiment", "export", "Routes driven, the optimal route and per-edge visits / "
               "posterior as GeoJSON, HTML or GeoPackage."),
    "route": ("evroute.cli.run", "route", "The energy-optimal (exact, negative energies allowed), shortest and "
              "fastest routes, and the route under a fleet's drives or its prior file."),
    "models": ("evroute.cli.run", "models", "List the registered components with their options, defaults and "
               "capabilities: posterior backends (--model), policies (--policy), truths (--truth) and closure "
               "patterns (its closures)."),
    "networks": ("evroute.cli.networks", None, "Road networks: list, inspect, download today's OSM."),
    "data": ("evroute.cli.data", None, "The reference datasets (Monaco, Luxembourg, Luxembourg's terrain): "
             "download, verify, list."),
    "drives": ("evroute.cli.drives", None, "Drives in: GPS traces with energy map-matched into the network's "
               "edges."),
    "prior": ("evroute.cli.prior", None, "The agents' prior from measured traversals: fit a fleet's drives into "
              "one prior file, check the kernel on held-out drives."),
    "sumo": ("evroute.cli.sumo", None, "SUMO's EV model in simulated traffic, a physical truth (pip install "
             "\"evroute[sumo]\")."),
    "vehicles": ("evroute.cli.vehicles", None, "Vehicles: Eq. 8's presets and FASTSim's cars; fit Eq. 8 plus an "
                 "auxiliary power to a real car's power train."),
}


#: A hyphen that text wrapping does not break at (U+2011), put in for the wrapping only.
_UNBROKEN_HYPHEN = "\u2011"


class HelpFormatter(typer.Context.formatter_class):
    """click's help formatter, wrapping at the terminal's width but never at a hyphen: a spec
    such as ``gp-ucb[beta_scale=0.5]`` stays on one line, as it must be typed."""

    def _unbroken(self, write, text, *args, **kwargs) -> None:
        write(text, *args, **kwargs)
        self.buffer[:] = [s.replace(_UNBROKEN_HYPHEN, "-") for s in self.buffer]

    def write_text(self, text: str) -> None:
        self._unbroken(super().write_text, text.replace("-", _UNBROKEN_HYPHEN))

    def write_dl(self, rows, *args, **kwargs) -> None:
        rows = [(term, help_text.replace("-", _UNBROKEN_HYPHEN)) for term, help_text in rows]
        self._unbroken(super().write_dl, rows, *args, **kwargs)


class Context(typer.Context):
    """The context of every evroute command: help through :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


def _with_our_help(command):
    """The command (and a group's commands) formatting help with :class:`HelpFormatter`, its
    options by panel (:class:`~evroute.cli.options.PanelCommand`)."""
    command.context_class = Context
    if type(command) is typer.core.TyperCommand:
        command.__class__ = PanelCommand
    for sub in getattr(command, "commands", {}).values():
        _with_our_help(sub)
    return command


class LazyGroup(typer.core.TyperGroup):
    """The root group: a command's module is imported when the command is looked up (to run
    it or show its help), and ``evroute --help`` lists the commands from :data:`COMMANDS`."""

    context_class = Context

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attr, _ = COMMANDS[name]
        group = typer.main.get_group(importlib.import_module(module).app)
        if attr is None:
            group.name = name
            return _with_our_help(group)
        return _with_our_help(group.commands[attr])

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, help_text) for name, (_, _, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="evroute",
    help="Online energy-efficient routing of electric vehicles with combinatorial GP bandits.",
    no_args_is_help=True,
    cls=LazyGroup,
    **HELP_STYLE,
)


def _warn_one_line(message, category, filename, lineno, file=None, line=None):
    """Print evroute's own warnings as one line; other libraries' internal warnings never reach
    the user (set EVROUTE_DEBUG=1 to see them)."""
    if issubclass(category, EvrouteWarning) or os.environ.get("EVROUTE_DEBUG"):
        print(f"warning: {message}", file=sys.stderr)


def _version(value: bool) -> None:
    if value:
        print(f"evroute {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_version, is_eager=True)] = False):
    """evroute: learn the least-energy route of a repeated EV trip."""


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------


_INTERRUPTED = "interrupted: nothing was written; rerun the same command"


def _terminate(signum, frame):
    """SIGTERM: unwind like Ctrl-C, so temporary files are removed and the state is resumable."""
    raise KeyboardInterrupt


def _usage_line(exc) -> str:
    """A click usage error as one line: its message and where to find the command's help."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    command = ctx.command.name if ctx is not None and ctx.command is not None else None
    instead = moved(command, getattr(exc, "option_name", None) or "")
    if instead is not None and type(exc).__name__ == "NoSuchOption":
        message += f"; write {instead}"
    elif command in NETWORK_OPTION and "unexpected extra argument" in message:
        message += "; the network is --network NAME"
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None and ctx.command_path else ""
    return f"error: {message}{where}"


def _terminal_width() -> int:
    """Help wraps at the terminal's width (80 columns when it cannot be told), at most 120."""
    try:
        columns = os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = int(os.environ.get("COLUMNS", "80") or 80)
    return max(60, min(columns, 120))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; EvrouteError and usage errors → one line ``error: ...`` on stderr and exit
    code 2; Ctrl-C or SIGTERM → one line ``interrupted: ...`` and exit code 130; anything else is
    a bug in evroute: one line and exit code 1 (``EVROUTE_DEBUG=1`` prints the traceback)."""
    import signal

    warnings.showwarning = _warn_one_line
    handlers = {}
    try:  # Ctrl-C works even when started with SIGINT ignored (a background job of a script)
        handlers = {sig: signal.signal(sig, h) for sig, h in
                    ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, _terminate))}
    except ValueError:  # not the main thread (library use): leave the handlers alone
        pass
    try:
        rv = app(args=argv, standalone_mode=False, max_content_width=_terminal_width(),
                 terminal_width=_terminal_width())
    except EvrouteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(_INTERRUPTED, file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # click usage errors and friends (typer vendors click)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            print(_usage_line(exc), file=sys.stderr)
            return 2
        if type(exc).__name__ == "Abort":
            print("error: aborted", file=sys.stderr)
            return 1
        if isinstance(exc, OSError):
            where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
            print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
            return 2
        if os.environ.get("EVROUTE_DEBUG"):
            traceback.print_exc()
        message = " ".join(str(exc).split())[:200]
        print(f"error: internal error ({type(exc).__name__}: {message}); this is a bug in evroute: please "
              "report it with the command (EVROUTE_DEBUG=1 prints the traceback)", file=sys.stderr)
        return 1
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
    if rv == 130:  # typer turns a KeyboardInterrupt outside our commands' handlers into 130
        print(_INTERRUPTED, file=sys.stderr)
        return 130
    return rv if isinstance(rv, int) else 0


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
