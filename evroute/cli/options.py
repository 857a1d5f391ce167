"""The command-line options every command shares, each declared once, and the help's panels.

Options are shown in four panels (typer's ``rich_help_panel``, laid out in plain text by
:class:`PanelCommand`): **World** (the network, the trip, the vehicle, the truth), **Agent** (the
policy and its prior), **Run** (the schedule, seeds, processes, a config file) and **Output**
(where and how results are written). The options of ``evroute simulate`` and ``evroute compare``
are made from the run settings' declarations (:data:`evroute.settings.RUN_SETTINGS`,
:func:`with_settings`); the others shared by several commands are declared here (``--network``,
``--osm``, ``--dem``, ``--route``, ``--vehicle``, ``--fleet-vehicle``, ``--seed``, ``--config``,
``--overwrite``, ``--json``, ``--progress``), so a flag means one thing in every command. Light: the
command modules import it at the top and the numerical libraries only inside a command, so
``--help`` answers at once.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from pathlib import Path
from typing import Annotated

import typer
import typer.core

from ..presets import PRESETS
from ..settings import (
    AGENT_SETTINGS,
    ENVIRONMENT_SETTINGS,
    FLAG_SETTINGS,
    KERNEL_SETTINGS,
    LOOP_SETTINGS,
    NETWORK_SETTINGS,
    OPTIMUM_SETTINGS,
    PRIOR_SETTINGS,
    ROUTE_SETTINGS,
    RUN_SETTINGS,
    SCALE_SETTINGS,
    VEHICLE_SETTINGS,
    spelling,
    unfold_settings,
)
from ..specs import format_value

__all__ = ["with_settings", "HELP_STYLE", "PanelCommand", "WORLD", "AGENT", "RUN", "OUTPUT", "PANELS",
           "NetworkOpt", "OsmOpt", "DemOpt", "RouteOpt", "VehicleOpt", "FleetVehicleOpt", "SeedOpt", "ConfigOpt",
           "OverwriteOpt", "JsonOpt", "ProgressOpt", "vehicle_option", "fleet_vehicle_option", "JobsOpt", "GpsNoiseOpt", "GeojsonOpt", "HtmlOpt", "PriorOpt", "out_option", "MOVED", "moved"]

#: Help texts are plain text: no markup eats a spec's [...] (``gp-ucb[beta=002]`` is shown as typed).
HELP_STYLE = {"rich_markup_mode": None, "add_completion": False, "pretty_exceptions_enable": False}

#: The help's panels, in the order they are shown (options of no panel follow, under "Options").
WORLD, AGENT, RUN, OUTPUT = "World", "Agent", "Run", "Output"
PANELS = (WORLD, AGENT, RUN, OUTPUT)

#: The panel of each run setting.
SETTING_PANELS: dict[str, str] = {
    **{o.name: WORLD for o in (*NETWORK_SETTINGS, *ROUTE_SETTINGS, *VEHICLE_SETTINGS, *ENVIRONMENT_SETTINGS)},
    **{o.name: AGENT for o in (*AGENT_SETTINGS, *KERNEL_SETTINGS, *SCALE_SETTINGS, *PRIOR_SETTINGS)},
    **{o.name: RUN for o in (*LOOP_SETTINGS, *OPTIMUM_SETTINGS)},
}

#: What help says a setting's default is where the declaration's is None (taken from elsewhere).
DEFAULT_TEXT = {"route": "A", "vehicle": "sumo-ev", "prior_std": "0.25 sigma_det", "noise_std": "0.1 sigma_det",
                "priors": "every preset", "prior_turns": "auto"}


class PanelCommand(typer.core.TyperCommand):
    """A command whose help lists its options by panel (:data:`PANELS`), in plain text."""

    def format_options(self, ctx, formatter) -> None:
        groups: dict[str, list] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name == "option":
                term, text = record  # (click shows a default given as text in parentheses)
                record = (term, re.sub(r"\[default: \((.*)\)\]$", r"[default: \1]", text))
                groups.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        order = [p for p in PANELS if p in groups] + [p for p in groups if p not in PANELS]
        for panel in order:
            with formatter.section(panel):
                formatter.write_dl(groups[panel])


def _setting_option(name: str, panel: str | None = None, **kwargs):
    """A run setting as the typer option of a command that is not ``simulate`` or ``compare`` (its
    help, flag and metavar from the one declaration)."""
    opt = RUN_SETTINGS[name]
    return typer.Option(opt.cli_flag, help=opt.describe(with_default=False, brief=True) + ".", metavar=opt.metavar,
                        rich_help_panel=panel or SETTING_PANELS[name], **kwargs)


#: ``--network NAME``: what the command works on (a command's default, or required).
NetworkOpt = Annotated[str | None, _setting_option("network")]
OsmOpt = Annotated[Path | None, _setting_option("osm", show_default=False)]
DemOpt = Annotated[Path | None, _setting_option("dem", show_default=False)]
#: ``--route TRIP``: a named route or two points.
RouteOpt = Annotated[str | None, _setting_option("route", show_default=DEFAULT_TEXT["route"])]


def vehicle_option(default: str = DEFAULT_TEXT["vehicle"]):
    """``--vehicle``: the vehicle driven, whose energy is counted (the agents', the routes'); its
    default as help says it."""
    return Annotated[str | None, _setting_option("vehicle", show_default=default)]


def fleet_vehicle_option(default: str = DEFAULT_TEXT["vehicle"]):
    """``--fleet-vehicle``: the vehicle that drove a fleet's traces (not the agents')."""
    return Annotated[str | None, typer.Option(
        "--fleet-vehicle", metavar="NAME|FILE", help="Vehicle that drove the traces: a preset or JSON file.",
        rich_help_panel=WORLD, show_default=default)]


VehicleOpt = vehicle_option()
FleetVehicleOpt = fleet_vehicle_option()
#: ``--seed``: the seed of everything the command draws at random.
SeedOpt = Annotated[int, _setting_option("seed", RUN)]
#: ``--config FILE`` or ``--preset NAME``: one option, a preset being a named config file.
ConfigOpt = Annotated[str | None, typer.Option(
    "--config", "--preset", metavar="FILE|PRESET",
    help=f"Config file, run directory or preset ({', '.join(PRESETS)}).",
    rich_help_panel=RUN, show_default=False)]
OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", help="Replace outputs that are there instead of refusing (never a link or a device).",
    rich_help_panel=OUTPUT)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.",
                                       rich_help_panel=OUTPUT)]
ProgressOpt = Annotated[bool | None, typer.Option(
    "--progress/--no-progress", help="Progress on stderr (default: on a terminal).", rich_help_panel=OUTPUT,
    show_default=False)]


#: ``--jobs``: processes side by side.
JobsOpt = Annotated[int | None, typer.Option("--jobs", help="Parallel processes (default: one per CPU).",
                                             rich_help_panel=RUN, show_default=False)]
#: ``--gps-noise``: the fixes' GPS noise (added by a simulation, assumed by the map matcher).
GpsNoiseOpt = Annotated[float, typer.Option("--gps-noise", help="GPS noise of the fixes, metres (sd); 0 to 500.",
                                            rich_help_panel=WORLD)]
#: ``--html``: an interactive map to write.
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Interactive HTML map (folium) to write.",
                                              rich_help_panel=OUTPUT)]
#: ``--prior``: a fleet's prior file (``evroute prior fit``).
PriorOpt = Annotated[Path | None, _setting_option("prior", show_default=False)]
#: ``--geojson``: a GeoJSON file to write.
GeojsonOpt = Annotated[str | None, typer.Option("--geojson", help="GeoJSON file to write (- for standard output).",
                                                rich_help_panel=OUTPUT)]


#: Where an option went that a command no longer has (its usage error says it): the flag, or
#: (command, flag) where it is one command's → how to write it.
MOVED: dict = {
    "--lengthscale": "--kernel KIND[lengthscale=...]", "--kappa": "--kernel KIND[kappa=...]",
    "--nu": "--kernel KIND[nu=...]", "--truth-lengthscale": "--truth NAME[lengthscale=...]",
    "--drift": "--truth NAME[drift=...]", "--truth-prior": "--truth NAME[prior=...]",
    "--closures": "--truth NAME[closures=...]", "--prior-turns": "--turns PRIOR",
    "--turn-kernel": "--turns PRIOR[kernel=...]", "--from": "--route LAT,LON:LAT,LON", "--to": "--route LAT,LON:LAT,LON",
    "--exact-optimum-time-limit": "exact_optimum_time_limit in a --config file", "--for-vehicle": "--vehicle",
    "--ray-address": "--executor ray[address=...]", "--lengthscales": "--sweep lengthscale=V1,V2",
    ("simulate", "--lengthscales"): "--kernel KIND[lengthscale=...]", ("compare", "--network"): "--routes NETWORK:ROUTE,...",
    ("compare", "--lengthscale"): "--sweep lengthscale=V1,V2", ("atlas", "--seed"): "--atlas-seed",
    ("drives", "--rate"): "--fix-rate", ("drives", "--vehicle"): "--fleet-vehicle", ("import", "--vehicle"): "--fleet-vehicle",
}
#: The commands whose network was their first argument (a usage error then says where it is).
NETWORK_OPTION = ("route", "atlas", "drives")


def moved(command: str | None, flag: str) -> str | None:
    """How to write an option the command has not: :data:`MOVED`'s word for it, or None."""
    return MOVED.get((command, flag)) or MOVED.get(flag)


