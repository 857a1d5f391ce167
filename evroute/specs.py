"""Declared options, resolved components and their registries: how a run is described.

Everything a user can set is declared once, as an :class:`Option` of the component or the
module that owns it: its name, how a value is checked and converted (with its bounds), its
default and where the default comes from, and its aliases. Components with options (a policy
``gp-bucb[xi=0.5]``, a backend ``svgp[inducing=500]``, a truth ``rkhs[B=10]``, a closure pattern
``random[rate=0.05]``) are named by a spec ``NAME[key=value,...]`` (:func:`parse_spec`) and
resolved once by their family's :class:`Registry` into a :class:`Component`: the registered
name with every declared option converted or at its default, and a canonical :attr:`~Component.label`
(used in run names, tables and ``config.json``). Factories receive resolved components,
never raw text.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import EvrouteError

__all__ = ["Option", "Component", "Entry", "Registry", "parse_spec", "resolve_options", "split_list",
           "format_value", "deferred", "declared"]

_SPEC = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\[\]]*)\])?\s*")


def parse_spec(text: str, what: str = "spec", example: str = "name[key=value]") -> tuple[str, dict[str, str]]:
    """Split ``NAME[key=value,...]`` into the lower-case name and its options (texts).

    Keys are lower-cased; a key given twice, an option without ``=`` or with an empty value
    is a one-line :class:`EvrouteError`.

    Examples
    --------
    >>> parse_spec("gp-bucb[xi=0.5]")
    ('gp-bucb', {'xi': '0.5'})
    >>> parse_spec("svgp[inducing=500, steps=2]")
    ('svgp', {'inducing': '500', 'steps': '2'})
    """
    m = _SPEC.fullmatch(str(text))
    if not m:
        raise EvrouteError(f"cannot parse {what} {str(text)!r:.80}; expected NAME or NAME[key=value,...], e.g. {example}")
    options: dict[str, str] = {}
    for part in (p.strip() for p in (m.group(2) or "").split(",")):
        if not part:
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise EvrouteError(f"{what} {text!r}: option {part!r} must be key=value")
        key = key.lower()
        if key in options:
            raise EvrouteError(f"{what} {text!r}: option {key!r} is given twice")
        options[key] = value
    return m.group(1).lower(), options


def format_value(value) -> str:
    """A value as written in a spec or a label: ``true``/``false``, numbers in their shortest
    exact-enough form (``1.0`` → ``1``, ``0.25``), text as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"{float(value):g}" if isinstance(value, float) else str(value)
    if isinstance(value, Component):
        return value.label
    return str(value)


@dataclass(frozen=True)
class Option:
    """One declared option: of a component (``svgp``'s ``inducing``) or of a run (``--horizon``).

    Attributes
    ----------
    name : str
        As written in a spec (``inducing``) or, with ``-`` for ``_``, as a command-line flag;
        the keyword the factory receives.
    convert : callable
        ``convert(name, value) -> value``: checks and converts a value (text from a spec, or
        a Python value), raising :class:`EvrouteError`; see :mod:`evroute.validate`. A
        converter made by :func:`evroute.validate.in_range` carries its ``bounds``.
    default : object
        Used when the option is not given; ``None`` for an option of a spec is required.
    help : str or callable
        One line for help texts; a callable is asked each time (a list of registered names
        that plug-ins may extend).
    source : str
        Where the default comes from (``003 App. B.3``, ``measured: benchmarks/posterior_updates.py``).
    aliases : tuple of str
        Other names accepted for it in a spec (``w`` for ``omega``).
    flag : str
        The command-line flag, when it is not ``--`` + the name with ``-`` for ``_``.
    flag_aliases : tuple of str
        Other command-line flags accepted for it.
    metavar : str
        How the value is shown in ``--help`` (``NUMBER``, ``INT``, ``SPEC``, ...).
    required : bool
        An option of a spec that must be given (``rkhs[B=…]``).
    """

    name: str
    convert: Callable[[str, Any], Any]
    default: Any
    help: str | Callable[[], str] = ""
    source: str = ""
    aliases: tuple[str, ...] = ()
    flag: str = ""
    flag_aliases: tuple[str, ...] = ()
    metavar: str = "TEXT"
    required: bool = False

    @property
    def bounds(self) -> str | None:
        """The accepted interval, as text, when the converter declares one."""
        return getattr(self.convert, "bounds", None)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def describe(self, with_default: bool = True, brief: bool = False) -> str:
        """Help text: the help, the bounds, and the default with its source; ``brief``: the help
        and the default only (a command-line option's one line; the rest is in the docs)."""
        text = self.help() if callable(self.help) else self.help
        if brief:
            shown = with_default and self.default is not None and self.default is not False
            return text + (f" (default {format_value(self.default)})" if shown else "")
        if self.bounds:
            text += f"; in {self.bounds}"
        if with_default and self.default is not None and self.default is not False:
            text += f" (default {format_value(self.default)}" + (f", {self.source})" if self.source else ")")
        elif self.source:
            text += f" ({self.source})"
        return text

    def __call__(self, value, name: str | None = None):
        """The value checked and converted (``None`` stays ``None``: not given)."""
        return None if value is None else self.convert(name or self.name, value)


