"""A second world: real cars' power trains drive the simulated traffic (FASTSim 3.1, NREL).

SUMO's EV model is Eq. 8 plus kinetic terms: constant efficiencies, no motor map, no limit on
regeneration, no auxiliary load. FASTSim models a car's power train as it is: the motor's
efficiency map, the transmission, the battery (its efficiency by C-rate and temperature where the
car has one), a limit on regeneration, the auxiliary load with the cabin's heating and air
conditioning at an ambient temperature (the ``thrml`` cars: a lumped cabin, battery and HVAC).

:func:`recost` takes the per-second speed and elevation of every SUMO car (the traffic SUMO
simulated: :func:`evroute.world.sumo_atlas.build_atlas` with ``powertrain``) and drives each car's
whole trip as one FASTSim cycle, so that the battery and the cabin carry their state through
it; each second's electricity (auxiliary included) replaces SUMO's, and
:func:`evroute.world.sumo_atlas.traversals` books it as it books SUMO's, with the car's wheel work and
auxiliary energy (:func:`evroute.physics.energy.kinetic_wh`).

What is done to the trace, so that FASTSim 3.1 follows it (each measured, each in the summary):

- the elevation: each second's grade is the car's rise in SUMO (``z``) over FASTSim's distance
  of that second (the mean of its two speeds), so that FASTSim's climb is SUMO's to the
  millimetre (FASTSim charges m g · grade · v̄);
- a second the car cannot drive (more power than its power train gives, or more acceleration
  than its tyres take) is driven at the most it can, and the car lags SUMO's until it catches up
  (as FASTSim's own trace miss would; the trace is limited before, so that FASTSim's grades stay
  aligned by time);
- braking harder than the car regenerates: FASTSim 3.1's electric machine refuses the step
  (``edrv charge power exceeds current max charge power``: its friction brake is unreachable),
  so the friction brake's share is given to FASTSim as a climb on that second and taken out of
  the car's wheel work again (``friction``): the battery takes what the motor can regenerate,
  the rest is lost, as in the car.

The car starts its trip at 80 % charge (its regeneration not limited by a full battery) with its
cabin and battery at FASTSim's 22 °C (preconditioned): the ambient temperature ``ambient_c`` sets
what its HVAC then spends to keep the cabin there. A car without a thermal model (the Zoe) spends
its base auxiliary power at any temperature.

FASTSim is imported only here, and only when a car is asked for: ``pip install "evroute[fastsim]"``.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..errors import EvrouteError
from ..physics.energy import MAX_SPEED_STEP, Vehicle, edge_energy_wh, load_vehicle
from ..progress import stage
from ..settings import FASTSIM_INSTALL, POWERTRAINS

__all__ = ["FASTSIM_INSTALL", "POWERTRAINS", "POWERTRAIN_VERSION", "fastsim_version", "powertrain_key", "Car", "car",
           "Drive", "drive", "recost", "VehicleFit", "fit_vehicle", "cycle_energy", "INITIAL_SOC"]

#: The version of what :func:`recost` does to a trace (part of every powertrain atlas's key).
POWERTRAIN_VERSION = 1
#: The battery's state of charge when a car starts its trip: regeneration is not limited by a full
#: battery (FASTSim's ``walk`` starts a BEV full).
INITIAL_SOC = 0.8
#: The share of the car's power limits (FASTSim's, at the ambient temperature) the trace keeps to,
#: first; each retry of a car that FASTSim still refuses takes this much less again.
LIMIT_MARGIN = 0.995
#: Tries per car before it is left out of the atlas (counted in the summary).
TRIES = 4


def _fastsim():
    """The fastsim module; one error line naming the install command without it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # polars and plotly announce themselves
            import fastsim
    except ImportError:
        raise EvrouteError(f"FASTSim is not installed: {FASTSIM_INSTALL}") from None
    return fastsim


