"""The bandit loop (paper 003, Algorithm 1), its ground truth, regret and run directory.

Per seed, the true expected energy f is one sample of GP(E_det, k) over all edges (SPEC §3;
003 Sec. 4.1), with σ₀² = 0.25² σ²_det and ς² = 0.1² σ²_det. Each round the policy turns
the posterior into rectified edge weights (Algorithm 2), the oracle (Dijkstra) picks a route,
every edge on it is observed as r = f(e) + ε, and the posterior is updated.

Regret. A GP sample is physically loose: it usually has cycles of negative total energy,
so "the best route" is defined with care (SPEC §3):

- ``optimal_energy_wh``: the clairvoyant route's true energy, i.e. the route the policy's own
  oracle returns when handed the true f (Dijkstra on E[max(0, N(f_e, ς²))]);
  ``regret_wh = expected_energy_wh − optimal_energy_wh`` is the *learning* regret. It can be
  negative in a single round (a route that is worse under rectified weights may be better
  under f).
- ``exact_optimal_energy_wh`` (``exact_optimum=True``): the best vertex-simple route under f
  (:mod:`evroute.optimum`), a diagnostic: its gap to the clairvoyant route is the price of
  rectification. Vertex-simple is taken strictly (no intersection twice) when such a route
  exists, else with open ends (the route may pass its start edge's tail or end edge's head
  once more; needed on monaco:B, where turn restrictions leave no strict route);
  ``summary["exact_optimum"]["ends"]`` says which.

The loop is ready for volatile arms: :meth:`Problem.available_edges` may return a boolean
mask per round (availability changing over time); the oracle leaves the unavailable edges
out of its search, and a round with no available route is a one-line error.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import __version__
from .cache import cached_arrays, hash_bytes
from .errors import EvrouteError, Interrupted
from .io import atomic_write_json, atomic_write_with, make_public

PRIOR_SCALE = 0.25  # σ₀ = 0.25 σ_det (003 Sec. 4.1)
NOISE_SCALE = 0.1  # ς = 0.1 σ_det

KERNEL_KINDS = ("combined", "graph", "context")


@dataclass
class SimulationConfig:
    """Everything that defines a run; saved as ``config.json`` (reproduces it exactly)."""

    network: str = "synthetic"
    osm: str | None = None
    dem: str | None = None
    route: str | None = None
    from_point: str | None = None
    to_point: str | None = None
    policy: str = "gp-ts"
    model: str = "exact"
    horizon: int = 500
    seed: int = 0
    kernel: str = "combined"
    lengthscale: float = 1.0
    kappa: float = 1.0
    nu: float = 2.0
    omega: float = 1.0
    xi: float = 1.0
    beta_scale: float = 1.0
    joint_samples: bool = False
    vehicle: str | None = None
    exact_optimum: bool = False
    exact_optimum_time_limit: float = 300.0
    model_options: dict = field(default_factory=dict)
    #: context lengthscale of the kernel the ground truth f is sampled from (the paper's
    #: kernel lengthscales are 1); ``lengthscale`` is the agent's prior only
    truth_lengthscale: float = 1.0

    def validate(self) -> None:
        """Raise EvrouteError (one line) on a bad value."""
        from .policies import parse_policy_name

        if not isinstance(self.horizon, int) or isinstance(self.horizon, bool) or self.horizon <= 0:
            raise EvrouteError(f"horizon must be a positive integer, got {self.horizon!r}")
        if self.horizon > MAX_HORIZON:
            raise EvrouteError(
                f"horizon {self.horizon:,} is too long: at most {MAX_HORIZON:,} rounds (every round is "
                f"logged, ~{LOG_BYTES_PER_ROUND + 50 * LOG_BYTES_PER_EDGE:,} bytes for a 50-edge route, and "
                "its time kept for the summary; 10⁸ rounds would already be ~500 GB of logs and days of "
                "computing)")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise EvrouteError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.kernel not in KERNEL_KINDS:
            raise EvrouteError(f"unknown kernel {self.kernel!r}; choose one of: {', '.join(KERNEL_KINDS)}")
        for name in ("lengthscale", "truth_lengthscale", "kappa", "nu", "omega", "xi", "beta_scale"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise EvrouteError(f"{name} must be a positive finite number, got {value!r}")
        family, _ = parse_policy_name(self.policy)
        from .models import available_models

        if self.model not in available_models():
            raise EvrouteError(f"unknown model {self.model!r}; choose one of: {', '.join(available_models())}")
        if family == "bi" and self.model not in ("exact", "bi"):
            raise EvrouteError(f"--model {self.model} is a GP backend for the gp-* policies; {self.policy} "
                               "uses its own Bayesian-inference model (leave --model out)")

    @property
    def backend(self) -> str:
        """The posterior backend actually used: ``bi`` for bi-* policies, else ``model``."""
        from .policies import parse_policy_name

        family, _ = parse_policy_name(self.policy)
        return "bi" if family == "bi" else self.model


# --------------------------------------------------------------------------------------
# The problem: network, route, prior, kernel, ground truth
# --------------------------------------------------------------------------------------


def graph_kernel(net, nu: float = 2.0, kappa: float = 1.0) -> np.ndarray:
    """The graph Matérn kernel k_G on the edges of ``net`` (cached with the network)."""
    from .kernels import graph_matern, incidence_laplacian

    def build():
        lap = incidence_laplacian(net.n_edges, net.conn_src, net.conn_dst, net.edges.length_m.to_numpy())
        return {"value": graph_matern(lap, nu=nu, kappa=kappa)}

    params = {"network": net.cache_key, "nu": float(nu), "kappa": float(kappa), "what": "graph_matern"}
    return cached_arrays("kernels", params, build)["value"]


def network_kernel(net, kind: str = "combined", lengthscale: float = 1.0, kappa: float = 1.0,
                   nu: float = 2.0, prior_var: float = 1.0) -> np.ndarray:
    """Prior covariance over all edges: σ₀² · normalise(k_G·k_f + k_f′) (SPEC §4)."""
    from .kernels import combined_kernel, standardize_context

    x = standardize_context(net.context)
    k_g = graph_kernel(net, nu, kappa) if kind in ("combined", "graph") else None
    if k_g is None:
        k_g = np.ones((1, 1))  # unused by the context-only kernel
    return combined_kernel(k_g, x, lengthscales=lengthscale, kind=kind, prior_var=prior_var)


def _truth(net, prior_mean: np.ndarray, prior_var: float, seed: int, lengthscale: float = 1.0) -> np.ndarray:
    """f = E_det + L z: one sample of GP(E_det, k) with the paper's kernel (cached per seed).

    ``lengthscale`` is the context lengthscale of that kernel (the paper's is 1). The same
    z for every lengthscale: the seed fixes the draw, the lengthscale its smoothness.
    """
    from .kernels import jittered_cholesky

    def build():
        k = network_kernel(net, "combined", lengthscale, 1.0, 2.0, prior_var)
        chol = jittered_cholesky(k)
        z = np.random.default_rng([seed, 1]).standard_normal(net.n_edges)
        return {"value": prior_mean + chol @ z}

    params = {"network": net.cache_key, "seed": int(seed), "prior_var": float(prior_var),
              "prior_mean": hash_bytes(np.ascontiguousarray(prior_mean).tobytes())[:20], "what": "truth-v1"}
    if float(lengthscale) != 1.0:  # (ℓ = 1 keeps the key of the entries cached before this option)
        params["lengthscale"] = float(lengthscale)
    return cached_arrays("truth", params, build)["value"]


@dataclass
class Problem:
    """A prepared bandit problem (network, route, prior, truth) for one seed."""

    net: object
    oracle: object
    route: object
    vehicle: object
    prior_mean: np.ndarray
    sigma_det: float
    prior_var: float
    noise_var: float
    truth: np.ndarray
    seed: int

    @property
    def noise_std(self) -> float:
        return math.sqrt(self.noise_var)

    def available_edges(self, t: int) -> np.ndarray | None:
        """Edges available in round t (None: all). Hook for volatile arms."""
        return None

    def clairvoyant_route(self, rectify: bool = True) -> list[int]:
        """The route the rectified oracle picks when handed the true f."""
        from .policies import rectified_mean

        w = rectified_mean(self.truth, self.noise_std) if rectify else self.truth
        return self.oracle.shortest_path(w, self.route.start, self.route.end).edges


def prepare_problem(cfg: SimulationConfig, net=None) -> Problem:
    """Load the network, resolve the route, compute E_det, σ_det and the true f for the seed."""
    from .energy import load_vehicle
    from .network import load_network
    from .oracle import Oracle
    from .routes import edge_energies, resolve_route

    vehicle = load_vehicle(cfg.vehicle)
    net = net or load_network(cfg.network, osm=cfg.osm, dem=cfg.dem)
    route = resolve_route(net, cfg.route, cfg.from_point, cfg.to_point)
    oracle = Oracle.from_network(net)
    if not oracle.reachable(route.start)[route.end]:
        raise EvrouteError(f"route {route.name}: the end edge {route.end} cannot be reached from the start edge {route.start}")
    e_det = edge_energies(net, vehicle)
    sigma_det = float(np.std(e_det))
    if not sigma_det > 0:
        raise EvrouteError("the deterministic energies are all equal: σ_det = 0, no prior scale")
    prior_var = (PRIOR_SCALE * sigma_det) ** 2
    noise_var = (NOISE_SCALE * sigma_det) ** 2
    truth = _truth(net, e_det, prior_var, cfg.seed, cfg.truth_lengthscale)
    return Problem(net, oracle, route, vehicle, e_det, sigma_det, prior_var, noise_var, truth, cfg.seed)


def make_agent(cfg: SimulationConfig, problem: Problem, kernel: np.ndarray | None = None):
    """The policy and the posterior model of a run.

    Parameters
    ----------
    cfg : SimulationConfig
    problem : Problem
    kernel : array (E, E), optional
        The prior covariance, if the caller already has it (e.g. from an in-process
        cache); by default it is built with :func:`network_kernel`. Exact reads it without
        a copy; a backend that writes into its kernel argument gets its own copy.
    """
    from .models import make_model
    from .policies import make_policy, parse_policy_name

    family, rule = parse_policy_name(cfg.policy)
    options = {"ucb": {"beta_scale": cfg.beta_scale},
               "bucb": {"omega": cfg.omega, "xi": cfg.xi, "beta_scale": cfg.beta_scale},
               "ts": {"joint": cfg.joint_samples}, "greedy": {}}[rule]
    policy = make_policy(rule, **options)
    backend = cfg.backend
    if backend == "bi":
        model = make_model("bi", problem.prior_mean, prior_var=problem.prior_var, noise_var=problem.noise_var)
        return policy, model
    if kernel is None:
        kernel = network_kernel(problem.net, cfg.kernel, cfg.lengthscale, cfg.kappa, cfg.nu, problem.prior_var)
    elif backend != "exact":  # a shared kernel: other backends may write into theirs
        kernel = np.array(kernel)
    opts = model_options(cfg, problem)
    try:
        model = make_model(backend, problem.prior_mean, kernel, noise_var=problem.noise_var, **opts)
    except ValueError as exc:  # a read-only (shared) kernel handed to a backend that writes
        if "read-only" not in str(exc):
            raise
        model = make_model(backend, problem.prior_mean, np.array(kernel), noise_var=problem.noise_var, **opts)
    return policy, model


def model_options(cfg: SimulationConfig, problem: Problem) -> dict:
    """Backend-specific options of ``cfg``; backends that take the network, seed or
    kernel settings as keyword arguments get them here."""
    opts = dict(cfg.model_options)
    if cfg.backend not in ("exact", "bi"):
        import inspect

        from .models import _REGISTRY

        params = inspect.signature(_REGISTRY[cfg.backend]).parameters
        extra = {"network": problem.net, "seed": cfg.seed, "kernel_kind": cfg.kernel,
                 "lengthscale": cfg.lengthscale, "kappa": cfg.kappa, "nu": cfg.nu,
                 "prior_var": problem.prior_var}
        for k, v in extra.items():
            if k in params and k not in opts:
                opts[k] = v
    return opts


# --------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------


#: Rounds whose log rows are held in memory before they are appended to the run
#: directory's Parquet tables (one row group per chunk): a long run's memory stays flat.
LOG_CHUNK_ROUNDS = 10_000

#: The longest run accepted. Each round is logged (one row, plus one per edge driven) and
#: its time kept for the summary's median; beyond 10⁸ rounds the logs alone would be
#: hundreds of GB and the run would take days at ~1 ms a round.
MAX_HORIZON = 100_000_000

#: Rough size of the logs (in memory, as DataFrames): per round and per edge driven.
LOG_BYTES_PER_ROUND = 250
LOG_BYTES_PER_EDGE = 100

ROUND_COLUMNS = ("t", "path", "n_edges", "expected_energy_wh", "observed_energy_wh", "optimal_energy_wh",
                 "regret_wh", "cumulative_regret_wh", "beta", "seconds")
OBSERVATION_COLUMNS = ("t", "edge", "observed_wh", "expected_wh", "prior_mean_wh", "post_mean_before",
                       "post_std_before")


class RoundLog:
    """The per-round and per-observation rows of a run, in chunks of ``chunk`` rounds.

    With a ``directory`` every full chunk is appended to ``rounds.parquet`` and
    ``observations.parquet`` there (one row group each) and dropped from memory; without
    one the chunks are kept and concatenated by :meth:`close`.
    """

    def __init__(self, directory: Path | None = None, chunk: int | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.chunk = int(chunk or LOG_CHUNK_ROUNDS)
        self._rows: dict[str, list] = {k: [] for k in ROUND_COLUMNS}
        self._obs: dict[str, list] = {k: [] for k in OBSERVATION_COLUMNS}
        self._parts: dict[str, list] = {"rounds": [], "observations": []}
        self._writers: dict = {}

    def add(self, round_row: dict, observations: dict) -> None:
        """One round: ``round_row`` holds a value per round column, ``observations`` an
        array per observation column."""
        for k in ROUND_COLUMNS:
            self._rows[k].append(round_row[k])
        for k in OBSERVATION_COLUMNS:
            self._obs[k].append(observations[k])
        if len(self._rows["t"]) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        if not self._rows["t"]:
            return
        rounds = pd.DataFrame(self._rows)
        observations = pd.DataFrame({k: np.concatenate(v) for k, v in self._obs.items()})
        for v in (*self._rows.values(), *self._obs.values()):
            v.clear()
        for name, df in (("rounds", rounds), ("observations", observations)):
            if self.directory is None:
                self._parts[name].append(df)
            else:
                self._append(name, df)

    def _append(self, name: str, df: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = pq.ParquetWriter(self.directory / f"{name}.parquet", table.schema)
        writer.write_table(table.cast(writer.schema))

    def close(self) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
        """Write what is left; return the tables (None for tables written to the directory)."""
        self.flush()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        if self.directory is not None:
            return None, None
        return tuple(pd.concat(self._parts[n], ignore_index=True) if self._parts[n] else
                     pd.DataFrame({c: [] for c in cols})
                     for n, cols in (("rounds", ROUND_COLUMNS), ("observations", OBSERVATION_COLUMNS)))

    def abort(self) -> None:
        """Close open files after an error (the caller removes the folder)."""
        for writer in self._writers.values():
            try:
                writer.close()
            except Exception:  # pragma: no cover - closing a broken file
                pass
        self._writers.clear()


@dataclass
class RunResult:
    """The result of a run: the three tables and the summary.

    ``rounds`` and ``observations`` are DataFrames; a run whose logs were written to a
    run directory as it went reads them from there when asked (``log_dir``).
    """

    _rounds: pd.DataFrame | None
    _observations: pd.DataFrame | None
    edges: pd.DataFrame
    summary: dict
    log_dir: Path | None = None

    @property
    def rounds(self) -> pd.DataFrame:
        return self._rounds if self._rounds is not None else pd.read_parquet(self.log_dir / "rounds.parquet")

    @property
    def observations(self) -> pd.DataFrame:
        if self._observations is not None:
            return self._observations
        return pd.read_parquet(self.log_dir / "observations.parquet")


def log_size_bytes(horizon: int, route_edges: int) -> int:
    """Rough size of a run's logs: :data:`LOG_BYTES_PER_ROUND` per round plus
    :data:`LOG_BYTES_PER_EDGE` per edge driven (routes taken as ``route_edges`` long)."""
    return int(horizon) * (LOG_BYTES_PER_ROUND + LOG_BYTES_PER_EDGE * max(int(route_edges), 1))


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_log_room(cfg: SimulationConfig, route_edges: int, directory: Path | None) -> None:
    """Refuse a horizon whose logs cannot be held: in memory when nothing is written
    (half the memory available), on disk when they go to ``directory`` (its free space)."""
    need = log_size_bytes(cfg.horizon, route_edges)
    if directory is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
            return
        if need > avail / 2:
            raise EvrouteError(
                f"the logs of {cfg.horizon:,} rounds (routes of ~{route_edges} edges) would need about "
                f"{_gb(need)} of memory and {_gb(avail)} is available: write the run to a directory "
                f"(it is then logged in chunks of {LOG_CHUNK_ROUNDS:,} rounds) or shorten the horizon")
    else:
        free = shutil.disk_usage(directory).free
        if need > free:
            raise EvrouteError(
                f"the logs of {cfg.horizon:,} rounds (routes of ~{route_edges} edges) would need about "
                f"{_gb(need)} and {directory} has {_gb(free)} free: shorten the horizon or write elsewhere")


def run_bandit(cfg: SimulationConfig, problem: Problem, progress=None, agent=None,
               log_dir: str | os.PathLike | None = None) -> RunResult:
    """Algorithm 1 for ``cfg.horizon`` rounds; returns the tables.

    Parameters
    ----------
    agent : (Policy, PosteriorModel), optional
        Use this policy and model instead of the ones ``cfg`` names (library use, tests).
    log_dir : path-like, optional
        Append ``rounds.parquet`` and ``observations.parquet`` there in chunks of
        :data:`LOG_CHUNK_ROUNDS` rounds as the run goes (memory stays flat); otherwise
        they are kept in memory.
    """
    policy, model = agent if agent is not None else make_agent(cfg, problem)
    rng_noise = np.random.default_rng([cfg.seed, 2])
    rng_policy = np.random.default_rng([cfg.seed, 3])
    f = problem.truth
    start, end = problem.route.start, problem.route.end
    clairvoyant = problem.clairvoyant_route()
    optimal = float(f[clairvoyant].sum())
    log_dir = Path(log_dir) if log_dir is not None else None
    check_log_room(cfg, len(clairvoyant), log_dir)

    log = RoundLog(log_dir)
    seconds_all = np.empty(cfg.horizon)
    visits = np.zeros(problem.net.n_edges, dtype=np.int64)
    cumulative = 0.0
    regret = 0.0
    try:
        for t in range(1, cfg.horizon + 1):
            tic = time.perf_counter()
            mu, sd = model.mean_std()
            weights, beta = policy.weights(model, t, rng_policy)
            mask = problem.available_edges(t)
            try:
                path = np.asarray(problem.oracle.shortest_path(weights, start, end, available=mask).edges,
                                  dtype=np.int64)
            except EvrouteError as exc:
                raise EvrouteError(f"round {t}: {exc}") from None
            observed = f[path] + problem.noise_std * rng_noise.standard_normal(len(path))
            mean_before, std_before = mu[path].copy(), sd[path].copy()
            model.update(path, observed)
            seconds = time.perf_counter() - tic
            expected = float(f[path].sum())
            regret = expected - optimal
            cumulative += regret
            seconds_all[t - 1] = seconds
            np.add.at(visits, path, 1)
            log.add({"t": t, "path": path.tolist(), "n_edges": len(path), "expected_energy_wh": expected,
                     "observed_energy_wh": float(observed.sum()), "optimal_energy_wh": optimal,
                     "regret_wh": regret, "cumulative_regret_wh": cumulative, "beta": float(beta),
                     "seconds": seconds},
                    {"t": np.full(len(path), t, dtype=np.int64), "edge": path, "observed_wh": observed,
                     "expected_wh": f[path], "prior_mean_wh": problem.prior_mean[path],
                     "post_mean_before": mean_before, "post_std_before": std_before})
            if progress is not None:
                progress(t)
        rounds, observations = log.close()
    except BaseException:
        log.abort()
        raise

    mu, sd = model.mean_std()
    e = problem.net.edges
    edges = pd.DataFrame({
        "edge": np.arange(problem.net.n_edges, dtype=np.int64), "u": e.u.to_numpy(), "v": e.v.to_numpy(),
        "osm_way": e.osm_way.to_numpy(), "length_m": e.length_m.to_numpy(),
        "speed_mps": e.speed_mps.to_numpy(), "grade": e.grade.to_numpy(),
        "energy_det_wh": problem.prior_mean, "energy_true_wh": f,
        "visits": visits,
        "post_mean_final": np.asarray(mu, dtype=float), "post_std_final": np.asarray(sd, dtype=float)})
    summary = {
        "final_cumulative_regret_wh": float(cumulative),
        "mean_seconds_per_round": float(seconds_all.mean()),
        "median_seconds_per_round": float(np.median(seconds_all)),
        "horizon": cfg.horizon, "policy": cfg.policy, "model": cfg.backend, "network": problem.net.name,
        "route": problem.route.name, "start_edge": problem.route.start, "end_edge": problem.route.end,
        "seed": cfg.seed, "lengthscale": cfg.lengthscale, "truth_lengthscale": cfg.truth_lengthscale,
        "kernel": cfg.kernel,
        "noise_std_wh": problem.noise_std, "prior_std_wh": math.sqrt(problem.prior_var),
        "sigma_det_wh": problem.sigma_det,
        "optimal_energy_wh": optimal, "optimal_path": [int(x) for x in clairvoyant],
        "exact_optimal_energy_wh": None, "exact_optimum": None, "rectification_gap_wh": None,
        "distinct_edges_observed": int(model.n_distinct),
        "last_route_regret_wh": float(regret),
    }
    if cfg.exact_optimum:
        opt = exact_optimum_cached(problem, cfg.exact_optimum_time_limit)
        summary["exact_optimal_energy_wh"] = opt["energy"]
        summary["exact_optimum"] = opt
        if opt["energy"] is not None:
            summary["rectification_gap_wh"] = optimal - opt["energy"]
    return RunResult(rounds, observations, edges, summary, log_dir=log_dir)


def exact_optimum_cached(problem: Problem, time_limit: float) -> dict:
    """The best vertex-simple route under f, computed once per (network, route, seed)."""
    import json

    from .cache import CacheEntry, make_key
    from .io import atomic_write_text
    from .optimum import exact_optimum

    params = {"network": problem.net.cache_key, "start": problem.route.start, "end": problem.route.end,
              "seed": problem.seed, "truth": float(problem.truth.sum()), "what": "exact-optimum-v2"}
    entry = CacheEntry("optimum", make_key(params))
    if entry.is_valid(["optimum.json"]):
        cached = json.loads(entry.path("optimum.json").read_text())
        if cached["status"] == "optimal" or cached.get("time_limit", 0) >= time_limit:
            return cached
    net = problem.net
    res = exact_optimum(net.n_edges, net.conn_src, net.conn_dst, net.edges.u.to_numpy(), net.edges.v.to_numpy(),
                        problem.truth, problem.route.start, problem.route.end, time_limit=time_limit,
                        ends="auto")
    out = {"energy": float(res.energy) if res.path else None, "path": [int(x) for x in res.path],
           "method": res.method, "status": res.status, "gap": float(res.gap), "seconds": float(res.seconds),
           "time_limit": float(time_limit), "ends": res.ends}
    try:
        entry.prepare()
        atomic_write_text(entry.path("optimum.json"), json.dumps(out))
        entry.commit(["optimum.json"])
    except (OSError, EvrouteError):
        pass
    return out


# --------------------------------------------------------------------------------------
# The run directory
# --------------------------------------------------------------------------------------

RUN_FILES = ("config.json", "rounds.parquet", "observations.parquet", "edges.parquet", "summary.json")


def is_finished_run(path: str | os.PathLike) -> bool:
    """A run directory is finished when its ``summary.json`` exists (it is written last)."""
    return (Path(path) / "summary.json").is_file()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def verify_run(run_dir: str | os.PathLike) -> str | None:
    """Check a finished run directory: ``None`` when it is complete and readable, else
    why not (one phrase).

    Checked: ``config.json`` and ``summary.json`` parse; the three Parquet tables can be
    opened; ``rounds.parquet`` has one row per round of the configured horizon, and
    ``observations.parquet`` one row per edge driven (the sum of ``rounds.n_edges``).
    """
    import json

    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    try:
        cfg = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        return f"{Path(exc.filename).name} is missing"
    except (OSError, ValueError) as exc:
        return f"config.json or summary.json is unreadable ({_first_line(exc)})"
    rows = {}
    for name in ("rounds", "observations", "edges"):
        path = run_dir / f"{name}.parquet"
        try:
            rows[name] = pq.read_metadata(path).num_rows
        except FileNotFoundError:
            return f"{name}.parquet is missing"
        except Exception as exc:  # pyarrow raises several kinds for damaged files
            return f"{name}.parquet is unreadable ({_first_line(exc)})"
    horizon = cfg.get("horizon") if isinstance(cfg, dict) else None
    if rows["rounds"] != horizon:
        return f"rounds.parquet has {rows['rounds']} rows, the run's horizon is {horizon}"
    try:
        driven = int(pq.read_table(run_dir / "rounds.parquet", columns=["n_edges"]).column(0).to_numpy().sum())
    except Exception as exc:
        return f"rounds.parquet is unreadable ({_first_line(exc)})"
    if rows["observations"] != driven:
        return f"observations.parquet has {rows['observations']} rows, the rounds drove {driven} edges"
    if rows["edges"] == 0:
        return "edges.parquet is empty"
    return None


def require_readable_run(run_dir: str | os.PathLike) -> Path:
    """``run_dir`` if :func:`verify_run` finds nothing wrong, else one EvrouteError line."""
    run_dir = Path(run_dir)
    why = verify_run(run_dir)
    if why is not None:
        raise EvrouteError(f"{run_dir} is not a readable run: {why}")
    return run_dir


def read_run_table(run_dir: str | os.PathLike, name: str, columns: list[str] | None = None) -> pd.DataFrame:
    """``<name>.parquet`` of a run directory; a missing or damaged file is one EvrouteError line."""
    path = Path(run_dir) / f"{name}.parquet"
    try:
        return pd.read_parquet(path, columns=columns)
    except FileNotFoundError:
        raise EvrouteError(f"{run_dir} is not a complete run directory (missing {name}.parquet)") from None
    except Exception as exc:  # pyarrow raises several kinds for damaged files
        raise EvrouteError(f"{path} is unreadable ({_first_line(exc)}); rerun the run that wrote it") from None


#: Every name evroute writes into a run directory (the tables' CSV copies included).
RUN_DIR_NAMES = frozenset(RUN_FILES) | {"rounds.csv", "observations.csv", "edges.csv"}


def is_run_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an evroute run directory: its ``config.json`` is evroute's own
    (a JSON object with ``evroute_version`` and ``resolved``)."""
    import json

    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "evroute_version" in cfg and "resolved" in cfg


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def stale_siblings(out: Path) -> list[Path]:
    """Temporary folders of ``out`` left by killed runs: ``.NAME.partial-PID-*`` and
    ``.NAME.old-PID`` whose process is gone (``.NAME.partial-XXXX`` of older versions,
    without a pid, count as stale too)."""
    import re

    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(partial|old)-(?:(\d+)(?:-.*)?|[a-z0-9_]{{8}})$")
    stale = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return stale
    for p in sorted(entries):
        m = pattern.match(p.name)
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m.group(2) is not None and _pid_alive(int(m.group(2))):
            continue  # another run with this --out is still going
        stale.append(p)
    return stale


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse an output directory that evroute may not write (one-line EvrouteError).

    ``out`` must not exist, be empty, or (with ``overwrite``) be an evroute run
    directory holding nothing but evroute's files: evroute never deletes what it did not
    write. The current directory and its ancestors are refused (a run replaces its
    directory by renaming a finished one into place).
    """
    from .io import directory_entries, short_list

    try:
        resolved, cwd = out.resolve(), Path.cwd().resolve()
    except OSError as exc:
        raise EvrouteError(f"cannot resolve the output path {out}: {exc.strerror}") from None
    if resolved == cwd or resolved in cwd.parents:
        raise EvrouteError(f"--out {out} is the current directory or one of its parents; a run needs a "
                           "directory of its own (e.g. --out runs/NAME)")
    contents = directory_entries(out, "output path")
    if not contents:
        return
    if not overwrite:
        raise EvrouteError(f"output directory {out} exists and is not empty (use --overwrite to replace "
                           "an evroute run directory)")
    if not is_run_directory(out):
        raise EvrouteError(f"{out} is not an evroute run directory (no evroute config.json), and evroute "
                           "replaces only its own run directories; nothing was deleted")
    foreign = [n for n in contents if n not in RUN_DIR_NAMES]
    if foreign:
        raise EvrouteError(f"{out} holds files evroute did not write ({short_list(foreign)}); move them "
                           "away first, nothing was deleted")


def prepare_out_dir(out: Path, overwrite: bool) -> Path:
    """Check the output directory ``out`` (:func:`check_out_dir`), remove temporary
    folders that killed runs left beside it, and return a fresh temporary sibling to
    write the run into (:func:`write_run` renames it to ``out`` when the run is complete)."""
    check_out_dir(out, overwrite)
    for p in stale_siblings(out):
        shutil.rmtree(p, ignore_errors=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
        make_public(tmp, directory=True)  # mkdtemp makes it 0700; the run is renamed to out
        return tmp
    except OSError as exc:
        raise EvrouteError(f"cannot write to {out.parent}: {exc.strerror}") from None


def write_run(result: RunResult, cfg: SimulationConfig, problem: Problem, out: Path,
              overwrite: bool = False, csv: bool = False, tmp: Path | None = None) -> Path:
    """Write a run directory; files go to a temporary folder renamed to ``out`` at the end."""
    tmp = tmp or prepare_out_dir(out, overwrite)
    config = {"evroute_version": __version__, **asdict(cfg),
              "resolved": {"network_cache_key": problem.net.cache_key, "route": problem.route.to_dict(),
                           "vehicle": problem.vehicle.to_dict(), "backend": cfg.backend,
                           "prior_scale": PRIOR_SCALE, "noise_scale": NOISE_SCALE,
                           "network_source": problem.net.meta.get("source")}}
    atomic_write_json(tmp / "config.json", config)
    in_memory = {"rounds": result._rounds, "observations": result._observations, "edges": result.edges}
    for name, df in in_memory.items():
        target = tmp / f"{name}.parquet"
        if df is not None:
            atomic_write_with(target, lambda p, df=df: df.to_parquet(p, index=False))
        elif result.log_dir is None or not (result.log_dir / f"{name}.parquet").is_file():
            raise EvrouteError(f"the run's {name} log is neither in memory nor on disk")
        elif result.log_dir.resolve() != tmp.resolve():  # logged elsewhere: copy it in
            atomic_write_with(target, lambda p, src=result.log_dir / f"{name}.parquet": shutil.copyfile(src, p))
        if csv:
            atomic_write_with(tmp / f"{name}.csv", lambda p, src=target: _parquet_to_csv(src, p))
    atomic_write_json(tmp / "summary.json", result.summary)
    if out.exists():
        try:
            check_out_dir(out, overwrite)
        except EvrouteError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EvrouteError(f"{exc} (it changed while the run was going)") from None
        trash = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, out)
    if result.log_dir is not None and result.log_dir.resolve() == tmp.resolve():
        result.log_dir = out
    return out


def _parquet_to_csv(src: Path, dest: Path, batch_rows: int = 100_000) -> None:
    """A CSV copy of a Parquet table, batch by batch (route paths as space-separated ids)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(src) as pf:
        header = True
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            for batch in pf.iter_batches(batch_size=batch_rows):
                df = batch.to_pandas()
                if "path" in df:
                    df = df.assign(path=df.path.map(lambda p: " ".join(map(str, p))))
                df.to_csv(fh, index=False, header=header)
                header = False


def limit_blas(threads: int | None):
    """A context limiting the BLAS libraries to ``threads`` threads (None or 0: no limit).

    Runs use one thread by default: the posterior's floating-point results then do not
    depend on the machine's core count (OpenBLAS splits its work by thread count, which
    changes the last bits), and at these sizes a second thread was slower, not faster, on
    2-vCPU machines (see README, Performance).
    """
    import contextlib

    if not threads:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(threads), user_api="blas")


