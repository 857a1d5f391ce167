"""One simulation run (paper 003, Algorithm 1): set up, run, summarise, write.

Per seed, the true expected energy f is one sample of GP(E_det, k) over all edges (paper
003 Sec. 4.1), with σ₀² = 0.25² σ²_det and ς² = 0.1² σ²_det. Each round the policy turns
the posterior into rectified edge weights (Algorithm 2), the oracle (Dijkstra) picks a route,
every edge on it is observed as r = f(e) + ε, and the posterior is updated.

Regret. A GP sample is physically loose: it usually has cycles of negative total energy,
so "the best route" is defined with care:

- ``optimal_energy_wh``: the clairvoyant route's true energy, i.e. the route the policy's own
  oracle returns when handed the true f (Dijkstra on E[max(0, N(f_e, ς²))]);
  ``regret_wh = expected_energy_wh − optimal_energy_wh`` is the *learning* regret. It can be
  negative in a single round (a route that is worse under rectified weights may be better
  under f).
- ``exact_optimal_energy_wh`` (``exact_optimum=True``): the best vertex-simple route under f
  (:mod:`evroute.roads.optimum`), a diagnostic: its gap to the clairvoyant route is the price of
  rectification. Vertex-simple is taken strictly (no intersection twice) when such a route
  exists, else with open ends (the route may pass its start edge's tail or end edge's head
  once more; needed on monaco:B, where turn restrictions leave no strict route);
  ``summary["exact_optimum"]["ends"]`` says which.

This module runs one configured simulation: :func:`simulate` validates the configuration,
prepares the problem (:mod:`evroute.runs.problem`), builds the environment and the agent, runs
the loop (:mod:`evroute.bandit.loop`), summarises it (:func:`run_bandit`) and writes the run
directory (:mod:`evroute.runs.directory`). Environments with availability changing per round
(volatile arms) plug in through :meth:`evroute.bandit.environments.Environment.available`; the
oracle leaves the unavailable edges out of its search, and a round with no available
route is a one-line error.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__
from ..bandit.loop import run_loop
from ..errors import Interrupted
from ..priors.prior import NOISE_SCALE, PRIOR_SCALE
from ..validate import nonneg_int
from .config import SimulationConfig
from .directory import RunResult, check_out_dir, prepare_out_dir, write_run
from .problem import (
    Problem,
    agent_prior,
    describe_world,
    exact_optimum_cached,
    make_agent,
    make_environment,
    prepare_problem,
    world_candidates,
)

__all__ = ["simulate", "run_bandit", "run_config", "limit_blas", "baseline_routes", "energy_saved"]

def run_config(cfg: SimulationConfig, problem: Problem) -> dict:
    """The run's ``config.json``: the configuration (:meth:`SimulationConfig.to_json`, with its
    format version) and what it resolved to."""
    return {"evroute_version": __version__, **cfg.to_json(),
            "resolved": {"network_cache_key": problem.net.cache_key, "route": problem.route.to_dict(),
                         "vehicle": problem.vehicle.to_dict(), "backend": cfg.backend,
                         "prior_scale": PRIOR_SCALE, "noise_scale": NOISE_SCALE,
                         "network_source": problem.net.meta.get("source"),
                         "candidates": world_candidates(cfg),
                         # the prior file as read: its bytes' digest and what it was made from
                         "prior": None if problem.fleet is None else {
                             "sha256": problem.fleet.digest, "residual_sd": problem.fleet.residual_sd,
                             "vehicle_scale": problem.fleet.vehicle_scale,
                             **{k: problem.fleet.data[k] for k in ("fleet_vehicle", "drives", "rho")}}}}

def baseline_routes(problem: Problem) -> dict:
    """The routes a driver takes without learning: the fastest (least length / speed limit) and
    the shortest, on the open edges of each round (Dijkstra; the same route every round when no
    road closes)."""
    e = problem.net.edges
    length = e.length_m.to_numpy()
    weights = {"fastest": length / e.speed_mps.to_numpy(), "shortest": length}
    start, end, oracle = problem.route.start, problem.route.end, problem.oracle

    def router(w):
        static = {}

        def route(available):
            if available is None:
                if "path" not in static:
                    static["path"] = np.asarray(oracle.shortest_path(w, start, end).edges, dtype=np.int64)
                return static["path"]
            return np.asarray(oracle.shortest_path(w, start, end, available=available).edges, dtype=np.int64)
        return route

    return {name: router(w) for name, w in weights.items()}


def _e_det(problem: Problem) -> np.ndarray:
    """E_det of the agents' vehicle (the prior mean unless a fleet's drives gave it)."""
    return problem.prior_mean if problem.e_det is None else problem.e_det


def trip_description(problem: Problem) -> dict:
    """What the trip is, physically: the climb between its ends (m) and the physics prior's energy
    (E_det) of its fastest route, beside which the truth's energies can be judged."""
    net, route = problem.net, problem.route
    h = net.nodes.elevation_m
    climb = float(h.loc[net.edges.v.iat[route.end]] - h.loc[net.edges.u.iat[route.start]])
    fastest = baseline_routes(problem)["fastest"](None)
    return {"trip_climb_m": climb, "fastest_energy_det_wh": float(np.asarray(_e_det(problem))[fastest].sum())}