def fastsim_version() -> str:
    """The installed fastsim version (part of the atlas's key).

    Returns
    -------
    str
        Its version, e.g. ``3.1.0``.
    """
    from importlib.metadata import version

    _fastsim()
    return version("fastsim")


def powertrain_key(spec: str) -> str:
    """What identifies a power train in a cache key.

    Returns
    -------
    str
        The car's name, or ``sha256:`` and a vehicle file's content hash.
    """
    if spec in POWERTRAINS:
        return spec
    try:
        return "sha256:" + hashlib.sha256(Path(spec).read_bytes()).hexdigest()
    except OSError as exc:
        raise EvrouteError(f"cannot read the FASTSim vehicle file {spec}: {exc.strerror or exc}") from None


def _load(spec: str):
    """The FASTSim vehicle a spec names (a built-in car's resource or a vehicle file), as a dict."""
    fs = _fastsim()
    try:
        if spec in POWERTRAINS:
            veh = fs.Vehicle.from_resource(POWERTRAINS[spec])
        else:
            veh = fs.Vehicle.from_file(str(spec))
        d = veh.to_dict()
    except Exception as exc:  # FASTSim's own errors are long Rust traces: one line
        raise EvrouteError(f"FASTSim cannot read the vehicle {spec}: {str(exc).splitlines()[0][:200]}") from None
    if "BEV" not in d.get("pt_type", {}):
        raise EvrouteError(f"the FASTSim vehicle {spec} is not battery-electric (its power train: "
                           f"{', '.join(d.get('pt_type', {})) or 'none'})")
    return d


@dataclass
class Car:
    """A FASTSim car ready to drive SUMO's traces.

    Attributes
    ----------
    spec : str
        Its name (:data:`evroute.settings.POWERTRAINS`) or vehicle file.
    ambient_c : float
        The ambient temperature (°C).
    vehicle : evroute.physics.energy.Vehicle
        The car as Eq. 8 sees it, for the booking: FASTSim's mass, rotating mass (n I / r²),
        rolling and drag coefficients, frontal area, gravity and air density; η⁺ and η⁻ what a
        steady car loses (measured at 50 km/h, on the flat and down a 6 % slope); its auxiliary
        power at the ambient temperature.
    fwd_max_w, regen_max_w : float
        The most power at the wheels it drives and regenerates (FASTSim's, at the ambient
        temperature).
    accel_max : float
        The most acceleration its tyres take (m/s², FASTSim's traction limit).
    """

    spec: str
    ambient_c: float
    vehicle: Vehicle
    fwd_max_w: float
    regen_max_w: float
    accel_max: float
    mass: float
    rotating: float
    crr: float
    cda: float
    rho: float
    g: float = 9.80
    _vdict: dict = field(default_factory=dict, repr=False)
    _params: object = field(default=None, repr=False)

    def tractive_w(self, v0, v, rise) -> np.ndarray:
        """FASTSim's power at the wheels for a 1 s step from ``v0`` to ``v`` (m/s) rising ``rise``
        metres (its formulas: ``simdrive::set_pwr_prop_for_speed``)."""
        v0, v, rise = (np.asarray(a, dtype=np.float64) for a in (v0, v, rise))
        vbar = 0.5 * (v0 + v)
        with np.errstate(divide="ignore", invalid="ignore"):
            grade = np.where(vbar > 0, rise / vbar, 0.0)
        return (0.5 * (self.mass + self.rotating) * (v * v - v0 * v0) + self.g * self.mass * grade * vbar
                + self.mass * self.g * self.crr * np.cos(np.arctan(grade)) * vbar + 0.5 * self.rho * self.cda * vbar**3)