def simulate(cfg: SimulationConfig, out: str | os.PathLike | None = None, overwrite: bool = False,
             csv: bool = False, show_progress: bool | None = None, net=None,
             blas_threads: int | None = 1) -> RunResult:
    """Validate, prepare, run and (when ``out`` is given) write one run.

    Parameters
    ----------
    cfg : SimulationConfig
    out : path-like, optional
        Run directory to write; must not exist or be empty unless ``overwrite``.
    show_progress : bool, optional
        Progress bar on stderr (default: when stderr is a terminal).
    blas_threads : int, optional
        BLAS threads during the run (default 1, as ``evroute compare`` uses, so that the
        numbers do not depend on the machine's core count; None or 0: the libraries'
        default).
    """
    cfg.validate()
    if blas_threads is not None and (not isinstance(blas_threads, int) or blas_threads < 0):
        raise EvrouteError(f"blas_threads must be an integer >= 0, got {blas_threads!r}")
    out_path = Path(out) if out is not None else None
    tmp = prepare_out_dir(out_path, overwrite) if out_path is not None else None
    reached = [0]

    def note(t: int) -> None:
        reached[0] = t

    try:
        with limit_blas(blas_threads):
            problem = prepare_problem(cfg, net=net)
            if show_progress is None:
                show_progress = sys.stderr.isatty()
            if show_progress:
                from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

                with Progress(TextColumn(f"{cfg.policy} {problem.route.name} seed {cfg.seed}"), BarColumn(),
                              TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(),
                              transient=True) as bar:
                    task = bar.add_task("rounds", total=cfg.horizon)

                    def update(t: int) -> None:
                        reached[0] = t
                        bar.update(task, completed=t)

                    result = run_bandit(cfg, problem, progress=update, log_dir=tmp)
            else:
                result = run_bandit(cfg, problem, progress=note, log_dir=tmp)
        if out_path is not None:
            write_run(result, cfg, problem, out_path, overwrite=overwrite, csv=csv, tmp=tmp)
            tmp = None
        return result
    except KeyboardInterrupt:
        where = f"after {reached[0]} of {cfg.horizon} rounds" if reached[0] else "before the first round"
        kept = f"nothing was written to {out_path}" if out_path is not None else "nothing was kept"
        raise Interrupted(f"the run stopped {where}; {kept}; rerun the same command to run it again") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
