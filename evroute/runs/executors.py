"""Running the cells of a grid: one cell in a worker (with in-process caches) and the
executors that spread cells over processes (``local``) or a Ray cluster (``ray``).

A run does not depend on the executor: seeds fix the truth, the noise and the policy's
randomness, and BLAS runs single-threaded in every run (pool, Ray or in-process), so
floating-point reductions are the same everywhere. Inside a worker, the loaded network,
the prepared problem (route, prior mean, truth) and the agent's prior (with its dense
covariance) are cached in memory, so a process running many cells builds them once.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import EvrouteError
from ..io import usable_cpus
from ..pool import process_map
from ..roads.network import load_network
from .config import SimulationConfig
from .directory import prepare_out_dir, write_run
from .problem import agent_prior, make_agent, prepare_problem
from .simulation import limit_blas, run_bandit, run_config

__all__ = ["EXECUTORS", "RAY_HINT", "run_cell", "execute_task", "default_jobs", "clear_worker_caches",
           "cached_network", "cached_problem", "cached_prior", "check_executor", "executor_stream"]

EXECUTORS = ("local", "ray")
RAY_HINT = 'pip install "evroute[ray]"'


_NETS: OrderedDict = OrderedDict()
_PROBLEMS: OrderedDict = OrderedDict()
_PRIORS: OrderedDict = OrderedDict()
_CACHE_SIZES = {"nets": 4, "problems": 64, "priors": 2}


def _lru_get(cache: OrderedDict, key, build: Callable, size: int):
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = build()
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def clear_worker_caches() -> None:
    """Forget the in-process networks, problems and priors."""
    _NETS.clear()
    _PROBLEMS.clear()
    _PRIORS.clear()


def cached_network(name: str, osm: str | None = None, dem: str | None = None):
    """The prepared network, loaded once per process."""
    return _lru_get(_NETS, (name, osm, dem), lambda: load_network(name, osm=osm, dem=dem), _CACHE_SIZES["nets"])


def cached_problem(cfg: SimulationConfig):
    """The prepared problem of a run (network, route, prior, truth), once per process.

    Kept by what :func:`evroute.runs.problem.prepare_problem` reads: the scenario and the seed (the
    key is the world itself, not a list of its settings kept here).
    """
    world, seed = cfg.scenario, cfg.seed

    def build():
        return prepare_problem(world, seed, load=cached_network)

    return _lru_get(_PROBLEMS, (world, seed), build, _CACHE_SIZES["problems"])


def cached_prior(cfg: SimulationConfig, problem):
    """The agent's prior of a run (:func:`evroute.runs.problem.agent_prior`), once per process:
    its dense covariance is built on first use and kept with it."""
    spec = cfg.agent.prior  # what agent_prior reads besides the problem
    key = (problem.net.cache_key, spec, float(problem.prior_var), problem.prior_mean.tobytes(),
           None if problem.fleet is None else problem.fleet.digest)  # (the fleet's variances, k, scale)
    return _lru_get(_PRIORS, key, lambda: agent_prior(spec, problem), _CACHE_SIZES["priors"])


def run_cell(cfg: SimulationConfig, out: str | os.PathLike) -> dict:
    """Run one cell and write its run directory ``out`` (replacing an unfinished one).

    Same tables as ``simulate(cfg, out)``; the directory appears (renamed from a
    temporary sibling) only when complete. Returns the run's summary.
    """
    out = Path(out)
    tmp = prepare_out_dir(out, overwrite=True)
    try:
        problem = cached_problem(cfg)
        agent = make_agent(cfg, problem, prior=None if cfg.backend == "bi" else cached_prior(cfg, problem))
        result = run_bandit(cfg, problem, agent=agent, log_dir=tmp)
        write_run(result, run_config(cfg, problem), out, overwrite=True, tmp=tmp)
        tmp = None
        return result.summary
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def execute_task(task: dict) -> dict:
    """Run one task (picklable in, picklable out; errors are returned, not raised).

    ``task``: ``{"kind": "run" | "warm", "name", "config": dict, "out": str, "blas_threads"}``, the
    configuration in :meth:`SimulationConfig.to_json`'s form (as ``config.json``).
    """
    tic = time.perf_counter()
    try:
        cfg = SimulationConfig.from_json(task["config"])
        with limit_blas(task.get("blas_threads")):
            if task.get("kind") == "warm":
                cached_problem(cfg)
                return {"name": task["name"], "ok": True, "seconds": time.perf_counter() - tic}
            summary = run_cell(cfg, task["out"])
        return {"name": task["name"], "ok": True, "seconds": time.perf_counter() - tic,
                "final_cumulative_regret_wh": summary["final_cumulative_regret_wh"],
                "mean_seconds_per_round": summary["mean_seconds_per_round"]}
    except EvrouteError as exc:
        return {"name": task["name"], "ok": False, "error": str(exc), "traceback": None}
    except Exception as exc:  # reported by the driver with the run's name
        return {"name": task["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()}


# --------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------


def default_jobs() -> int:
    """CPUs this process may use (:func:`evroute.io.usable_cpus`), at least one."""
    return max(1, usable_cpus())


def _quiet_worker(blas_threads: int | None) -> None:
    """A compare worker's start (:func:`evroute.pool.process_map` has left Ctrl-C to the driver):
    warnings silenced, BLAS limited to ``blas_threads`` for the worker's life."""
    warnings.simplefilter("ignore")  # the driver has said it once (e.g. a flat network)
    limit_blas(blas_threads)  # not as a context: the limit stays for the worker's life