def car(spec: str, ambient_c: float = 20.0) -> Car:
    """The FASTSim car ``spec`` at ``ambient_c`` °C, its limits and the Vehicle it is booked as,
    measured on a short FASTSim drive (50 km/h on the flat, then down a 6 % slope).

    Returns
    -------
    Car
        The car ready to drive traces (:func:`drive`), with its booking Vehicle.

    Raises
    ------
    EvrouteError
        Without FASTSim (one line naming the install command), for a vehicle FASTSim cannot read
        or that is not battery-electric.
    """
    fs = _fastsim()
    d = _load(spec)
    d["pt_type"]["BEV"]["res"]["state"]["soc"] = INITIAL_SOC
    params = fs.SimParams.default().to_dict()
    params["trace_miss_opts"] = "Allow"
    params = fs.SimParams.from_dict(params)
    ch = d["chassis"]
    mass = float(d["mass_kilograms"])
    rotating = float(ch["num_wheels"]) * float(ch["wheel_inertia_kilogram_square_meters"]) \
        / float(ch["wheel_radius_meters"]) ** 2
    rho = float(fs.Air.get_density())
    c = Car(spec, float(ambient_c), Vehicle(), math.inf, math.inf, math.inf, mass, rotating,
            float(ch["wheel_rr_coef"]), float(ch["drag_coef"]) * float(ch["frontal_area_square_meters"]), rho,
            _vdict=d, _params=params)
    # the traction limit (FASTSim's ``set_curr_pwr_out_max``: the drive axle's grip less the weight
    # transfer away from it)
    sign = {"FWD": 1.0, "RWD": -1.0}.get(str(ch.get("drive_type", "FWD")), 0.0)
    c.accel_max = float(ch["wheel_fric_coef"]) * float(ch["drive_axle_weight_frac"]) * c.g / (
        1.0 + sign * abs(float(ch["cg_height_meters"])) * float(ch["wheel_fric_coef"]) / float(ch["wheel_base_meters"]))
    # steady at 50 km/h on the flat, then down a 6 % slope, then a gentle stop
    v = 13.89
    speed = np.r_[np.linspace(0.0, v, 15), np.full(120, v), np.full(120, v), np.linspace(v, 0.0, 15), 0.0]
    rise = np.r_[np.zeros(135), np.full(120, -0.06 * v), np.zeros(16)]
    out = _walk(c, speed, rise, np.zeros_like(speed))
    if out is None:
        raise EvrouteError(f"FASTSim cannot drive the car {spec} at 50 km/h")
    h, _ = out
    flat, down = slice(30, 134), slice(150, 254)  # steady seconds (by step), the ramps left out
    prop = h["prop"]
    eta_plus = float(h["tractive"][flat].sum() / prop[flat].sum())
    eta_minus = float(prop[down].sum() / h["tractive"][down].sum())
    c.fwd_max_w = float(np.min(h["fwd_max"][1:]))
    c.regen_max_w = float(np.min(h["bwd_max"][1:]))
    name = Path(spec).stem if spec not in POWERTRAINS else spec
    c.vehicle = Vehicle(mass_kg=mass, rolling_resistance=c.crr, frontal_area_m2=float(ch["frontal_area_square_meters"]),
                        drag_coefficient=float(ch["drag_coef"]), eta_plus=min(eta_plus, 1.0),
                        eta_minus=min(max(eta_minus, 0.0), 1.0), g=c.g, air_density=rho,
                        name=f"{name}@{float(ambient_c):g}C", aux_power_w=float(np.mean(h["aux"][1:])),  # J a second: W
                        rotating_mass_kg=rotating)
    return c


