"""The documentation site (docs/, mkdocs.yml): its code examples run as written, the API
reference lists every public name, the README stays short and keeps its two set-up commands,
and the strict build passes (broken links, missing references and docstring errors fail it)."""

from __future__ import annotations

import html
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


def marked_commands(path: Path) -> list[str]:
    """The evroute lines of the bash blocks that follow the marker "the tests run ..."."""
    blocks = re.findall(r"<!-- the tests run the evroute lines of this block -->\n```bash\n(.*?)```",
                        path.read_text(encoding="utf-8"), flags=re.S)
    return [line.split("#")[0].strip() for b in blocks for line in b.splitlines() if line.startswith("evroute ")]


def test_getting_started_goes_from_the_main_job_to_a_comparison_plot(tmp_path, monkeypatch, capsys):
    """The page's commands, as written, on the embedded city: the main job, a comparison, its plot."""
    import shlex

    from evroute.cli import main

    commands = marked_commands(DOCS / "getting-started.md")
    assert [c.split()[1] for c in commands] == ["simulate", "compare", "plot"]
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, (command, capsys.readouterr().err[-2000:])
    out = capsys.readouterr().out
    assert "saved" in out and "| gp-ts |" in out
    assert (tmp_path / "runs" / "first" / "summary.json").is_file()
    plots = {p.name for p in (tmp_path / "results" / "first" / "plots").iterdir()}
    assert {"regret.png", "explore-synthetic-A.png"} <= plots


def test_your_fleet_runs_as_written(tmp_path, monkeypatch, capsys):
    """The fleet page's path, as written, on the embedded city: its literal CSV imported, the prior
    fitted from it, the route under it (GeoJSON and a map), a run and a comparison with and without
    it."""
    import json
    import shlex

    from evroute.cli import main

    page = DOCS / "guide" / "fleet.md"
    csv = re.findall(r"<!-- the tests write this block to fleet.csv -->\n```csv\n(.*?)```",
                     page.read_text(encoding="utf-8"), flags=re.S)
    assert len(csv) == 1 and csv[0].startswith("trip_id,timestamp,")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.csv").write_text(csv[0], encoding="utf-8")
    commands = marked_commands(page)
    assert [c.split()[1] for c in commands] == ["drives", "prior", "route", "simulate", "compare"]
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, (command, capsys.readouterr().err[-2000:])
    out = capsys.readouterr().out
    assert "3 of 3 trips matched on synthetic" in out and "<- chosen" in out and "prior: " in out
    report = json.loads((tmp_path / "my-drives" / "report.json").read_text())
    assert report["network"]["name"] == "synthetic" and report["vehicle"]["spec"] == "sumo-ev"
    prior = json.loads((tmp_path / "prior.json").read_text())
    assert prior["network"]["fingerprint"] == report["network"]["fingerprint"] and prior["turns"] is not None
    kinds = [f["properties"]["kind"] for f in json.loads((tmp_path / "routes.geojson").read_text())["features"]]
    assert kinds[-1] == "prior" and "prior route" in (tmp_path / "routes.html").read_text()
    assert json.loads((tmp_path / "run-prior" / "config.json").read_text())["scenario"]["prior"] == "prior.json"
    table = (tmp_path / "judge" / "summary.md").read_text()
    assert "prior=prior.json" in table and "prior=None" in table


