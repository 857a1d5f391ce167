"""The public API: ``import evroute`` gives the documented entry points, and the README's
"Using evroute from Python" example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import evroute

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Using evroute from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section holds one Python example"
    return blocks[0]


def test_every_documented_name_resolves():
    for name in evroute.__all__:
        assert getattr(evroute, name) is not None, name
    assert set(evroute.__all__) <= set(dir(evroute))


def test_api_names_are_not_submodule_names():
    """``import evroute.x`` sets the attribute ``x`` of the package: an API name equal to a
    submodule's would be replaced by the module."""
    import pkgutil

    submodules = {m.name for m in pkgutil.iter_modules(evroute.__path__)}
    assert set(evroute.__all__) & submodules == set()


def test_import_is_cheap():
    code = "import sys, evroute; assert not {'torch', 'scipy', 'pandas', 'osmnx'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(readme_example(), "README.md", "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert "cumulative regret after 40 rounds" in out
    assert evroute.verify_run(tmp_path / "runs" / "api-demo") is None
    summary = (tmp_path / "runs" / "api-compare" / "summary.csv").read_text()
    assert "gp-ucb" in summary and "bi-ucb" in summary