def energy_saved(res) -> dict:
    """The energy the agent drove over the run against always driving each baseline route (Wh,
    and % of the baseline's energy where that is positive): what an EV driver cares about."""
    out = {"total_energy_wh": res.total_energy}
    for name, base in res.baseline_energy.items():
        saved = base - res.total_energy
        out[f"{name}_total_energy_wh"] = base
        out[f"saved_vs_{name}_wh"] = saved
        out[f"saved_vs_{name}_pct"] = 100.0 * saved / base if base > 0 else None
    return out


def run_bandit(cfg: SimulationConfig, problem: Problem, progress=None, *, agent=None, env=None,
               log_dir: str | os.PathLike | None = None) -> RunResult:
    """Algorithm 1 for ``cfg.horizon`` rounds; returns the tables and the summary.

    Parameters
    ----------
    agent : evroute.bandit.agents.Agent, optional
        Use this agent instead of the one ``cfg`` names (library use, tests).
    env : evroute.bandit.environments.Environment, optional
        Use this environment instead of the problem's static truth.
    log_dir : path-like, optional
        Append ``rounds.parquet`` and ``observations.parquet`` there in chunks as the run
        goes (memory stays flat); otherwise they are kept in memory.
    """
    agent = agent if agent is not None else make_agent(cfg, problem)
    env = env if env is not None else make_environment(cfg, problem)
    opt = None
    if cfg.exact_optimum and not env.exact:  # the paper's truth: its MILP, once per truth (cached), before the rounds
        opt = exact_optimum_cached(problem, cfg.exact_optimum_time_limit)
    world = describe_world(cfg)
    static = world["static"]
    res = run_loop(env, agent, cfg.horizon, seed=cfg.seed, progress=progress, log_dir=log_dir,
                   baselines=baseline_routes(problem),
                   exact_energy=opt["energy"] if opt is not None and opt["energy"] is not None and static else None)
    clairvoyant = env.reference_route(cfg.horizon)
    optimal = env.optimal_energy(cfg.horizon)
    f = env.expected(cfg.horizon)
    mu, sd = agent.mean_std()
    e = problem.net.edges
    edges = pd.DataFrame({
        "edge": np.arange(problem.net.n_edges, dtype=np.int64), "u": e.u.to_numpy(), "v": e.v.to_numpy(),
        "osm_way": e.osm_way.to_numpy(), "length_m": e.length_m.to_numpy(),
        "speed_mps": e.speed_mps.to_numpy(), "grade": e.grade.to_numpy(),
        "energy_det_wh": _e_det(problem), "energy_true_wh": f,
        "visits": res.visits,
        "post_mean_final": np.asarray(mu, dtype=float), "post_std_final": np.asarray(sd, dtype=float)})
    summary = {
        "final_cumulative_regret_wh": res.cumulative_regret,
        "mean_seconds_per_round": float(res.seconds.mean()),
        "median_seconds_per_round": float(np.median(res.seconds)),
        "horizon": cfg.horizon, "policy": cfg.policy.name, "weights": cfg.weights, "model": cfg.backend, "network": problem.net.name,
        "route": problem.route.name, "start_edge": problem.route.start, "end_edge": problem.route.end,
        "seed": cfg.seed, "lengthscale": cfg.lengthscale, "truth_lengthscale": world["truth_lengthscale"],
        "truth": world["truth"], "truth_rkhs_norm": None if math.isnan(problem.truth_rkhs_norm) else problem.truth_rkhs_norm,
        "kernel": cfg.kernel,
        "noise_std_wh": problem.noise_std, "prior_std_wh": math.sqrt(problem.prior_var),
        **({} if problem.edge_noise_std is None else {"noise_model": world["noise_model"]}),
        "sigma_det_wh": problem.sigma_det,
        "optimal_energy_wh": optimal, "optimal_path": [int(x) for x in clairvoyant],
        "regret_reference": "exact optimum" if env.exact else "paper's rectified route",
        "exact_optimal_energy_wh": None, "exact_optimum": None, "rectification_gap_wh": None,
        "within_1pct_from_round": res.within_1pct_from,
        "distinct_edges_observed": int(agent.n_distinct),
        "last_route_regret_wh": res.last_regret,
        "truth_prior": world["truth_prior"],
        **energy_saved(res), **trip_description(problem),
    }
    if problem.ground_truth is not None:  # what the truth says of itself (a simulated truth: its source)
        summary.update({k: v for k, v in problem.ground_truth.description.items() if k != "truth"})
    summary.update(agent.summary())
    if env.exact:  # the reference is the exact optimum, certified
        summary["exact_optimal_energy_wh"] = optimal
        summary["exact_optimum"] = {"energy": optimal, "path": [int(x) for x in clairvoyant],
                                    "method": "dijkstra on reduced costs", "status": "optimal",
                                    "certificate": env.certificate()}
        summary["final_exact_regret_wh"] = res.cumulative_regret
    if problem.agent_turns is not None:  # what the agents knew of the junctions
        summary["prior_turns"] = problem.agent_turns.source
    if opt is not None:
        summary["exact_optimal_energy_wh"] = opt["energy"]
        summary["exact_optimum"] = opt
        if opt["energy"] is not None:
            summary["rectification_gap_wh"] = optimal - opt["energy"]
        summary["final_exact_regret_wh"] = res.cumulative_exact_regret
        summary["first_round_within_1pct"] = res.first_within_1pct
    if problem.fleet is not None and problem.fleet.vehicle_scale > 0:  # what it learnt of the vehicle's scale a
        summary["vehicle_scale_mean"], summary["vehicle_scale_sd"] = _scale_posterior(cfg, problem, res, log_dir)
    tables = {name: pd.DataFrame(cols) for name, cols in agent.tables().items()}
    if env.turns is not None:  # a truth of edges plus turns: the junctions' costs, for maps and readers
        tables["turns"] = pd.DataFrame({"from_edge": np.asarray(env.turns.conn_src, dtype=np.int64),
                                        "to_edge": np.asarray(env.turns.conn_dst, dtype=np.int64),
                                        "cost_wh": np.asarray(env.turns.costs, dtype=np.float64)})
    return RunResult(res.rounds, res.observations, edges, summary, log_dir=Path(log_dir) if log_dir is not None else None,
                     tables=tables)

