"""Command-line options shared by the commands: those made from the run settings' declarations
(:data:`evroute.settings.RUN_SETTINGS`, for ``evroute simulate`` and ``evroute compare``) and the
few every command module uses (``--osm``, ``--dem``, ``--vehicle``, ``--json``, ``--overwrite``,
``--progress``). Light: the command modules import it at the top and the numerical libraries
only inside a command, so ``--help`` answers at once."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated

import typer

from ..settings import RUN_SETTINGS

__all__ = ["with_settings", "HELP_STYLE", "OsmOpt", "DemOpt", "JsonOpt", "VehicleOpt", "OverwriteFileOpt",
           "ProgressOpt"]

#: Help texts are plain text: no markup eats a spec's [...] (``gp-ucb[beta=002]`` is shown as typed).
HELP_STYLE = {"rich_markup_mode": None, "add_completion": False, "pretty_exceptions_enable": False}

OsmOpt = Annotated[Path | None, typer.Option("--osm", help="OSM XML file to use for the network.")]
DemOpt = Annotated[Path | None, typer.Option("--dem", help="DEM raster (GeoTIFF/HGT) for node elevations.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
VehicleOpt = Annotated[str | None, typer.Option(
    "--vehicle", help="Vehicle preset name or JSON file (default: the paper's SUMO EV).")]
OverwriteFileOpt = Annotated[bool, typer.Option(
    "--overwrite", help="Replace an existing file evroute did not write (links, folders and devices never).")]
ProgressOpt = Annotated[bool | None, typer.Option(
    "--progress/--no-progress", help="Spinners while networks, kernels and factors are built (default: on a terminal).")]


def with_settings(names, *, show_defaults: bool = True, table=None):
    """Add the command-line options of some run settings (:data:`evroute.settings.RUN_SETTINGS`) to a
    command whose last parameter is ``**settings``: each option's flag, help, bounds and default
    come from its one declaration, so ``simulate`` and ``compare`` share them and no help is stale.
    The command receives the given values (converted by their declaration) in ``settings``; those
    not given are left out. ``show_defaults=False`` for a command whose defaults come from
    elsewhere (a preset). ``table``: another mapping of names to :class:`evroute.specs.Option`
    (a component's declared options, e.g. the sumo truth's for ``evroute sumo atlas``)."""
    declared = table if table is not None else RUN_SETTINGS

    def decorate(func):
        sig = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)  # the command's own, resolved
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
                  if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for name in names:
            opt = declared[name]
            help_text = opt.describe(with_default=show_defaults) + "."
            if opt.default is False:  # a flag: given or not
                annotation = Annotated[bool, typer.Option(opt.cli_flag, *opt.flag_aliases, help=help_text)]
                default = False
            else:
                annotation = Annotated[str | None, typer.Option(opt.cli_flag, *opt.flag_aliases, help=help_text,
                                                                metavar=opt.metavar, show_default=False)]
                default = None
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))

        @functools.wraps(func)
        def command(**kwargs):
            # converted here, so that a bad value's error names the flag the user typed
            given = {k: declared[k](kwargs[k], declared[k].cli_flag) for k in names
                     if kwargs.get(k) not in (None, False)}
            for k in names:
                kwargs.pop(k, None)
            return func(**kwargs, **given)

        command.__signature__ = sig.replace(parameters=params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