def resolve_options(options: tuple[Option, ...], given: Mapping, owner: str) -> dict:
    """Every declared option: the given ones (by name or alias) converted, the others at their
    defaults, in declared order. An undeclared option, or one given twice (by name and alias),
    is a one-line :class:`EvrouteError` naming ``owner`` and the accepted ones."""
    by_key = {}
    for o in options:
        for key in (o.name, *o.aliases):
            by_key[key.lower()] = o
    values: dict[str, Any] = {}
    unknown = []
    for key, value in given.items():
        o = by_key.get(str(key).lower().replace("-", "_")) or by_key.get(str(key).lower())
        if o is None:
            unknown.append(str(key))
            continue
        if o.name in values:
            raise EvrouteError(f"option {o.name!r} of {owner} is given twice")
        values[o.name] = o.convert(o.name, value)
    if unknown:
        accepted = ", ".join(o.name for o in options) or "none"
        raise EvrouteError(f"unknown option(s) for {owner}: {', '.join(sorted(unknown))} (accepted: {accepted})")
    return {o.name: values.get(o.name, o.default) for o in options}


@dataclass(frozen=True)
class Component:
    """A resolved component: a registered name with every declared option converted or at its
    default (:meth:`Registry.resolve` makes them; factories receive them).

    Attributes
    ----------
    family : str
        The registry it belongs to (``policy``, ``model``, ``truth``, ``closures``).
    name : str
        The registered name.
    items : tuple of (str, object)
        Every declared option and its value, in declared order.
    defaults : tuple of (str, object)
        The declared defaults (for :attr:`label`).
    """

    family: str
    name: str
    items: tuple = ()
    defaults: tuple = field(default=(), compare=False, repr=False)

    @property
    def options(self) -> dict:
        """Every option and its value (a new dict)."""
        return dict(self.items)

    def __getitem__(self, key: str):
        return dict(self.items)[key]

    def get(self, key: str, default=None):
        return dict(self.items).get(key, default)

    @property
    def given(self) -> dict:
        """The options whose value is not the declared default, in declared order."""
        defaults = dict(self.defaults)
        return {k: v for k, v in self.items if k not in defaults or v != defaults[k]}

    @property
    def label(self) -> str:
        """The canonical spec: ``gp-bucb[xi=0.5]``; the name alone at the defaults."""
        given = self.given
        if not given:
            return self.name
        return f"{self.name}[{','.join(f'{k}={format_value(v)}' for k, v in given.items())}]"

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Entry:
    """A registered factory: its name, the options it declares, a one-line description and
    the capabilities it offers (backends: :data:`evroute.models.base.CAPABILITIES`)."""

    kind: str
    name: str
    factory: Callable[..., Any]
    options: tuple[Option, ...] = ()
    description: str = ""
    capabilities: frozenset = frozenset()
    #: (the modules it imports, how to install them): checked when it is resolved, before any work
    requires: tuple = ()
    #: a policy's model family, declared at registration: ``gp`` (the run's ``--model``), ``bi``
    #: (its own independent model) or ``none`` (no posterior model)
    model: str = "gp"
    #: what the component needs of the run (agents: :data:`evroute.bandit.agents.AGENT_NEEDS`), checked
    #: when a run is configured, before any work
    needs: frozenset = frozenset()

    def check_installed(self) -> None:
        """One line naming the install command when a module the component needs is missing
        (looked up, never imported)."""
        if self.requires:
            modules, install = self.requires
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            if missing:
                raise EvrouteError(f"{self.kind} {self.name!r} needs {', '.join(missing)}, which is not installed: "
                                   f"{install}")

    def resolve(self, given: Mapping) -> dict:
        """Every declared option: the given ones converted, the others at their defaults."""
        return resolve_options(self.options, given, f"{self.kind} {self.name!r}")

    def component(self, given: Mapping | None = None) -> Component:
        """The resolved :class:`Component` of this entry with the ``given`` options."""
        values = self.resolve(given or {})
        missing = [o.name for o in self.options if o.required and values[o.name] is None]
        if missing:
            raise EvrouteError(f"{self.kind} {self.name!r} needs {', '.join(missing)}")
        return Component(self.kind, self.name, tuple(values.items()),
                         tuple((o.name, o.default) for o in self.options))

    def help(self) -> str:
        """The name, the description and the options with their defaults, one per line."""
        lines = [f"{self.name}: {self.description}"]
        if self.capabilities:
            lines[0] += f" [offers: {', '.join(sorted(self.capabilities))}]"
        if self.needs:
            lines[0] += f" [needs: {', '.join(sorted(self.needs))}]"
        lines += [f"  {o.name} = {o.default!r}: {o.describe(with_default=False)}" for o in self.options]
        return "\n".join(lines)