def out_option(help_text: str, **kwargs):
    """A command's ``--out`` (what it writes differs: a run directory, a folder, a file)."""
    return typer.Option("--out", help=help_text, rich_help_panel=OUTPUT, **kwargs)


def with_settings(names=FLAG_SETTINGS, *, show_defaults: bool = True, axes=(), table=None):
    """Add the command-line options of some run settings (:data:`evroute.settings.RUN_SETTINGS`) to a
    command whose last parameter is ``**settings``: each option's flag, help, default and panel come
    from its one declaration, so ``simulate`` and ``compare`` share them and no help is stale. The
    settings folded into another's spec (``--kernel combined[nu=1]``: :data:`evroute.settings.FOLDS`)
    and a trip's points (``--route LAT,LON:LAT,LON``) are taken out of it. The command receives the
    given values (converted by their declaration, so that a bad value's error names the flag the
    user typed) in ``settings``; those not given are left out, and the folded settings named in
    ``axes`` are passed as given (``compare``'s axes: a lengthscale, the truth's). ``show_defaults=False``
    for a command whose defaults come from elsewhere. ``table``: another mapping of names to
    :class:`evroute.specs.Option` (a component's declared options, e.g. the sumo truth's for ``evroute
    sumo atlas``), taken one flag each."""
    declared = table if table is not None else RUN_SETTINGS
    spell = spelling if table is None else (lambda n: declared[n].cli_flag)

    def decorate(func):
        sig = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)  # the command's own, resolved
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
                  if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for name in names:
            opt = declared[name]
            help_text = opt.describe(with_default=False, brief=True)
            help_text = help_text[:1].upper() + help_text[1:] + "."
            panel = SETTING_PANELS.get(name, RUN if table is None else WORLD)
            if opt.default is False:  # a flag: given or not
                annotation = Annotated[bool, typer.Option(opt.cli_flag, *opt.flag_aliases, help=help_text,
                                                          rich_help_panel=panel)]
                default = False
            else:
                shown = DEFAULT_TEXT.get(name) if opt.default is None else format_value(opt.default)
                annotation = Annotated[str | None, typer.Option(
                    opt.cli_flag, *opt.flag_aliases, help=help_text, metavar=opt.metavar, rich_help_panel=panel,
                    show_default=(shown or False) if show_defaults else False)]
                default = None
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))

        @functools.wraps(func)
        def command(**kwargs):
            given = {k: kwargs.pop(k) for k in names if kwargs.get(k) not in (None, False)}
            for k in names:
                kwargs.pop(k, None)
            if table is None:
                given = {k: v for k, v in unfold_settings(given).items() if v is not None}
            converted = {k: v if k in axes else declared[k](v, spell(k)) for k, v in given.items()}
            return func(**kwargs, **converted)

        command.__signature__ = sig.replace(parameters=params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
