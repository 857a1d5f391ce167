"""Every setting of a run, declared once: its name, bounds, default, where the default comes from,
and its help (:data:`RUN_SETTINGS`).

``evroute simulate`` and ``evroute compare`` make their command-line options from these
declarations (:mod:`evroute.cli.options`), :class:`evroute.runs.config.SimulationConfig` converts
every value through them, and ``compare --sweep`` sweeps them. The module imports no numerical
library, so ``--help`` answers at once: a setting whose check needs the network, a registry or
a file reader names its converter by ``"module:function"`` (:func:`evroute.specs.deferred`),
imported when a value is converted. The bounds of the settings that other modules check again
(the kernel's κ, ν and lengthscales, the horizon, the exact optimum's time limit) are defined
here and imported there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .components import component_names
from .errors import EvrouteError
from .specs import Option, deferred, split_list
from .validate import (
    MAX_SEED,
    choice,
    existing_file,
    flag,
    in_range,
    int_range,
    parse_latlon,
    text,
    unit_rate,
)

__all__ = ["RUN_SETTINGS", "FOLDS", "FOLDED", "ROUTE_POINTS", "CONFIG_ONLY", "FLAG_SETTINGS", "spelling",
           "unfold_settings", "NETWORK_SETTINGS", "ROUTE_SETTINGS", "VEHICLE_SETTINGS", "AGENT_SETTINGS",
           "LOOP_SETTINGS", "KERNEL_SETTINGS", "SCALE_SETTINGS", "ENVIRONMENT_SETTINGS", "PRIOR_SETTINGS",
           "OPTIMUM_SETTINGS", "WEIGHT_RULES", "KERNEL_KINDS", "check_kappa", "check_nu", "check_lengthscale", "check_std_wh",
           "MAX_HORIZON", "LOG_BYTES_PER_ROUND", "LOG_BYTES_PER_EDGE", "MAX_TIME_LIMIT", "SUMO_TRUTH_OPTIONS",
           "demand_file", "POWERTRAINS", "FASTSIM_INSTALL", "powertrain_spec"]

# --- network and trip ---------------------------------------------------------

#: The network settings of a run.
NETWORK_SETTINGS = (
    Option("network", deferred("evroute.roads.names:check_network_name"), "synthetic", "Network: synthetic, "
           "synthetic-<N>k, monaco, luxembourg, or an OSM XML file", "the embedded synthetic city: runs "
           "with no data and no internet", metavar="NAME"),
    Option("osm", existing_file("OSM file"), None, "OSM XML file of a built-in network (default: the data "
           "folder's)", metavar="PATH"),
    Option("dem", existing_file("DEM file"), None, "DEM raster (GeoTIFF/HGT) for node elevations (default: OSM ele "
           "tags, else flat)", metavar="PATH"),
)


def _point(name, value) -> str:
    parse_latlon(value, {"from_point": "the start", "to_point": "the end"}.get(name, name))
    return str(value).strip()


#: The trip of a run: a named route, or two points snapped to the nearest edges.
ROUTE_SETTINGS = (
    Option("route", text, None, "Trip: a named route (A, B, NETWORK:A) or two points LAT,LON:LAT,LON",
           metavar="TRIP"),
    Option("from_point", _point, None, "Start point LAT,LON, snapped to the nearest edge", metavar="LAT,LON"),
    Option("to_point", _point, None, "End point LAT,LON, snapped to the nearest edge", metavar="LAT,LON"),
)

#: The vehicle of a run: E_det's parameters (003 Eq. 8, Table 2).
VEHICLE_SETTINGS = (
    Option("vehicle", deferred("evroute.physics.energy:check_vehicle"), None, "Vehicle driven, whose energy counts: "
           "a preset or JSON file", "003 App. B.3, Table 2: SUMO's EV defaults",
           metavar="NAME|FILE"),
)

# --- the agent --------------------------------------------------------------------------------

#: How per-edge indices become the oracle's weights (:func:`evroute.bandit.policies.route_weights`).
WEIGHT_RULES = ("rectified", "potential")

#: The agent's settings: which policy, on which posterior backend, weighing edges how.
AGENT_SETTINGS = (
    Option("policy", deferred("evroute.bandit.agents:resolve_policy", value_only=True), "gp-ts",
           "Policy as a spec, e.g. gp-bucb[xi=0.5] (evroute models lists them)", "003 Fig. 2: GP-TS had the lowest "
           "regret", metavar="SPEC"),
    Option("model", deferred("evroute.models:resolve_model", value_only=True), "exact",
           "GP backend of the gp-* policies as a spec, e.g. svgp[inducing=500] (evroute models)", "003 Sec. 2.2: the "
           "exact GP", metavar="SPEC"),
    Option("weights", lambda name, v: choice(name, v, WEIGHT_RULES), "potential",
           "How per-edge indices become route weights: rectified (the papers') or potential",
           "measured: on SUMO's truth in Monaco the six policies drive 4-10 points less energy than with "
           "rectified weights, docs/reproductions/sumo.md; the papers' presets keep 003 Algorithm 2's rectified",
           metavar="RULE"),
)

# --- the loop (Algorithm 1) -------------------------------------------------------------------

#: Rough size of the logs (in memory, as DataFrames): per round and per edge driven.
LOG_BYTES_PER_ROUND = 250
LOG_BYTES_PER_EDGE = 100
#: The longest run accepted. Each round is logged (one row, plus one per edge driven) and
#: its time kept for the summary's median; beyond 10⁸ rounds the logs alone would be
#: hundreds of GB and the run would take days at ~1 ms a round.
MAX_HORIZON = 100_000_000

#: The loop's settings of a run: how many rounds, and the seed of every stream.
LOOP_SETTINGS = (
    Option("horizon", int_range(1, MAX_HORIZON, why=f"rounds; every round is logged, ~{LOG_BYTES_PER_ROUND + 50 * LOG_BYTES_PER_EDGE:,} "
                                                     "bytes for a 50-edge route, and 10^8 rounds would be ~500 GB of logs"),
           500, "Rounds T", "003 Sec. 4.2: T = 500", metavar="INT"),
    Option("seed", int_range(0, MAX_SEED, why="seeds are stored as 64-bit integers"), 0,
           "Seed of everything the command draws at random", metavar="INT"),
)

# --- the prior kernel (003 App. B.1) -------------------------------------------------

#: Accepted values of ``combined_kernel(kind=...)``.
KERNEL_KINDS = ("combined", "graph", "context")

#: κ_G, the graph Matérn lengthscale (the paper's: 1). Its shift 2ν/κ² of the Laplacian's
#: spectrum leaves nothing of the graph in the kernel below κ = 1e-3 (k_G is then the identity to
#: working precision) and nothing more to learn above κ = 1e3 (the shift vanishes: k_G is the
#: Laplacian's null space plus round-off); beyond them 2ν/κ² under- or overflows.
check_kappa = in_range(1e-3, 1e3, why="graph Matérn lengthscale: outside, the kernel is numerically its limit")
#: ν_G, the graph Matérn smoothness (the paper's: 2). Up to 10: the dense kernel costs ⌈ν/2⌉ E×E
#: products and the sparse precision (2ν/κ² I + Δ)^ν couples ν line-graph hops, so the cost grows
#: with ν (ν = 12 on 2,000 edges: 8 s against 2 s at ν = 4) while the kernel approaches its
#: diffusion limit (ν → ∞); above ~100 the normalisation underflows (it used to fail after 28 s
#: at ν = 1000 and to run for minutes at ν = 10000).
check_nu = in_range(0, 10, lo_open=True, why="graph Matérn smoothness: the cost grows with nu while the kernel "
                                               "approaches its nu -> infinity limit")
#: The context lengthscales ℓ of k_f and k_f′ on the standardised context (unit variance per
#: dimension, so ℓ is in standard deviations): below 1e-3 the kernel is the identity and above
#: 1e3 a constant, to working precision.
check_lengthscale = in_range(1e-3, 1e3, why="context lengthscale in standard deviations of the standardised "
                                             "context: outside, the kernel is numerically its limit")

#: The prior kernel's settings of a run.
KERNEL_SETTINGS = (
    Option("kernel", lambda name, v: choice(name, v, KERNEL_KINDS), "combined",
           "Agents' prior kernel: combined, graph or context [lengthscale=1,kappa=1,nu=2]", "003 App. B.1",
           metavar="SPEC"),
    Option("lengthscale", check_lengthscale, 1.0, "every context lengthscale of the agents' prior kernel",
           "003 App. B.1: lengthscales 1", metavar="NUMBER"),
    Option("kappa", check_kappa, 1.0, "graph Matérn kappa", "003 App. B.1: kappa_G = 1", metavar="NUMBER"),
    Option("nu", check_nu, 2.0, "graph Matérn nu (an integer gives the sparse precision)", "003 App. B.1: nu_G = 2",
           metavar="NUMBER"),
)


#: Where the agents' prior of the junctions comes from (``prior_turns``): physics, a fleet's drives,
#: or the truth itself (an oracle: the agents are told each turn's mean, named so in every table).
PRIOR_TURNS = ("physics", "drives", "oracle")
#: The kernel over turns of the agents that learn the junctions (``turn_kernel``).
TURN_KERNELS = ("shared", "independent", "fixed")


def _prior_turns(name, value):
    """Where the junctions' prior comes from; None (``auto``): a prior file's turns where it has them,
    else physics'."""
    return None if value is None or str(value).strip().lower() == "auto" else choice(name, value, PRIOR_TURNS)


