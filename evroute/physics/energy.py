"""The deterministic EV energy model (paper 003, Eq. 8; App. B.3, Table 2).

For an edge of length ℓ (m), inclination α = atan(grade) (rad) and speed v (m/s)::

    F·ℓ = m g ℓ sin α + m g C_r ℓ cos α + ½ C_d A ρ ℓ v²          [J]
    E_det = F·ℓ / (3600 η⁺)      if F·ℓ ≥ 0   (traction)
          = F·ℓ · η⁻ / 3600      if F·ℓ < 0   (regenerative braking)  [Wh]

evroute splits the paper's single η into η⁺ (power train) and η⁻ (recuperation), as SUMO does.

Two optional parameters describe a real car beyond the paper's: an auxiliary power P_aux (W:
electronics, heating, air conditioning) drawn for as long as the car is on the edge, so that
E_det = Eq. 8 + P_aux ℓ / (3600 v), and the mass equivalent of the rotating parts, which counts
only where the car changes speed (:func:`kinetic_energy_wh`). The paper's presets keep P_aux = 0
and SUMO's 40 kg.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from ..errors import EvrouteError
from ..registry import load_registry
from ..validate import number_in

DEFAULT_VEHICLE = "sumo-ev"

#: The range of every vehicle parameter (SI units), with why: wide enough for any road vehicle
#: on any planet one might simulate, narrow enough that Eq. 8 stays finite on any road.
VEHICLE_RANGES: dict[str, tuple[float, float, bool, str]] = {
    "mass_kg": (0.0, 1e5, True, "kg; a 40-tonne truck is 4e4"),
    "rolling_resistance": (0.0, 1.0, False, "a coefficient; tyres on asphalt 0.006-0.015"),
    "frontal_area_m2": (0.0, 100.0, False, "m²; a car 2-3, a bus 8"),
    "drag_coefficient": (0.0, 10.0, False, "a coefficient; cars 0.2-0.4"),
    "eta_plus": (0.0, 1.0, True, "power-train efficiency"),
    "eta_minus": (0.0, 1.0, False, "recuperation efficiency"),
    "g": (0.0, 100.0, True, "m/s²; Earth 9.81"),
    "air_density": (0.0, 100.0, False, "kg/m³; air at sea level 1.2"),
    "aux_power_w": (0.0, 1e5, False, "W; a car's electronics 200-300, its heating up to 5000"),
    "rotating_mass_kg": (0.0, 1e4, False, "kg; the mass equivalent of wheels and motor, SUMO's 40"),
}

#: The parameters a vehicle file may leave out, and their defaults: the paper's car has no
#: auxiliary load and SUMO's rotating mass (they are left out of :meth:`Vehicle.to_dict` at these
#: values, so that the presets' records and cache keys are what they were).
OPTIONAL_PARAMETERS: dict[str, float] = {"aux_power_w": 0.0, "rotating_mass_kg": 40.0}


@dataclass(frozen=True)
class Vehicle:
    """Vehicle and environment parameters of the energy model (SI units)."""

    mass_kg: float = 1830.0
    rolling_resistance: float = 0.01
    frontal_area_m2: float = 2.6
    drag_coefficient: float = 0.35
    eta_plus: float = 0.98
    eta_minus: float = 0.96
    g: float = 9.82
    air_density: float = 1.2
    name: str = DEFAULT_VEHICLE
    aux_power_w: float = 0.0
    rotating_mass_kg: float = 40.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "name":
                continue
            lo, hi, lo_open, why = VEHICLE_RANGES[f.name]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise EvrouteError(f"vehicle {self.name!r}: {f.name} must be a number, got {value!r:.40}")
            number_in(f"vehicle {self.name!r}: {f.name}", value, lo, hi=hi, lo_open=lo_open, why=why)

    def to_dict(self) -> dict:
        """The parameters as a plain dict (for config files and cache keys); the optional ones
        (:data:`OPTIONAL_PARAMETERS`) only where they differ from their defaults."""
        d = asdict(self)
        for k, default in OPTIONAL_PARAMETERS.items():
            if d[k] == default:
                del d[k]
        return d


def vehicle_names() -> list[str]:
    """Names of the built-in vehicle presets, the paper's first."""
    return list(load_registry("vehicles"))


