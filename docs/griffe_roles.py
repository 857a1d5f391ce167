"""A griffe extension for the documentation site: the Sphinx roles of evroute's numpy-style
docstrings (:class:`~evroute.errors.EvrouteError`, :func:`load_network`) become mkdocstrings
cross-references where the target has a page on the site (the entries of ``docs/api.md`` and
their members), and plain code elsewhere; nothing is shown as raw ``:class:`` text.

mkdocs.yml loads it: ``extensions: [docs/griffe_roles.py]`` in mkdocstrings' Python handler.
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe

#: ``:role:`target```, ``:role:`~target```, ``:role:`text <target>``` (``:py:role:`` too)
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const):`(!?)(~?)([^`<]+?)(?:\s*<([^>]+)>)?`")
API = Path(__file__).with_name("api.md")


def documented() -> set[str]:
    """The objects with an entry in docs/api.md (their members are rendered with them)."""
    return set(re.findall(r"^::: ([\w.]+)\s*$", API.read_text(encoding="utf-8"), flags=re.M))


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the loaded package."""

    def __init__(self) -> None:
        self.pages = documented()

    def _resolve(self, target: str, obj, collection):
        """The object ``target`` names as seen from ``obj`` (None when nothing matches)."""
        target = target.strip().rstrip("()")
        scopes = [obj.path, obj.parent.path if obj.parent else "", obj.module.path, obj.package.path, ""]
        for scope in scopes:
            path = f"{scope}.{target}" if scope else target
            try:
                found = collection[path]
            except (KeyError, ValueError, griffe.AliasResolutionError):
                continue
            try:
                return found.final_target if found.is_alias else found
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                return None
        return None

    def _on_page(self, found) -> bool:
        """An entry of docs/api.md, or a public member of one with a docstring (mkdocstrings
        renders those)."""
        if found is None:
            return False
        if found.path in self.pages:
            return True
        return (any(found.path.startswith(p + ".") for p in self.pages) and found.docstring is not None
                and not found.name.startswith("_"))

    def _rewrite(self, obj, collection) -> None:
        if obj.docstring is None:
            return

        def replace(m: re.Match) -> str:
            no_link, short, target, explicit = m.group(1), m.group(2), m.group(3).strip(), m.group(4)
            if explicit:
                text, target = target, explicit.strip()
            else:
                text = target.rsplit(".", 1)[-1] if short else target
            found = None if no_link else self._resolve(target, obj, collection)
            return f"[`{text}`][{found.path}]" if self._on_page(found) else f"`{text}`"

        obj.docstring.value = ROLE.sub(replace, obj.docstring.value)

    def on_package(self, *, pkg, loader, **kwargs) -> None:
        collection = loader.modules_collection
        stack = [pkg]
        while stack:
            obj = stack.pop()
            if obj.is_alias:
                continue
            self._rewrite(obj, collection)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