class Registry:
    """Named factories with declared options (backends, agents, truths, closure patterns):
    registration is explicit, a second registration of a name is an error, and an unknown
    name is one line listing the known ones.

    Parameters
    ----------
    kind : str
        What is registered, for messages (``model``, ``policy``, ``truth``).
    sort : bool
        List the names sorted (else in registration order).
    example : str
        A spec shown in parse errors.
    catalogue : mapping of str to str, optional
        The family's built-in names and the module whose import registers each
        (:data:`evroute.components.BUILTIN`): they are listed before they are imported, and
        the first :meth:`get` of one imports its module.
    plugins : callable, optional
        ``plugins() -> {name: (module, distribution)}``: the family's components declared by
        installed packages (:func:`evroute.components.plugin_catalogue`), asked once, when a
        name is first listed or looked up; each then works as a built-in one.
    """

    def __init__(self, kind: str, sort: bool = True, example: str = "", catalogue: Mapping[str, str] | None = None,
                 plugins: Callable[[], Mapping[str, tuple[str, str]]] | None = None):
        self.kind, self.sort, self.example = kind, sort, example or "name[key=value]"
        self._entries: dict[str, Entry] = {}
        self._builtin = dict(catalogue or {})
        self._plugins_source = plugins
        self._plugins: dict[str, tuple[str, str]] | None = None if plugins is not None else {}
        self._merged: dict[str, str] | None = None

    @property
    def _catalogue(self) -> dict[str, str]:
        """Built-in names, then plug-in names → the module whose import registers each."""
        if self._merged is None:
            if self._plugins is None:
                self._plugins = {k: v for k, v in self._plugins_source().items() if k not in self._builtin}
            self._merged = {**self._builtin, **{k: m for k, (m, _) in self._plugins.items()}}
        return self._merged

    def origin(self, name: str) -> str:
        """Where a component comes from: ``built-in``, ``plug-in DIST (MODULE)`` or ``registered by
        MODULE`` (code that called the family's register function)."""
        key = str(name).strip().lower()
        if key in self._builtin:
            return "built-in"
        self._catalogue  # noqa: B018 (reads the plug-ins once)
        if key in self._plugins:
            module, dist = self._plugins[key]
            return f"plug-in {dist} ({module})"
        entry = self.get(key)
        return f"registered by {getattr(entry.factory, '__module__', None) or 'unknown code'}"

    def register(self, name: str, factory: Callable[..., Any], options: tuple[Option, ...] | None = None,
                 description: str = "", overwrite: bool = False, capabilities: Iterable[str] = (),
                 requires: tuple = (), model: str = "gp", needs: Iterable[str] = ()) -> Entry:
        """Register ``factory`` under ``name``. Its options are those it declares (:func:`declared`:
        ``factory.options``); ``options`` is for a factory that declares none of its own (it may
        not declare others than the factory's)."""
        key, extra = parse_spec(str(name), f"{self.kind} name")
        own = getattr(factory, "options", None)
        if options is None:
            options = own or ()
        elif own is not None and tuple(options) != tuple(own):
            raise EvrouteError(f"{self.kind} {key!r}: its factory declares its options; register it without options=")
        if extra or key != str(name).strip().lower():
            raise EvrouteError(f"invalid {self.kind} name {name!r}")
        names = [a for o in options for a in (o.name, *o.aliases)]
        if len(set(names)) != len(names):
            raise EvrouteError(f"{self.kind} {key!r} declares an option or alias twice")
        if key in self._entries and not overwrite:
            raise EvrouteError(f"{self.kind} {key!r} is already registered")
        if model not in ("gp", "bi", "none"):
            raise EvrouteError(f"{self.kind} {key!r}: model must be gp, bi or none, got {model!r}")
        entry = self._entries[key] = Entry(self.kind, key, factory, tuple(options), description,
                                           frozenset(capabilities), tuple(requires), model, frozenset(needs))
        return entry

    def unregister(self, name: str) -> None:
        self._entries.pop(str(name).strip().lower(), None)

    def names(self) -> list[str]:
        """The built-in names (imported or not) and every other registered one."""
        names = list(dict.fromkeys([*self._catalogue, *self._entries]))
        return sorted(names) if self.sort else names

    def __contains__(self, name) -> bool:
        key = str(name).strip().lower()
        return key in self._entries or key in self._catalogue

    def get(self, name: str) -> Entry:
        key = str(name).strip().lower()
        if key not in self._entries and key in self._catalogue:
            importlib.import_module(self._catalogue[key])  # its registration call makes the entry
            if key not in self._entries:
                whose = "evroute" if key in self._builtin else f"the plug-in {self._plugins[key][1]}"
                raise EvrouteError(f"{self.kind} {key!r}: {self._catalogue[key]} does not register it (a bug in {whose})")
        if key not in self._entries:
            raise EvrouteError(f"unknown {self.kind} {str(name)!r:.60}; choose one of: {', '.join(self.names())}")
        return self._entries[key]

    def load_all(self) -> None:
        """Import every built-in and plug-in component of the family (for listings of their
        options)."""
        for module in dict.fromkeys(self._catalogue.values()):
            importlib.import_module(module)

    def resolve(self, spec, **options) -> Component:
        """A :class:`Component` from a spec text (``NAME[key=value,...]``), a component of this
        family (re-resolved, so its options are checked again), or a name with ``options``."""
        if isinstance(spec, Component):
            if spec.family != self.kind:
                raise EvrouteError(f"a {spec.family} ({spec.label}) is not a {self.kind}")
            name, raw = spec.name, {**spec.given, **options}
        else:
            name, raw = parse_spec(str(spec), self.kind, self.example)
            both = sorted(set(raw) & set(options))
            if both:
                raise EvrouteError(f"{self.kind} option(s) given twice: {', '.join(both)}")
            raw = {**raw, **options}
        return self.get(name).component(raw)

    def parse(self, text: str, example: str = "") -> tuple[str, dict]:
        """``NAME[key=value,...]`` → the registered name and the given options, converted."""
        name, raw = parse_spec(text, self.kind, example or self.example)
        entry = self.get(name)
        resolved = entry.resolve(raw)
        return entry.name, {o.name: resolved[o.name] for o in entry.options
                            if any(k in raw for k in (o.name, *o.aliases))}

    def with_capability(self, capability: str) -> list[str]:
        """The registered names that declare ``capability``."""
        return [n for n in self.names() if capability in self.get(n).capabilities]

    def describe(self) -> str:
        """One line of the registered names, for help texts."""
        return ", ".join(self.names())


