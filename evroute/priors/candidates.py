"""Candidate priors of paper 004 (PE-GP-UCB and its baselines): "which vehicle am I, which
kernel, how fast do the energies drift?".

A candidate prior p is (mean model, kernel, forgetting rate ε) (spec
confidence-bounds-and-prior-elimination §2.5): the mean is E_det of a vehicle, the kernel is
the run's kernel with its own lengthscale, κ or ν if the candidate sets them, and ε > 0 makes
it the time-varying kernel k(e, e′)·(1 − ε)^{|t−t′|/2} (paper 004; Bogunovic et al. 2016).

``--priors`` takes a comma-separated list of items, each one of

- a vehicle preset or vehicle JSON file: ``delivery-van`` (the run's kernel, ε = 0);
- the same with settings: ``delivery-van[eps=0.01]``, ``sumo-ev[lengthscale=0.5,kappa=2]``,
  ``compact-ev[name=cev-fast,eps=0.05]``;
- a candidates file, a JSON object ``{"candidates": [{"vehicle": "delivery-van", "eps": 0.01,
  "lengthscale": 0.5, "kappa": 1, "nu": 2, "name": "van-drift"}, ...]}`` (only ``vehicle`` is
  required).

A candidate's name is its item as written unless ``name`` is given; names must be distinct.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import EvrouteError
from ..physics.energy import load_vehicle, vehicle_names
from ..physics.routes import edge_energies
from ..specs import Option, format_value, parse_spec, resolve_options, split_list
from ..validate import positive_float, unit_rate
from .network_prior import NetworkPrior
from .prior import ShiftedPrior

__all__ = ["Candidate", "CandidatePrior", "CANDIDATE_OPTIONS", "parse_candidates", "describe_candidates",
           "candidate_priors", "check_priors", "candidates_from_json"]



def _text(name, value) -> str:
    v = str(value).strip()
    if not v or any(c in v for c in ",[]="):
        raise EvrouteError(f"{name} must be a non-empty name without , [ ] =, got {value!r}")
    return v


#: Settings a candidate may give (the run's value where left out).
CANDIDATE_OPTIONS: tuple[Option, ...] = (
    Option("lengthscale", positive_float, None, "context lengthscale of the candidate's kernel (default: the run's)"),
    Option("kappa", positive_float, None, "graph Matérn kappa (default: the run's)"),
    Option("nu", positive_float, None, "graph Matérn nu (default: the run's)"),
    Option("eps", unit_rate, 0.0, "forgetting rate of the (1 - eps)^(|t - t'|/2) kernel (paper 004; 0: static)"),
    Option("name", _text, None, "the candidate's name in tables and plots (default: the item as written)"),
)


@dataclass(frozen=True)
class Candidate:
    """One candidate prior: a vehicle (E_det), optional kernel settings, a forgetting rate.

    Attributes
    ----------
    name : str
    vehicle : str
        Vehicle preset or JSON file path.
    lengthscale, kappa, nu : float or None
        Kernel settings; None: the run's.
    eps : float
        Forgetting rate ε ∈ [0, 1).
    """

    name: str
    vehicle: str
    lengthscale: float | None = None
    kappa: float | None = None
    nu: float | None = None
    eps: float = 0.0

    def kernel_settings(self, lengthscale: float, kappa: float, nu: float) -> tuple[float, float, float]:
        """(lengthscale, κ, ν) of this candidate, the run's where it gives none."""
        return (self.lengthscale if self.lengthscale is not None else float(lengthscale),
                self.kappa if self.kappa is not None else float(kappa),
                self.nu if self.nu is not None else float(nu))

    @property
    def own_kernel(self) -> bool:
        """Whether it sets any kernel setting of its own."""
        return any(v is not None for v in (self.lengthscale, self.kappa, self.nu))

    @property
    def label(self) -> str:
        """The canonical item: ``vehicle[eps=…,…,name=…]`` (settings given; the name when it is
        not the item itself)."""
        opts = [(k, v) for k, v in (("lengthscale", self.lengthscale), ("kappa", self.kappa), ("nu", self.nu),
                                    ("eps", self.eps)) if v not in (None, 0.0)]
        inner = ",".join(f"{k}={format_value(v)}" for k, v in opts)
        plain = f"{self.vehicle}[{inner}]" if inner else self.vehicle
        return plain if self.name == plain else f"{self.vehicle}[{inner + ',' if inner else ''}name={self.name}]"


def _candidate(vehicle: str, raw: dict, label: str) -> Candidate:
    opts = resolve_options(CANDIDATE_OPTIONS, raw, f"candidate prior {label!r}")
    load_vehicle(vehicle)  # checked now: one error line, before any work
    return Candidate(name=opts["name"] or label, vehicle=vehicle, lengthscale=opts["lengthscale"],
                     kappa=opts["kappa"], nu=opts["nu"], eps=float(opts["eps"]))