def check_std_wh(name, value):
    """A standard deviation in Wh, or ``None`` (also ``none``, ``paper``: the paper's fraction of σ_det)."""
    return None if value in (None, "none", "paper") else in_range(0, 1e6, lo_open=True, why="Wh")(name, value)


#: The prior's and the noise's scale of a run: the paper's fractions of σ_det by default, or
#: values in Wh (e.g. fitted by type-II maximum likelihood on an energy atlas: ``evroute sumo
#: atlas --fit``). They set σ₀ of every agent's prior and ς of the agents and of Gaussian truths.
SCALE_SETTINGS = (
    Option("prior_std", check_std_wh, None, "The agents' prior sd sigma_0 (and the GP truth's), Wh", "003 Sec. 4.1",
           metavar="WH"),
    Option("noise_std", deferred("evroute.priors.noise:parse_noise_std"), None, "Noise sd, Wh, or per edge "
           "edge[a=WH,b_per_km=WH,tls=WH]", "003 Sec. 4.1", metavar="WH|SPEC"),
    Option("prior", deferred("evroute.world.fleet:check_prior_file"), None, "A fleet's drives as the agents' "
           "prior: a prior file of evroute prior fit", "docs/guide/drives.md: your fleet", metavar="PRIOR.json"),
    Option("prior_turns", _prior_turns, None,
           "Agents' turns (--truth sumo): auto, physics, drives or oracle [kernel=shared|independent|fixed]",
           "measured: docs/reproductions/sumo.md", flag="--turns", metavar="SPEC"),
    Option("turn_kernel", lambda name, v: choice(name, v, TURN_KERNELS), "shared",
           "how the agents learn the turns: shared, independent, or fixed (not learnt)",
           "measured: docs/reproductions/sumo.md", metavar="shared|independent|fixed"),
)

