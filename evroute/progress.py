"""Progress on stderr while something slow is built (a network, a kernel, a factor, a truth).

Library code marks its slow steps with :func:`stage`; nothing is shown unless a command turned
it on with :func:`configure` (``evroute ... --progress``; by default a command shows it when
stderr is a terminal, ``--no-progress`` silences it). A stage is a rich spinner with a line of
text; it is never shown when stderr is not a terminal, and never inside another live display
(a run's progress bar): then the stage is silent.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

__all__ = ["configure", "enabled", "stage", "counter"]

_state = {"enabled": False}


def configure(show: bool | None) -> bool:
    """Turn stage spinners on (True), off (False) or on when stderr is a terminal (None); returns
    whether they are on."""
    _state["enabled"] = bool(sys.stderr.isatty() if show is None else show)
    return _state["enabled"]


def enabled() -> bool:
    """Whether :func:`stage` shows anything."""
    return _state["enabled"]


@contextmanager
def stage(message: str):
    """A spinner with ``message`` on stderr while the block runs (when :func:`enabled`)."""
    if not _state["enabled"]:
        yield
        return
    from rich.console import Console
    from rich.errors import LiveError

    console = Console(stderr=True)
    status = console.status(message, spinner="dots")
    try:
        status.start()
    except LiveError:  # inside another live display: stay silent
        yield
        return
    try:
        yield
    finally:
        status.stop()


@contextmanager
def counter(message: str):
    """A progress bar with ``message`` on stderr (when :func:`enabled`); yields
    ``tick(done, total)`` to call as work completes (a no-op when nothing is shown)."""
    if not _state["enabled"]:
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.errors import LiveError
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn(message), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(message, total=None)
    try:
        bar.start()
    except LiveError:
        yield lambda done, total: None
        return
    try:
        yield lambda done, total: bar.update(task, completed=done, total=total)
    finally:
        bar.stop()