def _local_failed(task: dict, exc: BaseException) -> dict:
    """A task whose worker process failed, as a result."""
    from concurrent.futures.process import BrokenProcessPool

    if isinstance(exc, BrokenProcessPool):
        return {"name": task["name"], "ok": False, "error": "a worker process died (out of memory?)"}
    return {"name": task["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}  # pickling and the like


def _local_executor(tasks: list[dict], jobs: int) -> Iterator[tuple[dict, dict]]:
    """Yield (task, result) as tasks finish, on the package's process pool
    (:func:`evroute.pool.process_map`; in-process with one job)."""
    return process_map(execute_task, tasks, jobs=jobs, ordered=False, initializer=_quiet_worker, initargs=(1,),
                       on_error=_local_failed)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise EvrouteError(f"the ray executor needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def _ray_map(fn: Callable, items: list, *, jobs: int | None, address: str | None,
             on_error: Callable) -> Iterator[tuple]:
    """``(item, fn(item))`` as Ray tasks finish (a local instance, or the cluster at ``address``):
    :func:`evroute.pool.process_map`'s interface, unordered, on Ray; ``on_error(item, exception)``
    is what a failed task yields."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=jobs or default_jobs(), include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)
        except Exception as exc:
            raise EvrouteError(f"cannot start or reach Ray{' at ' + address if address else ''}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        started = True
    pending: list = []
    finished = False
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(fn)
        refs = {remote.remote(item): item for item in items}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                item = refs[ref]
                try:
                    res = ray.get(ref)
                except Exception as exc:
                    res = on_error(item, exc)
                yield item, res
        finished = True
    finally:
        if not finished:  # interrupted: cancel what is still queued or running
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # pragma: no cover - already finished or gone
                    pass
        if started:
            ray.shutdown()


def _ray_failed(task: dict, exc: BaseException) -> dict:
    """A Ray task that failed, as a result."""
    msg = str(exc).strip().splitlines()
    return {"name": task["name"], "ok": False, "error": f"ray task failed: {msg[-1] if msg else exc!r}"}


def check_executor(executor: str) -> None:
    """A one-line error for an unknown executor, or for ``ray`` when Ray is not installed."""
    if executor not in EXECUTORS:
        raise EvrouteError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    if executor == "ray":
        _import_ray()


def executor_stream(executor: str, tasks: list[dict], jobs: int | None,
                    *,
                    ray_address: str | None = None) -> Iterator[tuple[dict, dict]]:
    """(task, result) pairs as the tasks finish, on the named executor."""
    check_executor(executor)
    if executor == "ray":
        return _ray_map(execute_task, tasks, jobs=jobs, address=ray_address, on_error=_ray_failed)
    return _local_executor(tasks, jobs)