# --- the environment --------------------------------------------------------------------------

#: The environment's settings of a run: what is true, how it changes, which roads close.
ENVIRONMENT_SETTINGS = (
    Option("truth", deferred("evroute.bandit.truths:resolve_truth", value_only=True), "lognormal",
           lambda: f"Ground truth as a spec: {', '.join(component_names('truth'))}, e.g. gp[drift=0.01] "
           "(evroute models)", "003 Sec. 4.1's draw of the GP prior, in a form that never falls below the physical "
           "floor (the paper's own, gp, creates energy)", metavar="SPEC"),
    Option("truth_lengthscale", check_lengthscale, 1.0, "context lengthscale of the kernel the true f is drawn "
           "from", "003: lengthscales 1", metavar="NUMBER"),
    Option("drift", unit_rate, 0.0, "time-varying energies: the forgetting rate eps (paper 004); 0: static",
           metavar="NUMBER"),
    Option("closures", deferred("evroute.bandit.closures:parse_closures", value_only=True), None,
           lambda: f"road closures: {', '.join(component_names('closures'))}, with options as a spec, e.g. "
           "random[rate=0.05]; default none", metavar="SPEC"),
)

#: The candidate priors of a run (paper 004: "which vehicle am I?").
PRIOR_SETTINGS = (
    Option("priors", deferred("evroute.priors.candidates:check_priors"), None, "Candidate priors of gp-pe/mle/fb/rb: "
           "VEHICLE[eps=..,lengthscale=..],... or a JSON file", metavar="LIST"),
    Option("truth_prior", text, None, "the vehicle whose energies the truth is drawn around, or a --priors "
           "candidate's name (its vehicle); default the run's vehicle",
           "paper 004: the truth drawn from one candidate", metavar="NAME"),
)

