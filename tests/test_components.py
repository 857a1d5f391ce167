"""The list of built-in components (evroute.components) against what the modules register."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evroute.components import BUILTIN, REGISTRIES


def test_every_listed_component_is_registered_by_its_module_and_every_builtin_is_listed():
    """In a fresh process: importing every module of the list registers exactly the listed
    names (no built-in left out of the list, none listed that nothing registers)."""
    code = ("import importlib\nfrom evroute.components import BUILTIN, REGISTRIES\n"
            "for family, names in BUILTIN.items():\n"
            "    for module in set(names.values()):\n"
            "        importlib.import_module(module)\n"
            "import evroute.runs.config, evroute.world.sumo_truth\n"
            "print({f: sorted(r._entries) for f, r in REGISTRIES.items()})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    registered = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own printout)
    assert registered == {f: sorted(names) for f, names in BUILTIN.items()}, out.stderr[-2000:]


def test_a_listed_name_imports_its_module_on_first_use():
    code = ("import sys\nfrom evroute.components import TRUTHS\n"
            "assert 'evroute.world.sumo_truth' not in sys.modules\n"
            "assert 'sumo' in TRUTHS.names()\n"
            "entry = TRUTHS.get('sumo')\n"
            "print(entry.name, 'evroute.world.sumo_truth' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["sumo", "True"], out.stderr[-2000:]


def test_help_lists_follow_the_registries():
    assert REGISTRIES["policy"].names()[:3] == ["gp-ucb", "gp-bucb", "gp-ts"]
    assert REGISTRIES["model"].names() == sorted(BUILTIN["model"])


# --------------------------------------------------------------------------------------
# declared once: what a declaration accepts, the constructor builds
# --------------------------------------------------------------------------------------

#: Values each option is tried with: those its declaration accepts must build the component.
_PROBES = (0, 1e-9, 0.5, 1, 2, 10, 1e6, True, False)


def _accepted(option):
    out = []
    for v in _PROBES:
        try:
            option.convert(option.name, v)
        except Exception:  # noqa: BLE001 (the declaration refuses it: nothing to build)
            continue
        out.append(v)
    return out


def _specs(registry, skip=()):
    """``name[option=value]`` of every registered component and every probe value its declaration
    accepts (required options given 1)."""
    from evroute.specs import format_value

    for name in registry.names():
        if name in skip:
            continue
        entry = registry.get(name)
        required = {o.name: 1 for o in entry.options if o.required}
        for o in entry.options:
            for v in _accepted(o):
                given = {**required, o.name: v}
                yield name, f"{name}[{','.join(f'{k}={format_value(x)}' for k, x in given.items())}]"


def test_every_value_a_declaration_accepts_is_built():
    """Every registered agent, backend, truth and closure pattern, with each of its options at
    each probe value its declaration accepts: the constructor builds it (it does not refuse, after
    the network has loaded, what the flag let through; e.g. a confidence delta of 0)."""
    import numpy as np

    from evroute.bandit.agents import POLICIES, make_agent
    from evroute.bandit.closures import parse_closures
    from evroute.bandit.environments import CLOSURES, TRUTHS, TruthSetup, make_truth
    from evroute.errors import EvrouteError
    from evroute.models import MODELS, make_model
    from evroute.testing import small_problem

    p = small_problem()
    setup = TruthSetup(p.net, p.prior.mean, float(p.prior.prior_var), float(np.sqrt(p.noise_var)), 0)
    build = [(POLICIES, (), lambda s: make_agent(s, p.setup())),
             (MODELS, ("svgp",), lambda s: make_model(s, p.prior, noise_var=p.noise_var)),  # svgp: tests/test_svgp.py
             (TRUTHS, ("sumo",), lambda s: make_truth(s, setup)),  # sumo: an atlas, tests/test_sumo.py
             (CLOSURES, (), lambda s: CLOSURES.get(parse_closures(s).name).factory(**parse_closures(s).options))]
    refused = []
    for registry, skip, make in build:
        for _, spec in _specs(registry, skip):
            try:
                make(spec)
            except EvrouteError as exc:
                refused.append(f"{spec}: {exc}")
    assert not refused, "declared but refused by the constructor:\n" + "\n".join(refused)


#: Values a declaration may refuse: each one it refuses, the component's own factory (called
#: directly, as library code may) must refuse as well.
_BAD_PROBES = (-1, -1e-9, 0, 1.5, 1e300, "nonsense", "", float("nan"), float("inf"))


def test_every_value_a_declaration_refuses_is_refused_by_the_component_itself():
    """The reverse of the test above: a component built by library code (its registered factory
    called directly, past the registry's conversion) refuses every probe value its declaration
    refuses, so the declaration and the constructor cannot drift apart either way."""
    import numpy as np

    from evroute.bandit.agents import POLICIES
    from evroute.bandit.environments import CLOSURES, TRUTHS, TruthSetup
    from evroute.errors import EvrouteError
    from evroute.models import MODELS
    from evroute.testing import small_problem

    p = small_problem()
    setup = TruthSetup(p.net, p.prior.mean, float(p.prior.prior_var), float(np.sqrt(p.noise_var)), 0)
    build = [(POLICIES, (), lambda f, o: f(p.setup(), **o)),
             (MODELS, ("svgp",), lambda f, o: f(p.prior, noise_var=p.noise_var, seed=0, **o)),
             (TRUTHS, ("sumo",), lambda f, o: f(setup, **o)),
             (CLOSURES, (), lambda f, o: f(**o))]
    accepted = []
    for registry, skip, make in build:
        for name in registry.names():
            if name in skip:
                continue
            entry = registry.get(name)
            base = {o.name: (1 if o.required else o.default) for o in entry.options}
            for o in entry.options:
                for v in _BAD_PROBES:
                    try:
                        o.convert(o.name, v)
                        continue  # the declaration accepts it: the test above
                    except EvrouteError:
                        pass
                    try:
                        make(entry.factory, {**base, o.name: v})
                    except EvrouteError:
                        continue
                    except Exception as exc:  # noqa: BLE001 (refused, but not as the declaration does)
                        accepted.append(f"{name}: {o.name}={v!r} ({type(exc).__name__})")
                        continue
                    accepted.append(f"{name}: {o.name}={v!r}")
    assert not accepted, "refused by the declaration but accepted by the component:\n" + "\n".join(accepted)


def test_a_components_options_are_declared_on_it_and_read_from_it():
    """Every registered component declares its options on its factory or class
    (:func:`evroute.specs.declared`) and the registry's entry holds exactly those: one table, read
    by the registry, the flags, the help and the sweeps; a second table at registration is
    refused."""
    from evroute.components import REGISTRIES
    from evroute.errors import EvrouteError
    from evroute.specs import Option, Registry, declared
    from evroute.validate import positive_float

    for family, registry in REGISTRIES.items():
        registry.load_all()
        for name in registry.names():
            entry = registry.get(name)
            assert entry.options == getattr(entry.factory, "options", ()), f"{family} {name}"

    rate = Option("rate", positive_float, 0.5)

    @declared(rate)
    def factory(*, rate=0.5):
        return rate

    r = Registry("thing")
    with pytest.raises(EvrouteError, match="declares its options"):
        r.register("a", factory, (Option("other", positive_float, 1.0),))
    assert r.register("b", factory).options == (rate,)
    assert factory(rate="2") == 2.0
    with pytest.raises(EvrouteError, match="rate"):
        factory(rate=-1)
    with pytest.raises(EvrouteError, match="declares rate but does not take it"):
        declared(rate)(lambda x: x)
