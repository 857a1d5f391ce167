"""Command-line options made from the run settings' declarations (:data:`evroute.config.RUN_SETTINGS`),
shared by ``evroute simulate`` and ``evroute compare``."""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Annotated

import typer

from .config import RUN_SETTINGS

__all__ = ["with_settings"]


def with_settings(names, *, show_defaults: bool = True):
    """Add the command-line options of some run settings (:data:`evroute.config.RUN_SETTINGS`) to a
    command whose last parameter is ``**settings``: each option's flag, help, bounds and default
    come from its one declaration, so ``simulate`` and ``compare`` share them and no help is stale.
    The command receives the given values (text, or True for a flag) in ``settings``; those not
    given are left out. ``show_defaults=False`` for a command whose defaults come from elsewhere
    (a preset)."""

    def decorate(func):
        sig = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)  # the command's own, resolved
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
                  if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for name in names:
            opt = RUN_SETTINGS[name]
            help_text = opt.describe(with_default=show_defaults) + "."
            if opt.default is False:  # a flag: given or not
                annotation = Annotated[bool, typer.Option(opt.cli_flag, help=help_text)]
                default = False
            else:
                annotation = Annotated[str | None, typer.Option(opt.cli_flag, help=help_text, metavar=opt.metavar,
                                                                show_default=False)]
                default = None
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))

        @functools.wraps(func)
        def command(**kwargs):
            # converted here, so that a bad value's error names the flag the user typed
            given = {k: RUN_SETTINGS[k](kwargs[k], RUN_SETTINGS[k].cli_flag) for k in names
                     if kwargs.get(k) not in (None, False)}
            for k in names:
                kwargs.pop(k, None)
            return func(**kwargs, **given)

        command.__signature__ = sig.replace(parameters=params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