# --- the exact optimum (a diagnostic: the price of rectification) -----------------------------

#: The longest time limit of the exact optimum's MILP (a week).
MAX_TIME_LIMIT = 7 * 24 * 3600.0

#: The exact optimum's settings of a run.
OPTIMUM_SETTINGS = (
    Option("exact_optimum", flag, False, "Also compute the best simple route under f (a MILP when f has negative "
           "cycles)", metavar="FLAG"),
    Option("exact_optimum_time_limit", in_range(0, MAX_TIME_LIMIT, lo_open=True, why="seconds"), 300.0,
           "seconds for the exact optimum", metavar="SECONDS"),
)

#: Every setting of a run, by name, in the order of help texts.
RUN_SETTINGS: dict[str, Option] = {o.name: o for o in (
    *NETWORK_SETTINGS, *ROUTE_SETTINGS, *VEHICLE_SETTINGS, *AGENT_SETTINGS, *LOOP_SETTINGS, *KERNEL_SETTINGS,
    *SCALE_SETTINGS, *ENVIRONMENT_SETTINGS, *PRIOR_SETTINGS, *OPTIMUM_SETTINGS)}


# --- settings given inside another's spec ------------------------------------------------------

#: The settings the command line (and a config file) gives inside another setting's spec, so that
#: a run has one option per idea: ``--kernel combined[lengthscale=0.5,nu=1]``, ``--truth
#: gp[lengthscale=2,drift=0.01,prior=delivery-van,closures=random[rate=0.05]]``, ``--turns
#: physics[kernel=fixed]``. The head setting → {its spec's key: the setting that key sets}. The
#: settings stay settings (``config.json``, ``--sweep`` and the library name them as before).
FOLDS: dict[str, dict[str, str]] = {
    "kernel": {"lengthscale": "lengthscale", "kappa": "kappa", "nu": "nu"},
    "truth": {"lengthscale": "truth_lengthscale", "drift": "drift", "prior": "truth_prior", "closures": "closures"},
    "prior_turns": {"kernel": "turn_kernel"},
}
#: Each folded setting: (its head setting, its key in the head's spec).
FOLDED: dict[str, tuple[str, str]] = {setting: (head, key) for head, keys in FOLDS.items()
                                      for key, setting in keys.items()}
#: The trip's two points are given as ``--route LAT,LON:LAT,LON``.
ROUTE_POINTS = ("from_point", "to_point")
#: Settings with no flag of their own nor a spec to live in: a config file's key (or ``--sweep``).
CONFIG_ONLY = ("exact_optimum_time_limit",)
#: The settings that are command-line options of ``evroute simulate`` (and, less its axes, of
#: ``compare``): every setting but those folded into another's spec and :data:`CONFIG_ONLY`.
FLAG_SETTINGS = tuple(n for n in RUN_SETTINGS if n not in FOLDED and n not in ROUTE_POINTS and n not in CONFIG_ONLY)


