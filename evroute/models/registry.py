"""The registry of posterior backends: explicit registration, declared options, specs.

A backend is registered once, under a name, with a factory that declares the options it
accepts (:func:`evroute.specs.declared`)::

    @declared(Option("merge", ..., "auto", "..."), ...)
    def make_exact(prior, *, noise_var, seed=0, merge="auto", ...): ...

    register_model("exact", make_exact, description="exact GP posterior (003 Eq. 2-3)")

The factory is called as ``factory(prior, noise_var=..., seed=..., **options)`` with every
declared option present (the user's value converted by the option's ``convert``, else its
default). On the command line a backend is a spec, ``--model svgp[inducing=500]``, parsed
by :func:`evroute.specs.parse_spec` like the policy specs of ``evroute compare``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..components import MODELS
from ..errors import EvrouteError
from ..specs import Component, Entry, Option
from ..validate import positive_float
from .base import CAPABILITIES, PosteriorModel
from .hetero import HeteroscedasticModel, WhitenedPrior, reference_noise_var

__all__ = ["Option", "Backend", "register_model", "unregister_model", "available_models", "get_backend",
           "parse_model_spec", "make_model", "resolve_model", "require_capability", "MODELS"]


#: A registered backend (:class:`evroute.specs.Entry`): name, factory, options, description.
Backend = Entry

_BACKENDS = MODELS


def register_model(name: str, factory: Callable[..., PosteriorModel], *, options: tuple[Option, ...] | None = None,
                   description: str = "", overwrite: bool = False, capabilities=(), requires: tuple = ()) -> Backend:
    """Register a posterior backend under ``name``.

    Parameters
    ----------
    name : str
        Backend name as used by ``--model`` (letters, digits, ``-``, ``_``, ``.``; stored lower case).
    factory : callable
        ``factory(prior, *, noise_var, seed, **options)`` returning a :class:`PosteriorModel`.
    options : tuple of Option, optional
        The options it accepts (every other option is an error); by default those the factory
        declares (:func:`evroute.specs.declared`), the way to declare them.
    description : str
        One line for help texts.
    overwrite : bool
        Replace an existing registration; without it a second registration of a name is an
        error.
    capabilities : iterable of str
        What the backend can offer (:data:`evroute.models.base.CAPABILITIES`), on some prior: the
        models it makes declare what they offer on theirs (:attr:`PosteriorModel.capabilities`).
    requires : tuple, optional
        ``(modules, install)``: modules the backend imports that an extra installs, and the
        command that installs them; asking for the backend without them is one line naming it.

    Returns
    -------
    evroute.specs.Entry
        The registration.
    """
    unknown = sorted(set(capabilities) - set(CAPABILITIES))
    if unknown:
        raise EvrouteError(f"model {name!r}: unknown capabilities {', '.join(unknown)}; known: {', '.join(CAPABILITIES)}")
    return _BACKENDS.register(name, factory, options, description, overwrite, capabilities, requires)


def unregister_model(name: str) -> None:
    """Remove a registration (tests, plug-ins that replace a backend)."""
    _BACKENDS.unregister(name)


def available_models() -> list[str]:
    """Names of the registered backends, sorted.

    Returns
    -------
    list of str
        The registered backends' names, sorted.
    """
    return _BACKENDS.names()


def get_backend(name: str) -> Backend:
    """The registered backend ``name`` (one-line error listing the names otherwise)."""
    return _BACKENDS.get(name)


def resolve_model(spec) -> Component:
    """The resolved backend :class:`~evroute.specs.Component` of a spec (``svgp[inducing=500]``)."""
    return _BACKENDS.resolve(spec)


def require_capability(model: PosteriorModel, capability: str, purpose: str) -> None:
    """One line when ``model`` does not offer ``capability`` (needed for ``purpose``), naming the
    backends that declare it."""
    if not model.offers(capability):
        having = _BACKENDS.with_capability(capability)
        raise EvrouteError(f"{purpose} needs {capability.replace('_', ' ')}, which model {type(model).__name__} "
                           f"does not offer here; backends that can: {', '.join(having) or 'none'}")


def parse_model_spec(text: str) -> tuple[str, dict]:
    """``"svgp[inducing=500]"`` → ``("svgp", {"inducing": 500})``: the backend's name and the
    given options, checked and converted by the backend's declared options."""
    return _BACKENDS.parse(text, "svgp[inducing=500]")


def make_model(spec: str, prior, *, noise_var, seed: int = 0, **options: Any) -> PosteriorModel:
    """Create a posterior backend from its name or spec.

    Parameters
    ----------
    spec : str or Component
        ``"exact"``, ``"bi"``, ``"svgp"``, ... or a spec with options, ``"svgp[inducing=500]"``,
        or a resolved component (:func:`resolve_model`).
    prior : evroute.priors.prior.Prior
        The prior over the edges (mean and covariance operator).
    noise_var : float or array_like (E,)
        Observation noise variance ς², or one per edge ς_e² (heteroscedastic noise: the backend
        conditions the whitened f / s, :mod:`evroute.models.hetero`, and the result is a
        :class:`~evroute.models.hetero.HeteroscedasticModel`; every backend that reads its prior
        through the :class:`~evroute.priors.prior.Prior` interface takes it).
    seed : int
        Seeds the backend's own randomness (minibatches, dictionaries), if it has any.
    **options
        Backend options; given both here and in ``spec`` is an error.

    Returns
    -------
    PosteriorModel
        A fresh posterior over the edges, at the prior.
    """
    comp = _BACKENDS.resolve(spec, **options)
    get_backend(comp.name).check_installed()
    if np.ndim(noise_var) == 0:
        noise_var = positive_float("noise_var", noise_var)
        return get_backend(comp.name).factory(prior, noise_var=noise_var, seed=int(seed), **comp.options)
    per_edge = np.asarray(noise_var, dtype=np.float64)
    if per_edge.shape != (prior.n_edges,) or not np.all(np.isfinite(per_edge)) or np.any(per_edge <= 0):
        raise EvrouteError(f"per-edge noise variances must be {prior.n_edges} positive finite numbers")
    ref = reference_noise_var(per_edge)
    scale = np.sqrt(per_edge / ref)
    inner = get_backend(comp.name).factory(WhitenedPrior(prior, scale), noise_var=ref, seed=int(seed),
                                           **comp.options)
    return HeteroscedasticModel(inner, scale)