def _scale_posterior(cfg, problem, res, log_dir) -> tuple[float, float]:
    """E[a | every observation] and its sd under the agents' prior with the vehicle scale
    (:meth:`evroute.priors.prior.VehicleScalePrior.scale_posterior`)."""
    obs = res.observations if res.observations is not None else \
        pd.read_parquet(Path(log_dir) / "observations.parquet", columns=["edge", "observed_wh"])
    n = problem.net.n_edges
    e = obs.edge.to_numpy(np.int64)
    counts = np.bincount(e, minlength=n)
    sums = np.bincount(e, weights=obs.observed_wh.to_numpy(np.float64), minlength=n)
    noise = problem.noise_var if problem.edge_noise_std is None else problem.edge_noise_std ** 2
    return agent_prior(cfg, problem).scale_posterior(counts, sums, noise)


def limit_blas(threads: int | None):
    """A context limiting the BLAS libraries to ``threads`` threads (None or 0: no limit).

    Runs use one thread by default: the posterior's floating-point results then do not
    depend on the machine's core count (OpenBLAS splits its work by thread count, which
    changes the last bits), and at these sizes a second thread was slower, not faster, on
    2-vCPU machines (see docs/performance.md).
    """
    import contextlib

    if not threads:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(threads), user_api="blas")

def simulate(cfg: SimulationConfig, out: str | os.PathLike | None = None, overwrite: bool = False,
             *,
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

    Returns
    -------
    RunResult
        The tables (rounds, observations, edges) and the summary, also written to ``out``.
    """
    if blas_threads is not None:
        nonneg_int("blas_threads", blas_threads)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_out_dir(out_path, overwrite)  # before any work, and without touching the disk
    created = [] if out_path is None else [d for d in out_path.parents if not d.exists()]
    tmp = None
    reached = [0]

    def note(t: int) -> None:
        reached[0] = t

    try:
        with limit_blas(blas_threads):
            problem = prepare_problem(cfg, net=net)
            agent = make_agent(cfg, problem)  # bad options of the agent are found before the disk is touched
            env = make_environment(cfg, problem)
            if out_path is not None:
                tmp = prepare_out_dir(out_path, overwrite)
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

                    result = run_bandit(cfg, problem, progress=update, agent=agent, env=env, log_dir=tmp)
            else:
                result = run_bandit(cfg, problem, progress=note, agent=agent, env=env, log_dir=tmp)
        if out_path is not None:
            write_run(result, run_config(cfg, problem), out_path, overwrite=overwrite, csv=csv, tmp=tmp)
            tmp = created = None
        return result
    except KeyboardInterrupt:
        where = f"after {reached[0]} of {cfg.horizon} rounds" if reached[0] else "before the first round"
        kept = f"nothing was written to {out_path}" if out_path is not None else "nothing was kept"
        raise Interrupted(f"the run stopped {where}; {kept}; rerun the same command to run it again") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for d in created or ():  # folders made for a run that did not finish (deepest first)
            try:
                d.rmdir()
            except OSError:
                break