def spelling(name: str) -> str:
    """How a setting is written on the command line: its flag (``--horizon``), the key of the spec it
    is folded into (``--kernel nu``), or ``--route``'s start or end for the trip's points; a config file's key
    (``exact_optimum_time_limit``) for the others."""
    if name in FOLDED:
        head, key = FOLDED[name]
        return f"{RUN_SETTINGS[head].cli_flag} {key}"
    if name in ROUTE_POINTS:
        return "--route's start" if name == "from_point" else "--route's end"
    if name in CONFIG_ONLY:
        return name
    return RUN_SETTINGS[name].cli_flag


def _head_items(text: str) -> tuple[str, list[str]] | None:
    """``NAME[k=v,...]`` → (NAME, ["k=v", ...]), brackets inside a value kept (``closures=random[rate=0.1]``);
    None when the text is not of that form (its converter then says why)."""
    text = text.strip()
    start = text.find("[")
    if start < 0:
        return text, []
    if not text.endswith("]") or text.count("[") != text.count("]"):
        return None
    return text[:start].strip(), split_list(text[start + 1:-1])


def unfold_settings(given: dict, spell=spelling) -> dict:
    """The settings a command line or a config file gave, with the folded ones taken out of their
    heads' specs (:data:`FOLDS`: ``{"kernel": "combined[nu=1]"}`` → ``{"kernel": "combined", "nu":
    "1"}``) and a trip between two points out of ``route`` (``"43.73,7.42:43.74,7.43"`` →
    ``from_point``, ``to_point``). A head without folded keys is left as it was given. Nothing is
    converted; a setting given twice (in a spec and by its own name) is one :class:`EvrouteError`
    line, naming each as ``spell(name)`` says it is written.

    Examples
    --------
    >>> unfold_settings({"truth": "rkhs[B=10,drift=0.01]"})
    {'truth': 'rkhs[B=10]', 'drift': '0.01'}
    >>> unfold_settings({"route": "49.61,6.12:49.60,6.13"})
    {'route': None, 'from_point': '49.61,6.12', 'to_point': '49.60,6.13'}
    """
    out = dict(given)

    def put(name, value, head):
        if out.get(name) is not None:
            raise EvrouteError(f"{spell(name)} is given twice: in {spell(head)} and on its own")
        out[name] = value

    for head, keys in FOLDS.items():
        value = out.get(head)
        parts = _head_items(value) if isinstance(value, str) else None
        if not parts or not parts[1]:
            continue
        name, items = parts
        kept = []
        for item in items:
            key = item.partition("=")[0].strip().lower()
            if key in keys and "=" in item:
                put(keys[key], item.partition("=")[2].strip(), head)
            else:
                kept.append(item)
        if kept and head != "truth":  # (the truth's own options go to it; the others have none)
            raise EvrouteError(f"{spell(head)} {value!r}: unknown option(s) {', '.join(kept)} (accepted: "
                               f"{', '.join(keys)})")
        if len(kept) < len(items):
            out[head] = f"{name}[{','.join(kept)}]" if kept else name
    route = out.get("route")
    if isinstance(route, str) and "," in route:  # (a named route has no comma)
        start, sep, end = route.partition(":")
        if not sep or ":" in end or not start.strip() or not end.strip():
            raise EvrouteError(f"{spell('route')} {route!r}: two points are LAT,LON:LAT,LON")
        out["route"] = None
        put("from_point", start.strip(), "route")
        put("to_point", end.strip(), "route")
    return out


# --- the sumo truth's options --------------------------------------------------------------

def _hour(name, value):
    return None if value in (None, "none") else in_range(0, None, why="an hour of the simulation")(name, value)