def _walk(c: Car, speed: np.ndarray, rise: np.ndarray, brake: np.ndarray):
    """One FASTSim cycle of 1 s steps: ``speed`` (m/s, at each step's end; ``speed[0]`` the start),
    ``rise`` (m, each step's climb) and ``brake`` (W, the friction brake's share of a step, given to
    FASTSim as a climb). Returns per step (index 0 the start) the battery's electrical energy, its
    auxiliary part, its propulsion part, the power at the wheels (J), the achieved speed and
    FASTSim's limits, and whether the car followed the trace; None where FASTSim refuses a step."""
    fs = _fastsim()
    n = speed.size
    vbar = 0.5 * (speed[:-1] + speed[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        grade = np.where(vbar > 0, (rise[1:] + brake[1:] / (c.g * c.mass)) / vbar, 0.0)
    grade = np.r_[grade[:1] if n > 1 else [0.0], grade]
    cyc = fs.Cycle.from_dict({"time_seconds": np.arange(n, dtype=np.float64).tolist(),
                                "speed_meters_per_second": speed.tolist(), "grade": grade.tolist(),
                                "temp_amb_air_kelvin": [c.ambient_c + 273.15] * n})
    c._vdict["state"]["speed_ach_meters_per_second"] = float(speed[0])  # (FASTSim starts a car at rest)
    sd = fs.SimDrive(fs.Vehicle.from_dict(c._vdict), cyc, c._params)
    try:
        sd.run_once()  # from the vehicle's own state of charge (walk() starts a BEV full)
    except Exception:  # noqa: BLE001 (FASTSim's refusal of a step: the caller tightens the limits)
        return None
    h = sd.to_dict()
    vh = h["veh"]["history"]
    res = h["veh"]["pt_type"]["BEV"]["res"]["history"]
    out = {"electrical": np.diff(np.asarray(res["energy_out_electrical_joules"], dtype=np.float64), prepend=0.0),
           "aux": np.diff(np.asarray(res["energy_aux_joules"], dtype=np.float64), prepend=0.0),
           "prop": np.diff(np.asarray(res["energy_out_prop_joules"], dtype=np.float64), prepend=0.0),
           "tractive": np.diff(np.asarray(vh["energy_tractive_joules"], dtype=np.float64), prepend=0.0),
           "speed": np.asarray(vh["speed_ach_meters_per_second"], dtype=np.float64),
           "fwd_max": np.asarray(vh["pwr_prop_fwd_max_watts"], dtype=np.float64),
           "bwd_max": np.asarray(vh["pwr_prop_bwd_max_watts"], dtype=np.float64)}
    return out, bool(vh["cyc_met_overall"][-1])


def _limit(c: Car, target: np.ndarray, rise: np.ndarray, margin: float) -> np.ndarray:
    """The trace the car can drive: ``target`` where it can, else the most its power and tyres
    allow, lagging until it is back on ``target``."""
    v = target.copy()
    fwd, accel = margin * c.fwd_max_w, margin * c.accel_max

    def too_much(a, b, k):
        return (c.tractive_w(a, b, rise[k]) > fwd) | (b - a > accel)

    start = 1
    while start < v.size:
        bad = np.flatnonzero(too_much(v[start - 1:-1], v[start:], np.arange(start, v.size)))
        if bad.size == 0:
            break
        k = start + int(bad[0])
        while k < v.size:  # step by step while the car lags
            a = v[k - 1]
            if not too_much(a, target[k], k):
                v[k] = target[k]
                k += 1
                break
            lo, hi = 0.0, max(0.0, min(target[k], a + accel))
            for _ in range(40):  # the tractive power grows with the end speed: bisection
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if c.tractive_w(a, mid, rise[k]) <= fwd else (lo, mid)
            v[k] = lo
            k += 1
        start = k
    return v


@dataclass
class Drive:
    """One trace driven by a FASTSim car: per 1 s step (index 0: the start, all zero) its energy
    from the battery (``electricity_wh``, auxiliary included), the auxiliary part (``aux_wh``),
    the car's work at the wheels (``wheel_wh``, the friction brake's share left out) and the
    friction brake's share (``friction_wh``), the speed it drove (``speed``), how many steps it
    lagged SUMO's trace and braked beyond its regeneration, and how many tries it took (0: not
    driven)."""

    electricity_wh: np.ndarray
    aux_wh: np.ndarray
    wheel_wh: np.ndarray
    friction_wh: np.ndarray
    speed: np.ndarray
    lagged: int
    braked: int
    tries: int


def drive(c: Car, speed, rise) -> Drive:
    """Drive the trace ``speed`` (m/s at each second's end, ``speed[0]`` the start) climbing ``rise``
    (m per second; ``rise[0]`` unused) with the FASTSim car ``c`` (see the module docstring): one
    FASTSim cycle, from :data:`INITIAL_SOC`.

    Returns
    -------
    Drive
        Per second the battery's energy, its auxiliary part, the wheel work and the friction
        brake's share (Wh) and the speed driven. A trace FASTSim refuses :data:`TRIES` times, each
        with tighter limits, comes back with ``tries = 0`` and NaN energies.
    """
    target = np.maximum(np.asarray(speed, dtype=np.float64), 0.0)
    rise = np.asarray(rise, dtype=np.float64)
    nan = np.full(target.size, np.nan)
    if target.size < 2 or not (np.isfinite(target).all() and np.isfinite(rise).all()):
        return Drive(nan, nan, nan, nan, target, 0, 0, 0)  # (FASTSim crashes on a NaN)
    margin = LIMIT_MARGIN
    for attempt in range(1, TRIES + 1):
        v = _limit(c, target, rise, margin)
        power = np.r_[0.0, c.tractive_w(v[:-1], v[1:], rise[1:])]
        brake = np.maximum(0.0, -power - margin * c.regen_max_w)
        out = _walk(c, v, rise, brake)
        if out is not None and out[1]:
            h = out[0]
            # the car's own work at the wheels, at the speeds it drove, without the brake's climb
            wheel = np.r_[0.0, c.tractive_w(h["speed"][:-1], h["speed"][1:], rise[1:])]
            return Drive(h["electrical"] / 3600.0, h["aux"] / 3600.0, wheel / 3600.0,
                         (h["tractive"] - wheel) / 3600.0, h["speed"],
                         int(np.count_nonzero(np.abs(v - target) > 1e-9)), int(np.count_nonzero(brake > 0)), attempt)
        margin *= 0.9
    return Drive(nan, nan, nan, nan, target, 0, 0, 0)


def recost(rows: pd.DataFrame, c: Car) -> tuple[pd.DataFrame, dict]:
    """SUMO's per-second rows of its cars (``time``, ``vehicle``, ``lane``, ``speed``, ``z``; 1 s
    steps) driven by the FASTSim car ``c``: each car's run of consecutive seconds is one FASTSim
    cycle (a teleport or a jump of speed starts a new one), its first second's climb unknown (0).

    Returns
    -------
    (pandas.DataFrame, dict)
        The rows with ``electricity`` (Wh, auxiliary included), ``aux``, ``wheel`` (Wh) and
        ``speed`` (the speed the car drove) for :func:`evroute.world.sumo_atlas.traversals` (a cycle
        FASTSim refused left out), and what was done: ``cycles``, ``seconds``, ``seconds_lagged``,
        ``seconds_braked_by_friction``, ``cycles_retried``, ``cycles_refused``.
    """
    d = rows.sort_values(["vehicle", "time"], kind="stable").reset_index(drop=True)
    veh, t = d.vehicle.to_numpy(), d.time.to_numpy(np.float64)
    v, z = d.speed.to_numpy(np.float64), d.z.to_numpy(np.float64)
    same = np.r_[False, (veh[1:] == veh[:-1]) & (t[1:] == t[:-1] + 1.0) & (np.abs(np.diff(v)) <= MAX_SPEED_STEP)]
    bounds = np.r_[np.flatnonzero(~same), len(d)]
    e, aux, wheel, speed = (np.full(len(d), np.nan) for _ in range(4))
    lagged = braked = refused = retried = 0
    for k in range(bounds.size - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        # the cycle: the car appears at its first row's speed; step i (1..n) is row a + i − 1
        sp = np.r_[v[a], v[a:b]]
        rise = np.r_[0.0, 0.0, np.diff(z[a:b])]
        r = drive(c, sp, rise)
        if r.tries == 0:
            refused += 1
            continue
        retried += r.tries > 1
        e[a:b], aux[a:b], wheel[a:b], speed[a:b] = r.electricity_wh[1:], r.aux_wh[1:], r.wheel_wh[1:], r.speed[1:]
        lagged += r.lagged
        braked += r.braked
    keep = np.isfinite(e)
    out = d.assign(electricity=e, aux=aux, wheel=wheel, speed=speed)[keep].reset_index(drop=True)
    summary = {"powertrain": c.spec, "ambient_c": c.ambient_c, "cycles": int(bounds.size - 1), "seconds": int(len(d)),
               "seconds_lagged": int(lagged), "seconds_braked_by_friction": int(braked),
               "cycles_retried": int(retried), "cycles_refused": int(refused)}
    return out, summary


# --------------------------------------------------------------------------------------
# a fair physics prior: Eq. 8 plus an auxiliary power, fitted to the car's FASTSim drives
# --------------------------------------------------------------------------------------

#: The steady segments the fit learns from: speeds (m/s) × grades, each held this long (s).
FIT_SPEEDS = (3.0, 6.0, 9.0, 12.0, 15.0, 20.0, 25.0, 30.0)
FIT_GRADES = (-0.06, -0.03, 0.0, 0.03, 0.06)
FIT_HOLD_S = 30
#: The held-out segments: this many, at random speeds, grades and lengths.
HELD_OUT_SEGMENTS = 60
#: The gentlest acceleration between segments (m/s²): the ramps are not fitted.
RAMP_ACCEL = 1.0


def _segments_trace(segments) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """One trace driving ``segments`` (speed, grade, seconds) in turn, joined by ramps at
    :data:`RAMP_ACCEL`, from a stop to a stop: its speeds, rises and each segment's steps."""
    speed, rise, spans = [0.0], [0.0], []
    for v, g, secs in segments:
        cur = speed[-1]
        n = max(1, int(math.ceil(abs(v - cur) / RAMP_ACCEL)))
        ramp = np.linspace(cur, v, n + 1)[1:]
        for x, x0 in zip(ramp, np.r_[cur, ramp[:-1]], strict=True):
            speed.append(float(x))
            rise.append(g * 0.5 * (x + x0))
        first = len(speed)
        for _ in range(int(secs)):
            speed.append(float(v))
            rise.append(g * v)
        spans.append((first, len(speed)))
    for x in np.linspace(speed[-1], 0.0, max(2, int(math.ceil(speed[-1] / RAMP_ACCEL)) + 1))[1:]:
        speed.append(float(x))
        rise.append(0.0)
    return np.asarray(speed), np.asarray(rise), spans


def _segment_energies(c: Car, segments) -> pd.DataFrame:
    """The FASTSim energy of each steady segment (Wh), its length (m), grade and speed."""
    speed, rise, spans = _segments_trace(segments)
    r = drive(c, speed, rise)
    if r.tries == 0:
        raise EvrouteError(f"FASTSim cannot drive the fitting segments with the car {c.spec}")
    rows = [(float(r.electricity_wh[a:b].sum()), v * (b - a), g, v)
            for (a, b), (v, g, _) in zip(spans, segments, strict=True)]
    return pd.DataFrame(rows, columns=["energy_wh", "length_m", "grade", "speed"])


#: The parameters the fit finds (the rest are the car's, known): their bounds.
FIT_PARAMETERS = {"rolling_resistance": (0.0, 0.05), "drag_coefficient": (0.05, 1.5), "eta_plus": (0.3, 1.0),
                  "eta_minus": (0.0, 1.0), "aux_power_w": (0.0, 20_000.0)}


def _with(base: Vehicle, x) -> Vehicle:
    return Vehicle(**{**base.to_dict(), **dict(zip(FIT_PARAMETERS, (float(a) for a in x), strict=True))})


def cycle_energy(vehicle: Vehicle, speed, rise) -> float:
    """What Eq. 8's car spends on a 1 s trace (``speed`` in m/s from its start, ``rise`` in m per
    second): each second's work at the wheels (the climb, rolling and drag at the second's mean
    speed, and its change of ½ (m + m_rot) v²) through η⁺ or η⁻, plus the auxiliary power: SUMO's
    energy model with the vehicle's parameters, second by second.

    Returns
    -------
    float
        Wh.
    """
    speed, rise = np.asarray(speed, dtype=np.float64), np.asarray(rise, dtype=np.float64)
    v0, v = speed[:-1], speed[1:]
    vbar = 0.5 * (v0 + v)
    m = vehicle.mass_kg
    with np.errstate(divide="ignore", invalid="ignore"):
        grade = np.where(vbar > 0, rise[1:] / vbar, 0.0)
    alpha = np.arctan(grade)
    work = (m * vehicle.g * (np.sin(alpha) + vehicle.rolling_resistance * np.cos(alpha)) * vbar
            + 0.5 * vehicle.air_density * vehicle.frontal_area_m2 * vehicle.drag_coefficient * vbar**3
            + 0.5 * (m + vehicle.rotating_mass_kg) * (v * v - v0 * v0)) / 3600.0
    e = np.where(work > 0, work / vehicle.eta_plus, work * vehicle.eta_minus)
    return float(e.sum() + vehicle.aux_power_w * v.size / 3600.0)


@dataclass
class VehicleFit:
    """Eq. 8's parameters plus an auxiliary power fitted to a FASTSim car's drives
    (:func:`fit_vehicle`), and how well they predict held-out ones."""

    vehicle: Vehicle
    car: Car
    report: dict


def _errors(measured, predicted) -> dict:
    m, p = np.asarray(measured, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    err = p - m
    return {"n": int(m.size), "rmse_wh": float(np.sqrt(np.mean(err**2))), "bias_wh": float(np.mean(err)),
            "median_abs_rel": float(np.median(np.abs(err) / np.maximum(np.abs(m), 1e-9))),
            "r": float(np.corrcoef(m, p)[0, 1]) if m.size > 1 and np.std(p) > 0 else None}


def fit_vehicle(spec: str, ambient_c: float = 20.0, *, seed: int = 0, baseline: str = "sumo-ev") -> VehicleFit:
    """Fit the rolling and drag coefficients, η⁺, η⁻ and the auxiliary power P_aux of Eq. 8 (with
    the car's own mass, rotating mass, frontal area, gravity and air density, which a modeller
    knows) to the FASTSim car ``spec`` at ``ambient_c`` °C, by least squares on the energy per
    metre of steady segments (:data:`FIT_SPEEDS` × :data:`FIT_GRADES`, :data:`FIT_HOLD_S` s each,
    one drive). Then the prediction is checked on held-out drives: :data:`HELD_OUT_SEGMENTS` steady
    segments at random speeds (3-32 m/s), grades (±7 %) and lengths (``seed``), per segment; and
    FASTSim's standard cycles (UDDS, HWFET) and a city drive with stops, per drive, predicted
    second by second (:func:`cycle_energy`), beside the ``baseline`` vehicle's Eq. 8.

    Returns
    -------
    VehicleFit
        The fitted vehicle (its ``name`` the car and temperature), the car, and the report:
        ``parameters``, ``train`` and ``held_out_segments`` (per segment: n, rmse_wh, bias_wh,
        median_abs_rel, r) for the fit and the baseline, ``held_out_drives`` (per drive: its
        length, FASTSim's energy, the fit's and the baseline's).
    """
    with stage(f"FASTSim: {spec} at {ambient_c:g} °C"):
        c = car(spec, ambient_c)
        train = _segment_energies(c, [(v, g, FIT_HOLD_S) for v in FIT_SPEEDS for g in FIT_GRADES])
        rng = np.random.default_rng(seed)
        held = [(float(rng.uniform(3.0, 32.0)), float(rng.uniform(-0.07, 0.07)), int(rng.integers(5, 60)))
                for _ in range(HELD_OUT_SEGMENTS)]
        held_out = _segment_energies(c, held)
    base = c.vehicle
    x0 = np.array([base.rolling_resistance, base.drag_coefficient, base.eta_plus, max(base.eta_minus, 0.5),
                   base.aux_power_w])
    lo, hi = np.array([b[0] for b in FIT_PARAMETERS.values()]), np.array([b[1] for b in FIT_PARAMETERS.values()])

    def predict(vehicle, t):
        return edge_energy_wh(t.length_m.to_numpy(), np.arctan(t.grade.to_numpy()), t.speed.to_numpy(), vehicle=vehicle)

    def residual(x):
        return (predict(_with(base, x), train) - train.energy_wh.to_numpy()) / train.length_m.to_numpy() * 1000.0

    sol = least_squares(residual, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale=np.maximum(np.abs(x0), 1e-3))
    name = Path(spec).stem if spec not in POWERTRAINS else spec
    fitted = Vehicle(**{**_with(base, sol.x).to_dict(), "name": f"{name}-fit-{float(ambient_c):g}C"})
    other = load_vehicle(baseline)
    report = {"powertrain": spec, "ambient_c": float(ambient_c), "seed": int(seed), "baseline": other.name,
              "parameters": {k: float(getattr(fitted, k)) for k in (
                  "mass_kg", "rotating_mass_kg", "rolling_resistance", "frontal_area_m2", "drag_coefficient",
                  "eta_plus", "eta_minus", "g", "air_density", "aux_power_w")},
              "train": {"fit": _errors(train.energy_wh, predict(fitted, train)),
                        "segments": len(train), "hold_s": FIT_HOLD_S},
              "held_out_segments": {"fit": _errors(held_out.energy_wh, predict(fitted, held_out)),
                                    "baseline": _errors(held_out.energy_wh, predict(other, held_out))}}
    drives = []
    for label, sp, rise in _held_out_cycles(seed):
        r = drive(c, sp, rise)
        if r.tries == 0:
            continue
        km = float(np.sum(r.speed[1:])) / 1000.0
        drives.append({"drive": label, "km": km, "fastsim_wh": float(np.sum(r.electricity_wh)),
                       "fit_wh": cycle_energy(fitted, r.speed, rise), "baseline_wh": cycle_energy(other, r.speed, rise)})
    report["held_out_drives"] = drives
    return VehicleFit(fitted, c, report)


def _held_out_cycles(seed: int):
    """FASTSim's standard cycles (flat) and a city drive with stops and hills (``seed``): label,
    speed (m/s, 1 s steps from a stop) and rise (m per second)."""
    fs = _fastsim()
    for resource, label in (("udds.csv", "UDDS"), ("hwfet.csv", "HWFET")):
        cyc = fs.Cycle.from_resource(resource).to_dict()
        t = np.asarray(cyc["time_seconds"], dtype=np.float64)
        v = np.asarray(cyc["speed_meters_per_second"], dtype=np.float64)
        grid = np.arange(0.0, t[-1] + 0.5, 1.0)
        yield label, np.interp(grid, t, v), np.zeros(grid.size)
    rng = np.random.default_rng(seed + 1)
    speed, rise = [0.0], [0.0]
    for _ in range(12):  # block by block: accelerate, cruise, brake to a stop, wait
        top, grade = float(rng.uniform(8.0, 16.0)), float(rng.uniform(-0.05, 0.05))
        profile = np.r_[np.arange(1.5, top, 1.5), np.full(int(rng.integers(10, 40)), top),
                        np.arange(top, 0.0, -2.0)[1:], 0.0, np.zeros(int(rng.integers(0, 40)))]
        for x in profile:
            rise.append(grade * 0.5 * (x + speed[-1]))
            speed.append(float(x))
    yield "city", np.asarray(speed), np.asarray(rise)
