"""The one parser of command-line specs ``NAME[key=value,...]``.

Policies (``gp-bucb[xi=0.5]``) and posterior backends (``svgp[inducing=500]``) are named
this way; :func:`parse_spec` splits the text, and the owner of the name (the policy
table, the backend registry) checks and converts the options it declares.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import EvrouteError

__all__ = ["Option", "Entry", "Registry", "parse_spec", "parse_kind", "resolve_options", "split_list"]

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
        raise EvrouteError(f"cannot parse {what} {text!r}; expected NAME or NAME[key=value,...], e.g. {example}")
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


@dataclass(frozen=True)
class Option:
    """One declared option of a backend or an agent.

    Attributes
    ----------
    name : str
        As written in a spec (``inducing``) and passed to the factory.
    convert : callable
        ``convert(name, value) -> value``: checks and converts a value (text from a spec, or
        a Python value), raising :class:`EvrouteError`; see :mod:`evroute.validate`.
    default : object
        Used when the option is not given.
    help : str
        One line for help texts; say where the default comes from.
    """

    name: str
    convert: Callable[[str, Any], Any]
    default: Any
    help: str = ""


def resolve_options(options: tuple[Option, ...], given: dict, owner: str) -> dict:
    """Every declared option: the given ones converted, the others at their defaults. An
    undeclared option is a one-line :class:`EvrouteError` naming ``owner`` and the accepted ones."""
    declared = {o.name: o for o in options}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise EvrouteError(f"unknown option(s) for {owner}: {', '.join(unknown)} "
                           f"(accepted: {', '.join(declared) or 'none'})")
    return {name: (o.convert(name, given[name]) if name in given else o.default) for name, o in declared.items()}


def parse_kind(text, what: str, kinds: dict[str, tuple[Option, ...]], example: str) -> tuple[str, dict]:
    """``KIND[key=value,...]`` for a fixed set of kinds, each with its declared options:
    (kind, every option converted or at its default). An unknown kind or option, or a value
    its option refuses, is a one-line :class:`EvrouteError`. An option declared with default
    ``None`` is required."""
    kind, given = parse_spec(str(text), what, example)
    if kind not in kinds:
        raise EvrouteError(f"unknown {what} {text!r}; choose one of: {', '.join(kinds)} (e.g. {example})")
    out = resolve_options(kinds[kind], given, f"{what} {kind!r}")
    missing = [name for name, value in out.items() if value is None]
    if missing:
        raise EvrouteError(f"{what} {kind!r} needs {', '.join(missing)} (e.g. {example})")
    return kind, out


@dataclass(frozen=True)
class Entry:
    """A registered factory: its name, the options it declares and a one-line description."""

    kind: str
    name: str
    factory: Callable[..., Any]
    options: tuple[Option, ...] = ()
    description: str = ""

    def resolve(self, given: dict) -> dict:
        """Every declared option: the given ones converted, the others at their defaults."""
        return resolve_options(self.options, given, f"{self.kind} {self.name!r}")

    def help(self) -> str:
        """The name, the description and the options with their defaults, one per line."""
        lines = [f"{self.name}: {self.description}"]
        lines += [f"  {o.name} = {o.default!r}: {o.help}" for o in self.options]
        return "\n".join(lines)


class Registry:
    """Named factories with declared options (posterior backends, agents): registration is
    explicit, a second registration of a name is an error, and an unknown name is one line
    listing the known ones.

    Parameters
    ----------
    kind : str
        What is registered, for messages (``model``, ``policy``).
    sort : bool
        List the names sorted (else in registration order).
    """

    def __init__(self, kind: str, sort: bool = True):
        self.kind, self.sort = kind, sort
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, factory: Callable[..., Any], options: tuple[Option, ...] = (),
                 description: str = "", overwrite: bool = False) -> Entry:
        key, extra = parse_spec(str(name), f"{self.kind} name")
        if extra or key != str(name).strip().lower():
            raise EvrouteError(f"invalid {self.kind} name {name!r}")
        names = [o.name for o in options]
        if len(set(names)) != len(names):
            raise EvrouteError(f"{self.kind} {key!r} declares an option twice")
        if key in self._entries and not overwrite:
            raise EvrouteError(f"{self.kind} {key!r} is already registered")
        entry = self._entries[key] = Entry(self.kind, key, factory, tuple(options), description)
        return entry

    def unregister(self, name: str) -> None:
        self._entries.pop(str(name).strip().lower(), None)

    def names(self) -> list[str]:
        return sorted(self._entries) if self.sort else list(self._entries)

    def get(self, name: str) -> Entry:
        key = str(name).strip().lower()
        if key not in self._entries:
            raise EvrouteError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._entries[key]

    def parse(self, text: str, example: str) -> tuple[str, dict]:
        """``NAME[key=value,...]`` → the registered name and the given options, converted."""
        name, raw = parse_spec(text, self.kind, example)
        entry = self.get(name)
        resolved = entry.resolve(raw)
        return entry.name, {k: resolved[k] for k in raw}


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