def demand_file(name, value):
    """A SUMO route file that exists (the text as given: config.json names it as the user did)."""
    if value in (None, "none", "random"):
        return None
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise EvrouteError(f"{name}: no such file: {value}")
    return str(value)


#: The FASTSim cars a powertrain world drives (``--truth sumo[powertrain=NAME]``): their names and
#: FASTSim 3.1's vehicle resources (battery-electric, with thermal models but the Zoe's).
POWERTRAINS = {"leaf": "2016 Nissan Leaf 30 kWh thrml.yaml", "bolt": "2020 Chevrolet Bolt EV thrml.yaml",
               "model3": "2022 Tesla Model 3 RWD thrml.yaml", "zoe": "2022_Renault_Zoe_ZE50_R135.yaml"}
#: What to run when FASTSim is missing.
FASTSIM_INSTALL = 'pip install "evroute[fastsim]"'


def powertrain_spec(name, value):
    """A FASTSim car (:data:`POWERTRAINS`) or FASTSim vehicle file (YAML or JSON), as given; None
    (``none``): SUMO's own energies. FASTSim must be installed (looked up, not imported)."""
    if value in (None, "none"):
        return None
    value = str(value).strip()
    if value not in POWERTRAINS:
        path = Path(value).expanduser()
        if path.suffix.lower() not in (".yaml", ".yml", ".json"):
            raise EvrouteError(f"{name}: unknown car {value!r}; one of {', '.join(POWERTRAINS)}, or a FASTSim vehicle "
                               "file (.yaml, .json)")
        if not path.is_file():
            raise EvrouteError(f"{name}: no such FASTSim vehicle file: {value}")
    if importlib.util.find_spec("fastsim") is None:
        raise EvrouteError(f"the car {value!r} ({name}) needs FASTSim, which is not installed: {FASTSIM_INSTALL}")
    return value


#: The options of ``--truth sumo[...]`` (:mod:`evroute.world.sumo_truth` registers the truth with them), declared
#: here, where importing them costs nothing: ``evroute sumo atlas`` makes its flags of them.
SUMO_TRUTH_OPTIONS = (
    Option("rate", in_range(0, 1e6, lo_open=True, why="random trips an hour"), 1800.0,
           "background traffic: random trips an hour", "measured: 1,800 trips over 30 min give Monaco a realistic traffic",
           metavar="NUMBER"),
    Option("hours", in_range(0, 24, lo_open=True, why="simulated hours"), 0.5, "simulated time span (hours)",
           metavar="NUMBER"),
    Option("probes", int_range(0, 100, why="traversals of every edge between the trip's ends"), 3,
           "probe vehicles drive every edge on a route between the trip's ends this many times", metavar="INT"),
    Option("atlas_seed", int_range(0, 2**31 - 1, why="SUMO's seed"), 0, "seed of the demand and of SUMO (the "
           "run's seed draws the observations)", metavar="INT"),
    Option("hour", _hour, None, "only traversals entered in this hour of the simulation (rush hour and night "
           "differ); default all"),
    Option("min_traversals", int_range(1, 10_000), 3, "fewer traversals: the edge keeps E_det (the fallback)"),
    Option("demand", demand_file, None, "a SUMO route file as the background traffic (its vehicles become the "
           "run's car)", metavar="ROUTES.xml"),
    Option("turns", flag, True, "edges plus turns: the kinetic-energy changes booked on the junctions (false: on "
           "the edges)", "the kinetic split, docs/reproductions/sumo.md"),
    Option("powertrain", powertrain_spec, None, "a real car's power train drives SUMO's traffic: "
           f"{', '.join(POWERTRAINS)} or a FASTSim vehicle file",
           "FASTSim 3.1's battery-electric cars, NREL", metavar="NAME|FILE"),
    Option("ambient_c", in_range(-40, 50, why="degrees Celsius"), 20.0, "ambient temperature (degrees C) of the power "
           "train's heating and air conditioning", "a mild day: heating off, the cars' base auxiliary load",
           metavar="NUMBER"),
)