def _from_file(path: Path) -> list[Candidate] | None:
    """The candidates of a candidates file, or None when the JSON file is a vehicle file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvrouteError(f"priors file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "candidates" not in data:
        return None
    items = data["candidates"]
    if not isinstance(items, list) or not items:
        raise EvrouteError(f"priors file {path}: \"candidates\" must be a non-empty list of objects")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "vehicle" not in item:
            raise EvrouteError(f"priors file {path}: candidate {i} must be an object with a \"vehicle\"")
        raw = {str(k).lower(): v for k, v in item.items() if k != "vehicle"}
        vehicle = str(item["vehicle"])
        if not Path(vehicle).is_absolute() and not Path(vehicle).exists() and vehicle.lower().endswith(".json"):
            vehicle = str(path.parent / vehicle)  # a vehicle file named relative to the priors file
        out.append(_candidate(vehicle, raw, raw.get("name") or f"{path.stem}:{i}"))
    return out


def parse_candidates(text: str | None) -> list[Candidate]:
    """The candidate priors of ``--priors`` (see the module docstring), checked.

    ``None`` gives every vehicle preset, with the run's kernel and ε = 0.

    Returns
    -------
    list of Candidate
        The candidate priors, in the order given (every vehicle preset when ``text`` is None).
    """
    if text is None:
        return [Candidate(name=v, vehicle=v) for v in vehicle_names()]
    items = split_list(text)
    if not items:
        raise EvrouteError("--priors is empty; give vehicle presets such as sumo-ev,delivery-van")
    out: list[Candidate] = []
    for item in items:
        path = Path(item)
        if "[" not in item and path.suffix.lower() == ".json" and not path.is_file():
            raise EvrouteError(f"--priors: file not found: {item} (a candidates file or a vehicle file)")
        if "[" not in item and path.suffix.lower() == ".json":
            from_file = _from_file(path)
            if from_file is not None:
                out.extend(from_file)
                continue
        if "[" in item:
            head, _, _ = item.partition("[")
            _, raw = parse_spec("x" + item[len(head):], "candidate prior", "delivery-van[eps=0.01]")
            vehicle = head.strip()
        else:
            vehicle, raw = item, {}
        out.append(_candidate(vehicle, raw, item))
    names = [c.name for c in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise EvrouteError(f"--priors names a prior twice: {', '.join(twice)} (give name=... to tell them apart)")
    return out


def describe_candidates(candidates: list[Candidate]) -> list[dict]:
    """One plain dict per candidate (for ``config.json`` and the summary)."""
    return [{"name": c.name, "vehicle": c.vehicle, "lengthscale": c.lengthscale, "kappa": c.kappa, "nu": c.nu,
             "eps": c.eps} for c in candidates]


@dataclass
class CandidatePrior:
    """A candidate built for a run: its prior (mean E_det of its vehicle, its kernel) and ε."""

    prior: object
    eps: float = 0.0

    @property
    def mean(self):
        return self.prior.mean


def candidate_priors(candidates: list[Candidate], net, base_prior, *, kernel: str, lengthscale: float,
                     kappa: float, nu: float, prior_var: float) -> dict[str, CandidatePrior]:
    """Each candidate's prior on ``net``: E_det of its vehicle over ``base_prior``'s kernel, or
    over a kernel of its own settings (built once per distinct setting, σ₀² = ``prior_var``
    as for every agent). Means are E vectors; kernels are shared, never copied."""
    kernels: dict[tuple, object] = {}
    out: dict[str, CandidatePrior] = {}
    for c in candidates:
        mean = edge_energies(net, load_vehicle(c.vehicle))
        base = base_prior
        if c.own_kernel:
            key = c.kernel_settings(lengthscale, kappa, nu)
            if key not in kernels:
                kernels[key] = NetworkPrior(net, mean, kernel, *key, prior_var)
            base = kernels[key]
        out[c.name] = CandidatePrior(ShiftedPrior(base, mean), c.eps)
    return out


def candidates_from_json(items) -> tuple[Candidate, ...] | None:
    """The candidates recorded in a run's ``config.json`` (:func:`describe_candidates`), checked."""
    if items is None:
        return None
    if not isinstance(items, list) or not all(isinstance(i, dict) and "vehicle" in i for i in items):
        raise EvrouteError("the recorded candidate priors must be a list of objects with a vehicle")
    out = []
    for i in items:
        raw = {k: v for k, v in i.items() if k not in ("vehicle", "name") and v is not None}
        out.append(_candidate(str(i["vehicle"]), raw, str(i.get("name") or i["vehicle"])))
    return tuple(out)


def check_priors(name, value) -> tuple[Candidate, ...]:
    """``--priors``: a list of candidates (text, or :class:`Candidate` objects), read once (an option converter)."""
    if isinstance(value, tuple | list) and all(isinstance(c, Candidate) for c in value):
        return tuple(value)
    return tuple(parse_candidates(str(value)))


