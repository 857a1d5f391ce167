"""Commands ``evroute vehicles ...``: the vehicles of Eq. 8 and the real cars of the powertrain
world. Thin: parse options, call :mod:`evroute.world.powertrain` (imported inside the command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..settings import POWERTRAINS, SUMO_TRUTH_OPTIONS
from .options import HELP_STYLE, WORLD, JsonOpt, OverwriteOpt, ProgressOpt, SeedOpt, out_option

app = typer.Typer(help="Vehicles: Eq. 8's presets and FASTSim's cars; fit Eq. 8 plus an auxiliary power to a real "
                  "car's power train.", no_args_is_help=True, **HELP_STYLE)


@app.command("list")
def vehicles_list_cmd(as_json: JsonOpt = False) -> None:
    """The vehicle presets (Eq. 8's parameters) and the FASTSim cars a powertrain world drives."""
    from ..physics.energy import load_vehicle, vehicle_names

    presets = {name: load_vehicle(name).to_dict() for name in vehicle_names()}
    if as_json:
        print(json.dumps({"presets": presets, "powertrains": POWERTRAINS}))
        return
    print("presets (--vehicle NAME, --priors NAME):")
    for name, v in presets.items():
        print(f"  {name}: {v['mass_kg']:g} kg, Cr {v['rolling_resistance']:g}, CdA "
              f"{v['drag_coefficient'] * v['frontal_area_m2']:.3g} m2, eta+ {v['eta_plus']:g}, eta- {v['eta_minus']:g}")
    print("FASTSim cars (--truth \"sumo[powertrain=NAME]\", evroute vehicles fit NAME; pip install \"evroute[fastsim]\"):")
    for name, resource in POWERTRAINS.items():
        print(f"  {name}: {resource.removesuffix('.yaml')}")


_AMBIENT = {o.name: o for o in SUMO_TRUTH_OPTIONS}["ambient_c"]


@app.command("fit")
def vehicles_fit_cmd(
    name: Annotated[str, typer.Argument(help=f"A FASTSim car ({', '.join(POWERTRAINS)}) or FASTSim vehicle file.",
                                        show_default=False)],
    out: Annotated[Path, out_option("The vehicle JSON file to write (for --vehicle FILE and --priors FILE).",
                                    show_default=False)],
    ambient_c: Annotated[float, typer.Option("--ambient-c", help="Ambient temperature (degrees C) of the power "
                                             "train's heating and air conditioning.", rich_help_panel=WORLD)] = 20.0,
    baseline: Annotated[str, typer.Option("--baseline", help="The vehicle (preset or JSON file) the fit is "
                                          "compared with on held-out drives.", rich_help_panel=WORLD)] = "sumo-ev",
    seed: SeedOpt = 0,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """Fit Eq. 8's parameters plus an auxiliary power to a FASTSim car's drives (steady segments
    of speed and grade) and write them as a vehicle file; print the error on held-out drives, per
    segment (an edge) and per drive (standard cycles and a city drive), beside --baseline."""
    from ..errors import EvrouteError
    from ..io import atomic_write_text, generator
    from ..physics.energy import load_vehicle
    from ..progress import configure as configure_progress
    from ..runs.directory import check_output_file
    from ..settings import powertrain_spec
    from ..world.powertrain import fit_vehicle

    ambient = _AMBIENT(ambient_c, "--ambient-c")
    if not 0 <= seed < 2**31:
        raise EvrouteError(f"--seed must be 0 to 2^31-1, got {seed}")
    if out.suffix.lower() != ".json":
        raise EvrouteError(f"--out must name a .json file (--vehicle reads vehicle files by their suffix), got {out}")
    load_vehicle(baseline)
    check_output_file(out, overwrite)  # before any work
    spec = powertrain_spec("vehicles fit", name)  # (and FASTSim installed?)
    configure_progress(progress)
    fit = fit_vehicle(spec, ambient, seed=seed, baseline=baseline)
    v, report = fit.vehicle, fit.report
    record = {"generator": generator(),
              "description": f"Eq. 8 plus an auxiliary power fitted to FASTSim's {spec} at {ambient:g} degrees C "
                             "(evroute vehicles fit)",
              **{k: x for k, x in v.to_dict().items() if k != "name"}, "aux_power_w": v.aux_power_w,
              "rotating_mass_kg": v.rotating_mass_kg, "fit": report}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(record, indent=2))
    if as_json:
        print(json.dumps(report))
        return
    p = report["parameters"]
    print(f"{spec} at {ambient:g} degrees C: {p['mass_kg']:g} kg (+{p['rotating_mass_kg']:.1f} kg rotating), Cr "
          f"{p['rolling_resistance']:.4f}, Cd {p['drag_coefficient']:.3f} x {p['frontal_area_m2']:.3f} m2, eta+ "
          f"{p['eta_plus']:.3f}, eta- {p['eta_minus']:.3f}, auxiliary {p['aux_power_w']:.0f} W (fitted on "
          f"{report['train']['segments']} steady segments: rmse {report['train']['fit']['rmse_wh']:.2f} Wh)")
    h = report["held_out_segments"]
    for label, e in (("fit", h["fit"]), (report["baseline"], h["baseline"])):
        print(f"held-out segments ({e['n']}), {label}: rmse {e['rmse_wh']:.2f} Wh, bias {e['bias_wh']:+.2f} Wh, median "
              f"|error| {100 * e['median_abs_rel']:.1f} %")
    for d in report["held_out_drives"]:
        fs = d["fastsim_wh"]
        print(f"held-out drive {d['drive']} ({d['km']:.1f} km): FASTSim {fs:.1f} Wh ({fs / d['km']:.0f} Wh/km), "
              f"fit {d['fit_wh']:.1f} Wh ({100 * (d['fit_wh'] - fs) / fs:+.1f} %), {report['baseline']} "
              f"{d['baseline_wh']:.1f} Wh ({100 * (d['baseline_wh'] - fs) / fs:+.1f} %)")
    print(f"wrote {out}; use it: --vehicle {out}, or --priors with the other cars' fits")
