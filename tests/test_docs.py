"""The documentation site (docs/, mkdocs.yml): its code examples run as written, the API
reference lists every public name, the README stays short and keeps its two set-up commands,
and the strict build passes (broken links, missing references and docstring errors fail it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import evroute

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("page", ["getting-started.md", "python.md"])
def test_the_pages_examples_run(page, tmp_path, monkeypatch, capsys):
    blocks = [b for b in python_blocks(DOCS / page) if "import evroute" in b]
    assert blocks, f"{page} holds no example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, str(DOCS / page), "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out.strip()
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs and all(evroute.verify_run(tmp_path / "runs" / r) is None for r in runs
                        if (tmp_path / "runs" / r / "summary.json").is_file())


def test_the_python_page_is_the_readmes_example():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using evroute from Python", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```python\n(.*?)```", section, flags=re.S) == python_blocks(DOCS / "python.md")


def test_the_api_reference_lists_every_public_name():
    """Every name of ``evroute.__all__`` has its entry, at the module that defines it (the
    entry's object is the package's)."""
    import importlib

    entries = re.findall(r"^::: (evroute\.[\w.]+)\.(\w+)$", (DOCS / "api.md").read_text(encoding="utf-8"), flags=re.M)
    found = {name: getattr(importlib.import_module(module), name) for module, name in entries}
    for name in set(evroute.__all__) - {"__version__"}:
        assert name in found, f"{name} is missing from docs/api.md"
        assert found[name] is getattr(evroute, name), name


def test_the_readme_is_short_and_keeps_the_set_up_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("\n") <= 250
    assert "pip install torch==2.13.0 && pip install -e . && evroute simulate" in readme
    assert 'pip install torch==2.13.0 && pip install -e ".[dev]" && python -m pytest -q' in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_every_page_is_in_the_navigation_and_every_figure_exists():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, page
    for page in DOCS.rglob("*.md"):
        for fig in re.findall(r"\]\(([^)]*figures/[^)]+\.png)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / fig).resolve().is_file(), (page, fig)


def test_the_site_builds_strictly(tmp_path):
    """(Skipped without the docs extra; ``.ci/run`` installs it and builds the site itself.)"""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