def split_list(text: str) -> list[str]:
    """Split a comma-separated list, keeping commas inside ``[...]``: ``a[x=1,y=2],b``."""
    items, depth, cur = [], 0, ""
    for ch in str(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [i.strip() for i in items if i.strip()]


def deferred(target: str, *, value_only: bool = False, bounds: str | None = None):
    """An option converter defined in a module that is imported only when a value is converted,
    so that declaring an option (and printing ``--help``) imports no numerical library.

    Parameters
    ----------
    target : str
        ``"module:function"``, e.g. ``"evroute.roads.names:check_network_name"``.
    value_only : bool
        The function takes the value alone (``resolve_policy(spec)``), not ``(name, value)``.
    bounds : str, optional
        The accepted interval as the function's own ``bounds`` says it, for help texts.

    Returns
    -------
    callable
        ``convert(name, value)``, with attributes ``target`` and ``bounds``.
    """
    module, _, attr = target.partition(":")

    def convert(name, value):
        function = getattr(importlib.import_module(module), attr)
        return function(value) if value_only else function(name, value)

    convert.target = target
    if bounds is not None:
        convert.bounds = bounds
    return convert


def declared(*options: Option):
    """Declare a component's options on its factory (a function or a class): the factory then
    carries them (``factory.options``, which its registration reads) and converts every one it
    receives through its declaration before its body runs, however it is called (by the
    registry, or directly by library code), so its body only stores.

    Parameters
    ----------
    *options : Option
        The component's options; each must be a parameter of the factory (or of a class's
        ``__init__``), or be taken by its ``**kwargs``.

    Returns
    -------
    callable
        A decorator returning the factory (a class: the same class, its ``__init__`` wrapped).

    Examples
    --------
    >>> from evroute.validate import positive_float
    >>> @declared(Option("rate", positive_float, 0.5))
    ... def closures(*, rate=0.5):
    ...     return rate
    >>> closures(rate="0.25"), [o.name for o in closures.options]
    (0.25, ['rate'])
    """
    by_name = {o.name: o for o in options}
    if len(by_name) != len(options):
        raise EvrouteError("an option is declared twice")

    def wrap(factory):
        target = factory.__init__ if isinstance(factory, type) else factory
        sig = inspect.signature(target)
        var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
        missing = [n for n in by_name if n not in sig.parameters and var_kw is None]
        if missing:
            raise EvrouteError(f"{factory.__qualname__} declares {', '.join(missing)} but does not take it")

        def convert(name, value):
            return by_name[name](value) if name in by_name else value

        @functools.wraps(target)
        def checked(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            for name, value in bound.arguments.items():
                if name == var_kw:
                    bound.arguments[name] = {k: convert(k, v) for k, v in value.items()}
                else:
                    bound.arguments[name] = convert(name, value)
            return target(*bound.args, **bound.kwargs)

        checked.options = tuple(options)
        if isinstance(factory, type):
            factory.__init__ = checked
            factory.options = tuple(options)
            return factory
        return checked

    return wrap
