"""A third-party package's components, as a plug-in writes them (tests/test_plugins.py installs
it as the package ``evroute_flat`` and declares them in the ``evroute.components`` group): a truth
and an agent, one module, one registration each."""

import numpy as np

from evroute import Agent, Decision, Option, Truth, declared, register_agent, register_truth
from evroute.validate import nonneg_float


@declared(Option("shift", nonneg_float, 0.0, "added to every edge", metavar="WH"))
def _flat(setup, shift=0.0):
    """E_det plus a constant on every edge, Gaussian noise."""
    return Truth(setup.mean + shift, setup.noise_std, description={"flat_shift": shift})


class PriorRoute(Agent):
    """Always the route that is cheapest under the prior mean (it never learns)."""

    def __init__(self, setup):
        self.setup = setup
        self.mean = np.asarray(setup.prior.mean, dtype=np.float64)
        self.sd = np.sqrt(np.asarray(setup.prior.diag(), dtype=np.float64))
        self.seen = np.zeros(self.mean.size, dtype=bool)

    def select(self, t, available, rng):
        w = np.maximum(self.mean, 0.0) + 1e-9
        path = np.asarray(self.setup.oracle.shortest_path(w, self.setup.start, self.setup.end,
                                                          available=available).edges, dtype=np.int64)
        m = self.mean[path]
        return Decision(path, float("nan"), m.copy(), m.copy(), self.sd[path].copy(), m.copy())

    def observe(self, path, values):
        self.seen[np.asarray(path, dtype=np.int64)] = True

    def mean_std(self):
        return self.mean, self.sd

    @property
    def n_distinct(self):
        return int(self.seen.sum())


register_truth("flat", _flat, description="E_det plus a constant (a plug-in)")
register_agent("prior-route", lambda setup: PriorRoute(setup), description="the prior mean's route (a plug-in)",
               model="none")