#: The members of a vehicle file that are notes, not parameters: what it is, the preset it
#: inherits from, the program that wrote it and how it was fitted (``evroute vehicles fit``).
FILE_NOTES = frozenset({"description", "base", "generator", "fit"})


def _vehicle_from_mapping(name: str, spec: dict, presets: dict | None = None) -> Vehicle:
    """A Vehicle from a mapping of every parameter, or of some with ``"base": PRESET``
    (the others are inherited from that preset, explicitly)."""
    known = {f.name for f in fields(Vehicle)}
    unknown = sorted(set(spec) - known - FILE_NOTES)
    if unknown:
        raise EvrouteError(f"vehicle {name!r}: unknown parameter(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(known - {'name'}))}")
    params = {k: v for k, v in spec.items() if k in known and k != "name"}
    base = spec.get("base")
    if base is not None:
        presets = presets if presets is not None else load_registry("vehicles")
        if not isinstance(base, str) or base not in presets:
            raise EvrouteError(f"vehicle {name!r}: unknown base {base!r}; presets: {', '.join(presets)}")
        inherited = {k: v for k, v in presets[base].items() if k in known and k != "name"}
        params = {**inherited, **params}
    missing = sorted(known - {"name"} - set(OPTIONAL_PARAMETERS) - set(params))
    if missing:
        raise EvrouteError(f"vehicle {name!r}: missing parameter(s) {', '.join(missing)}; give every "
                           f"parameter, or \"base\": \"{DEFAULT_VEHICLE}\" to inherit the others from a preset")
    values = {}
    for k, v in params.items():
        lo, hi, lo_open, why = VEHICLE_RANGES[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise EvrouteError(f"vehicle {name!r}: {k} must be a number, got {v!r:.40}")
        values[k] = number_in(f"vehicle {name!r}: {k}", v, lo, hi=hi, lo_open=lo_open, why=why)
    return Vehicle(name=name, **values)


def load_vehicle(spec: str | None = None) -> Vehicle:
    """Resolve a vehicle preset name or a JSON file path.

    Parameters
    ----------
    spec : str, optional
        A preset name (see :func:`vehicle_names`) or the path of a JSON file holding the
        fields of :class:`Vehicle`: every one, or some with ``"base": "<preset>"`` to
        inherit the others from that preset (nothing is filled in silently but the optional
        :data:`OPTIONAL_PARAMETERS`). Its notes (:data:`FILE_NOTES`) are not parameters.
        ``None`` gives the paper's vehicle.

    Returns
    -------
    Vehicle
        The vehicle's parameters (Eq. 8).
    """
    spec = spec or DEFAULT_VEHICLE
    presets = load_registry("vehicles")
    if spec in presets:
        return _vehicle_from_mapping(spec, presets[spec])
    path = Path(spec)
    if path.suffix.lower() == ".json" or path.exists():
        if not path.is_file():
            raise EvrouteError(f"vehicle file not found: {spec}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EvrouteError(f"vehicle file {spec} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise EvrouteError(f"vehicle file {spec} must hold a JSON object")
        return _vehicle_from_mapping(path.stem, data)
    raise EvrouteError(f"unknown vehicle {spec!r}; presets: {', '.join(presets)} (or a JSON file path)")


def traction_energy_j(length_m, incline_rad, speed_mps, *, vehicle: Vehicle) -> np.ndarray:
    """Mechanical work F·ℓ in joules (Eq. 8 numerator), vectorised over edges."""
    length = np.asarray(length_m, dtype=np.float64)
    alpha = np.asarray(incline_rad, dtype=np.float64)
    v = np.asarray(speed_mps, dtype=np.float64)
    mg = vehicle.mass_kg * vehicle.g
    return (mg * length * np.sin(alpha)
            + mg * vehicle.rolling_resistance * length * np.cos(alpha)
            + 0.5 * vehicle.drag_coefficient * vehicle.frontal_area_m2 * vehicle.air_density
            * length * v**2)


def edge_energy_wh(length_m, incline_rad, speed_mps, *, vehicle: Vehicle | None = None) -> np.ndarray:
    """Deterministic energy E_det of each edge in Wh (Eq. 8 with η⁺ / η⁻, plus the vehicle's
    auxiliary power for the time ℓ / v on the edge where it has one).

    Parameters
    ----------
    length_m, incline_rad, speed_mps : array_like
        Edge length (m), inclination α = atan(grade) (rad) and speed (m/s).
    vehicle : Vehicle, optional
        Defaults to the paper's SUMO EV.

    Returns
    -------
    numpy.ndarray
        Energy in Wh; negative where regeneration outweighs the losses.
    """
    vehicle = vehicle or Vehicle()
    work = traction_energy_j(length_m, incline_rad, speed_mps, vehicle=vehicle)
    out = np.where(work >= 0, work / (3600.0 * vehicle.eta_plus), work * vehicle.eta_minus / 3600.0)
    if vehicle.aux_power_w > 0:  # the auxiliary load for the time on the edge, ℓ / v
        with np.errstate(divide="ignore"):
            out = out + vehicle.aux_power_w * np.asarray(length_m, dtype=np.float64) \
                / np.asarray(speed_mps, dtype=np.float64) / 3600.0
    return out


#: The mass equivalent of the rotating parts (wheels, motor) that SUMO's energy model adds to the
#: vehicle's in the kinetic energy, kg: SUMO 1.28's default (``EnergyParams``), pinned in
#: :func:`evroute.world.sumo_tools.vtype_xml` so that the kinetic split uses the car SUMO drove; the
#: default of :attr:`Vehicle.rotating_mass_kg`.
ROTATING_MASS_KG = OPTIONAL_PARAMETERS["rotating_mass_kg"]


#: The largest change of speed in one 1 s step that is driving (m/s): above a car's emergency
#: deceleration (SUMO's 9 m/s²); a larger one is a simulator placing the car (a departure, a teleport).
MAX_SPEED_STEP = 10.0


def kinetic_wh(speed, last_speed, electricity, *, vehicle: Vehicle | None = None, wheel=None) -> np.ndarray:
    """The part of each step's electricity booked on the car's change of kinetic energy, Wh: its
    mechanical change ½ (m + m_rot)(v² − v₀²) plus whatever the step lost beyond what a steady car
    would have lost, so that it is never below the mechanical change (efficiencies only lose).

    SUMO's energy model (Kurczveil et al. 2014; ``HelpersEnergy``) sums a step's powers at the
    wheel, x = w + ΔKE (w the potential, rolling and drag work, ΔKE the kinetic change), and draws
    F(x) from the battery: x/η⁺ where x > 0, x η⁻ where x < 0 (the step's electricity e; its sign
    says which). The step's loss e − x ≥ 0. A steady car doing the work w would lose
    F(w) − w ≥ 0. The step at a constant kinetic state is booked w plus the smaller of the two
    losses; the kinetic part is the rest:

        kinetic = ΔKE + max(0, (e − x) − (F(w) − w)) ≥ ΔKE,   steady = e − kinetic ≥ w.

    Where the step accelerates under power or brakes into the battery this is the usual split,
    steady = F(w) (the steady car's battery energy) and kinetic = e − F(w); where it coasts (x ≈ 0:
    the drag paid from the kinetic energy, no battery involved) the kinetic part is the mechanical
    change itself, not that change through 1/η⁺. So a car's kinetic parts between two of its
    speeds sum to at least the change of ½ (m + m_rot) v² between them, and its steady parts to
    at least its mechanical work: booked per car, nothing creates energy
    (:mod:`evroute.world.junctions`). With η⁻ = 0 a recuperating step says nothing of its powers:
    its kinetic part is then its mechanical change where the car gains speed, else 0.

    A car whose power train is not SUMO's (a motor map, a limit on regeneration with friction
    brakes taking the rest: :mod:`evroute.world.powertrain`) says its wheel work x itself
    (``wheel``); the same split then holds for any losses e − x ≥ 0, ``vehicle``'s η⁺ and η⁻ only
    saying what a steady car would lose.

    Parameters
    ----------
    speed, last_speed : array
        The speed at the step's end and at its start (m/s).
    electricity : array
        The step's energy drawn for propulsion (Wh; its sign picks the efficiency; an auxiliary
        load is not in it).
    vehicle : Vehicle, optional
        Mass, rotating mass and efficiencies (default the paper's EV).
    wheel : array, optional
        The step's work at the wheels x (Wh), where the power train says it; default F⁻¹(e).

    Returns
    -------
    numpy.ndarray
        Wh per step.
    """
    vehicle = vehicle or Vehicle()
    v, v0 = np.asarray(speed, dtype=np.float64), np.asarray(last_speed, dtype=np.float64)
    e = np.asarray(electricity, dtype=np.float64)
    dke = 0.5 * (vehicle.mass_kg + vehicle.rotating_mass_kg) * (v * v - v0 * v0) / 3600.0
    eta_p, eta_m = vehicle.eta_plus, vehicle.eta_minus
    if wheel is None:
        x = np.where(e > 0, e * eta_p, e / (eta_m if eta_m > 0 else 1.0))  # the wheel's work: F⁻¹(e)
    else:
        x = np.asarray(wheel, dtype=np.float64)
    w = x - dke  # the step's work at a constant kinetic state
    steady_loss = np.where(w > 0, w / eta_p, w * eta_m) - w
    kinetic = dke + np.maximum(0.0, (e - x) - steady_loss)
    if wheel is not None:
        return kinetic
    return np.where((e > 0) | (eta_m > 0), kinetic, np.maximum(dke, 0.0))


def kinetic_energy_wh(speed, vehicle: Vehicle | None = None) -> np.ndarray:
    """½ (m + m_rot) v² (Wh): the car's kinetic energy at ``speed`` (m/s), its rotating parts
    included (:attr:`Vehicle.rotating_mass_kg`, SUMO's :data:`ROTATING_MASS_KG` by default)."""
    vehicle = vehicle or Vehicle()
    return 0.5 * (vehicle.mass_kg + vehicle.rotating_mass_kg) * np.asarray(speed, dtype=np.float64) ** 2 / 3600.0


def energy_floor_wh(length_m, grade, vehicle: Vehicle | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A physical lower bound of each edge's energy and a potential that makes it non-negative.

    ``floor`` = Eq. 8 without the air drag (the one loss a driver could make small by driving
    slowly): F = m g ℓ (sin α + C_r cos α), divided by η⁺ when F ≥ 0 and times η⁻ otherwise, so
    E_det ≥ floor and so is any physically plausible energy on the edge. ``potential`` =
    η⁻ m g Δh with Δh = grade · ℓ, the node elevation difference: its sum along a route depends
    only on the route's ends, so subtracting it from every edge weight does not change which
    route is shortest, and floor − potential ≥ 0 on every edge of grade ≤ tan(acos(η⁺η⁻)) (36 %
    for the paper's EV; steeper edges are clipped at 0 by the caller). Both in Wh.
    """
    vehicle = vehicle or Vehicle()
    length = np.asarray(length_m, dtype=np.float64)
    g = np.asarray(grade, dtype=np.float64)
    alpha = np.arctan(g)
    mg = vehicle.mass_kg * vehicle.g
    work = mg * length * (np.sin(alpha) + vehicle.rolling_resistance * np.cos(alpha))
    floor = np.where(work >= 0, work / vehicle.eta_plus, work * vehicle.eta_minus) / 3600.0
    potential = vehicle.eta_minus * mg * g * length / 3600.0
    return floor, potential


def potential_energy_wh(length_m, grade, vehicle: Vehicle | None = None) -> np.ndarray:
    """The change of potential energy m g Δh per edge (Wh), Δh = grade · length the rise between
    its two nodes: its sum along a route depends only on the route's ends. No physical energy of an
    edge falls below it plus its rolling resistance (a car's work at the wheel), so a truth's
    energies less it are non-negative: the potential of the exact optimum's reduced costs
    (:func:`evroute.roads.walks.least_energy_walk`)."""
    vehicle = vehicle or Vehicle()
    return vehicle.mass_kg * vehicle.g * np.asarray(grade, dtype=np.float64) * np.asarray(length_m, dtype=np.float64) \
        / 3600.0


def check_vehicle(name, value) -> str:
    """A vehicle preset or file that loads (an option converter); its name or path as given."""
    load_vehicle(str(value))
    return str(value)


