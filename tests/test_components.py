"""The list of built-in components (evroute.components) against what the modules register."""

from __future__ import annotations

import subprocess
import sys

from evroute.components import BUILTIN, REGISTRIES


def test_every_listed_component_is_registered_by_its_module_and_every_builtin_is_listed():
    """In a fresh process: importing every module of the list registers exactly the listed
    names (no built-in left out of the list, none listed that nothing registers)."""
    code = ("import importlib\nfrom evroute.components import BUILTIN, REGISTRIES\n"
            "for family, names in BUILTIN.items():\n"
            "    for module in set(names.values()):\n"
            "        importlib.import_module(module)\n"
            "import evroute.config, evroute.sumo\n"
            "print({f: sorted(r._entries) for f, r in REGISTRIES.items()})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    registered = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own printout)
    assert registered == {f: sorted(names) for f, names in BUILTIN.items()}, out.stderr[-2000:]


def test_a_listed_name_imports_its_module_on_first_use():
    code = ("import sys\nfrom evroute.components import TRUTHS\n"
            "assert 'evroute.sumo' not in sys.modules\n"
            "assert 'sumo' in TRUTHS.names()\n"
            "entry = TRUTHS.get('sumo')\n"
            "print(entry.name, 'evroute.sumo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["sumo", "True"], out.stderr[-2000:]


def test_help_lists_follow_the_registries():
    assert REGISTRIES["policy"].names()[:3] == ["gp-ucb", "gp-bucb", "gp-ts"]
    assert REGISTRIES["model"].names() == sorted(BUILTIN["model"])
