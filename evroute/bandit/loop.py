"""The bandit loop (paper 003, Algorithm 1): each round the agent picks a route, the
environment reveals the energies of its edges, the agent learns; regret against the
environment's clairvoyant route is logged round by round.

The loop talks only to an :class:`evroute.bandit.environments.Environment` and an
:class:`evroute.bandit.agents.Agent`. Logs are kept in chunks (:class:`RoundLog`): a run written
to a directory appends them to its Parquet tables as it goes, so memory stays flat.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import EvrouteError
from ..io import available_memory
from ..settings import LOG_BYTES_PER_EDGE, LOG_BYTES_PER_ROUND, MAX_HORIZON

__all__ = ["run_loop", "LoopResult", "RoundLog", "ROUND_COLUMNS", "OBSERVATION_COLUMNS", "LOG_CHUNK_ROUNDS",
           "log_size_bytes", "check_log_room", "MAX_HORIZON", "LOG_BYTES_PER_ROUND", "LOG_BYTES_PER_EDGE"]



#: Rounds whose log rows are held in memory before they are appended to the run
#: directory's Parquet tables (one row group per chunk): a long run's memory stays flat.
LOG_CHUNK_ROUNDS = 10_000

ROUND_COLUMNS = ("t", "path", "n_edges", "expected_energy_wh", "observed_energy_wh", "optimal_energy_wh",
                 "regret_wh", "cumulative_regret_wh", "beta", "seconds")
#: ``index_before``: the agent's index μ̃ of the edge when it chose the route (before
#: rectification): a lower confidence bound or a posterior draw.
OBSERVATION_COLUMNS = ("t", "edge", "observed_wh", "expected_wh", "prior_mean_wh", "post_mean_before",
                       "post_std_before", "index_before")


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
        for k, v in round_row.items():  # the round columns, then any the agent adds
            self._rows.setdefault(k, []).append(v)
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



def log_size_bytes(horizon: int, route_edges: int) -> int:
    """Rough size of a run's logs: :data:`LOG_BYTES_PER_ROUND` per round plus
    :data:`LOG_BYTES_PER_EDGE` per edge driven (routes taken as ``route_edges`` long)."""
    return int(horizon) * (LOG_BYTES_PER_ROUND + LOG_BYTES_PER_EDGE * max(int(route_edges), 1))


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_log_room(horizon: int, route_edges: int, directory: Path | None) -> None:
    """Refuse a horizon whose logs cannot be held: in memory when nothing is written
    (half the memory available), on disk when they go to ``directory`` (its free space)."""
    need = log_size_bytes(horizon, route_edges)
    if directory is None:
        avail = available_memory()
        if avail is None:  # pragma: no cover - not POSIX
            return
        if need > avail / 2:
            raise EvrouteError(
                f"the logs of {horizon:,} rounds (routes of ~{route_edges} edges) would need about "
                f"{_gb(need)} of memory and {_gb(avail)} is available: write the run to a directory "
                f"(it is then logged in chunks of {LOG_CHUNK_ROUNDS:,} rounds) or shorten the horizon")
    else:
        free = shutil.disk_usage(directory).free
        if need > free:
            raise EvrouteError(
                f"the logs of {horizon:,} rounds (routes of ~{route_edges} edges) would need about "
                f"{_gb(need)} and {directory} has {_gb(free)} free: shorten the horizon or write elsewhere")




@dataclass
class LoopResult:
    """What the loop returns: the logs (None where written to ``log_dir``) and the end state."""

    rounds: pd.DataFrame | None
    observations: pd.DataFrame | None
    seconds: np.ndarray
    visits: np.ndarray
    cumulative_regret: float
    last_regret: float
    #: the energy the agent drove over every round (Σ_t f_t(route_t), Wh), and the same for
    #: each baseline route of ``run_loop(baselines=...)`` (the fastest, the shortest route)
    total_energy: float = 0.0
    baseline_energy: dict = field(default_factory=dict)
    #: with ``run_loop(exact_energy=...)``: the regret against the exact least-energy route
    #: summed over the rounds, and the first round whose route came within 1 % of it (None: none)
    cumulative_exact_regret: float | None = None
    first_within_1pct: int | None = None
    #: the round from which every route stayed within 1 % of the reference (the exact optimum of a
    #: truth that conserves energy); None where the last route was not
    within_1pct_from: int | None = None


def run_loop(env, agent, horizon: int, *, seed: int, progress=None,
             log_dir: str | os.PathLike | None = None, baselines: dict | None = None,
             exact_energy: float | None = None) -> LoopResult:
    """Algorithm 1 for ``horizon`` rounds.

    Parameters
    ----------
    env : evroute.bandit.environments.Environment
    agent : evroute.bandit.agents.Agent
    horizon : int
    seed : int
        Seeds the agent's random choices (stream ``[seed, 3]``); the environment has its own.
    progress : callable, optional
        Called with t after every round.
    log_dir : path-like, optional
        Append ``rounds.parquet`` and ``observations.parquet`` there in chunks of
        :data:`LOG_CHUNK_ROUNDS` rounds as the run goes; otherwise they are kept in memory.
    baselines : dict, optional
        Routes a driver would take without learning, by name: ``route(available) -> edges``
        (the fastest route on the open edges, ...). Each round their energy under f_t is logged
        as ``<name>_energy_wh``, so that a run says how much energy the agent saved against
        always driving them.
    exact_energy : float, optional
        The energy of the exact least-energy route under a static truth that creates energy (the
        paper's: its MILP): each round's regret against it is logged as ``exact_regret_wh``
        (beside ``regret_wh``, against the clairvoyant route of the agents' own weight rule). A
        truth that conserves energy needs none: its environment's reference is the exact optimum,
        and regret against it is never negative.

    Returns
    -------
    LoopResult
        The per-round and per-observation tables, the visits, the cumulative regret and the energy driven.
    """
    rng_policy = np.random.default_rng([seed, 3])
    log_dir = Path(log_dir) if log_dir is not None else None
    check_log_room(horizon, len(env.reference_route(1)), log_dir)

    log = RoundLog(log_dir)
    seconds_all = np.empty(horizon)
    visits = np.zeros(env.n_edges, dtype=np.int64)
    cumulative = 0.0
    regret = 0.0
    total = 0.0
    baselines = dict(baselines or {})
    baseline_total = dict.fromkeys(baselines, 0.0)
    exact_total, within = (0.0 if exact_energy is not None else None), None
    last_off = 0  # the last round whose route was more than 1 % off the reference
    try:
        for t in range(1, horizon + 1):
            tic = time.perf_counter()
            try:
                available = env.available(t)
                decision = agent.select(t, available, rng_policy)
            except EvrouteError as exc:
                raise EvrouteError(f"round {t}: {exc}") from None
            path = decision.path
            observed = env.observe(t, path)
            agent.observe(path, observed)
            if getattr(agent, "learns_turns", False):  # the junctions it drove, for an agent that learns them
                agent.observe_turns(path, env.observe_turns(t, path))
            seconds = time.perf_counter() - tic
            f = env.expected(t)
            optimal = env.optimal_energy(t)
            expected = env.route_energy(t, path)  # f_t over the route's edges (and its turns')
            regret = expected - optimal
            if getattr(env, "exact", False) and regret < 0:  # the exact optimum: only rounding can go below it
                if regret < -1e-9 * (1.0 + abs(optimal)):
                    raise EvrouteError(f"round {t}: a route of {expected:.6f} Wh beat the exact optimum of "
                                       f"{optimal:.6f} Wh (the truth creates energy)")
                regret = 0.0
            if regret > 0.01 * abs(optimal):
                last_off = t
            cumulative += regret
            seconds_all[t - 1] = seconds
            np.add.at(visits, path, 1)
            total += expected
            driven = {}
            if exact_energy is not None:
                driven["exact_regret_wh"] = expected - exact_energy
                exact_total += expected - exact_energy
                if within is None and expected - exact_energy <= 0.01 * abs(exact_energy):
                    within = t
            for name, route in baselines.items():  # after the timing: not the agent's cost
                driven[f"{name}_energy_wh"] = e = env.route_energy(t, route(available))
                baseline_total[name] += e
            log.add({"t": t, "path": path.tolist(), "n_edges": len(path), "expected_energy_wh": expected,
                     "observed_energy_wh": float(observed.sum()), "optimal_energy_wh": optimal,
                     "regret_wh": regret, "cumulative_regret_wh": cumulative, "beta": float(decision.beta),
                     "seconds": seconds, **driven, **agent.diagnostics()},
                    {"t": np.full(len(path), t, dtype=np.int64), "edge": path, "observed_wh": observed,
                     "expected_wh": f[path], "prior_mean_wh": decision.prior_mean,
                     "post_mean_before": decision.mean, "post_std_before": decision.std,
                     "index_before": decision.index})
            if progress is not None:
                progress(t)
        rounds, observations = log.close()
    except BaseException:
        log.abort()
        raise
    return LoopResult(rounds, observations, seconds_all, visits, float(cumulative), float(regret), float(total),
                      baseline_total, exact_total, within, last_off + 1 if last_off < horizon else None)