def test_the_python_page_is_the_readmes_example():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using evroute from Python", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```python\n(.*?)```", section, flags=re.S) == python_blocks(DOCS / "python.md")[:1]


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
    assert "\npip install -e . && evroute simulate\n" in readme
    assert '\npip install -e ".[test]" && python -m pytest -q\n' in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_every_page_is_in_the_navigation_and_every_figure_exists():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, page
    for page in DOCS.rglob("*.md"):
        for fig in re.findall(r"\]\(([^)]*figures/[^)]+\.png)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / fig).resolve().is_file(), (page, fig)


@pytest.mark.needs("docs")
def test_the_site_builds_strictly(tmp_path):
    """(Skipped without the docs extra; ``.ci/run`` installs it and builds the site itself.)"""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    # the pages speak to users: no raw Sphinx role, no internal reference, no escaped table pipe
    internal = re.compile(r":(?:class|func|meth|data|attr|mod|exc):`|SPEC §|spec/[\w-]+\.md|\bspec 00\d|wave2|"
                          r"\bwave\b|pipeline \d|\.\./shared|slower day|\\\|")
    found = {}
    for page in (tmp_path / "site").rglob("*.html"):
        text = html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))
        hits = sorted(set(internal.findall(text)))
        if hits:
            found[str(page.relative_to(tmp_path / "site"))] = hits
    assert found == {}
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert api.count('href="#evroute.') > 100  # the roles became links


def test_the_docstring_examples_run(tmp_path, monkeypatch):
    """Every `>>>` example of the package's docstrings (doctest), in a scratch folder."""
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    modules = sorted({".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "evroute").rglob("*.py")
                      if ">>>" in p.read_text(encoding="utf-8")})
    assert modules
    for name in modules:
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name


def test_every_public_function_says_what_it_returns():
    """The package's names and every function of the API reference (docs/api.md) have a numpy
    Returns section, except those that return nothing (the registrations)."""
    import importlib
    import inspect

    listed = re.findall(r"^::: (evroute[\w.]*)$", (ROOT / "docs" / "api.md").read_text(), flags=re.M)
    objects = {name: getattr(evroute, name) for name in sorted(set(evroute.__all__) - {"__version__"})}
    for dotted in listed:
        module, _, attr = dotted.rpartition(".")
        objects[dotted] = getattr(importlib.import_module(module), attr, None) if module != "evroute" else None
    for name, obj in objects.items():
        if not inspect.isfunction(obj) or inspect.signature(obj).return_annotation in ("None", None):
            continue
        assert "Returns\n-------" in (inspect.getdoc(obj) or ""), f"{name} does not say what it returns"


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


#: The most words a documentation page may have (``str.split``, as ``wc -w`` counts them).
MAX_WORDS = 4000


def test_no_page_is_over_four_thousand_words():
    """A page states current results once; a page that grows past this is several pages."""
    words = {str(p.relative_to(DOCS)): len(p.read_text(encoding="utf-8").split()) for p in _pages()}
    assert {page: n for page, n in words.items() if n > MAX_WORDS} == {}


#: A path into the checkout's own folders, which ``pip install evroute`` does not ship (a link to
#: a documentation page such as ``reproductions/sumo.md`` is not one).
CHECKOUT_PATH = re.compile(r"(?<![\w./-])(?:scripts|tests|benchmarks|reproductions)/(?![\w-]+\.md\b)")


def _outside_from_a_checkout(path: Path) -> list[str]:
    """The lines of a Markdown file that name a checkout path outside every section headed
    "From a checkout" (headings inside fenced code are not headings)."""
    found, headings, fenced = [], [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#{1,6}) (.*)", line)
        if heading:
            level = len(heading[1])
            headings = [(lv, title) for lv, title in headings if lv < level] + [(level, heading[2])]
        elif CHECKOUT_PATH.search(line) and not any("From a checkout" in title for _, title in headings):
            found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    return found


def test_the_pages_name_the_checkouts_folders_only_from_a_checkout():
    """pip install ships neither the tests nor the benchmarks nor the reproductions: the pages and
    the README name them only under a heading "From a checkout"."""
    found = [hit for page in [*_pages(), ROOT / "README.md"] for hit in _outside_from_a_checkout(page)]
    assert found == []


def test_no_page_names_a_path_of_the_machine_it_was_written_on():
    machine = re.compile(r"(?<![\w.])/(?:tmp|work|home|root|Users)/")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in [*_pages(), ROOT / "README.md"]
             for m in machine.finditer(p.read_text(encoding="utf-8"))]
    assert found == []
