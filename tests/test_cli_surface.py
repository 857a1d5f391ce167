"""The command line's surface, walked through click's API (typer's app as click commands, their
parameters as click parameters, never the help's text parsed): few options, one-line helps
grouped in panels, no issue numbers, a flag that means one thing wherever it is, and every
setting that has no flag of its own still settable and documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from evroute.cli import COMMANDS, app
from evroute.cli.options import PANELS
from evroute.presets import PRESETS, ConfigFile
from evroute.runs.grid import read_config_file
from evroute.settings import CONFIG_ONLY, FOLDED, FOLDS, RUN_SETTINGS, spelling, unfold_settings

ROOT = Path(__file__).resolve().parent.parent

#: The most options a command takes (its --help counted, as in its help).
MAX_OPTIONS = 25
#: The most characters of an option's help (one line).
MAX_OPTION_HELP = 100
#: The most lines of a command's --help at 100 columns.
MAX_HELP_LINES = 80
#: Flags whose help differs by command, and why.
PER_COMMAND = {"--out": "what is written differs", "--kernel": "prior check fits the lengthscale: combined or graph"}


def _commands():
    """Every command of the app: (its path, the click command, its context)."""
    root = typer.main.get_command(app)
    out = []

    def walk(command, path, parent):
        ctx = command.context_class(command, info_name=path[-1] if path else "evroute", parent=parent,
                                    terminal_width=100, max_content_width=100)
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name], ctx)
        else:
            out.append((" ".join(path), command, ctx))

    walk(root, [], None)
    return out


COMMANDS_WALKED = _commands()
IDS = [path for path, _, _ in COMMANDS_WALKED]


def _options(command, ctx):
    return [p for p in command.get_params(ctx) if p.param_type_name == "option"]


def test_every_command_is_walked():
    assert {p.split()[0] for p in IDS} == set(COMMANDS)
    assert {"simulate", "compare", "route", "sumo atlas", "drives import", "prior check"} <= set(IDS)


@pytest.mark.parametrize("path,command,ctx", COMMANDS_WALKED, ids=IDS)
def test_a_command_has_at_most_25_options(path, command, ctx):
    names = [p.opts[0] for p in _options(command, ctx)]
    assert len(names) <= MAX_OPTIONS, f"{path}: {len(names)} options: {', '.join(names)}"


@pytest.mark.parametrize("path,command,ctx", COMMANDS_WALKED, ids=IDS)
def test_option_helps_are_one_short_line(path, command, ctx):
    for p in _options(command, ctx):
        text = p.help or ""
        assert text.strip(), f"{path} {p.opts[0]} has no help"
        assert "\n" not in text and len(text) <= MAX_OPTION_HELP, f"{path} {p.opts[0]}: {len(text)} characters: {text}"


def _all_help_texts(command, ctx) -> list[str]:
    texts = [command.help or "", command.short_help or "", command.get_help(ctx)]
    return texts + [getattr(p, "help", None) or "" for p in command.get_params(ctx)]


@pytest.mark.parametrize("path,command,ctx", COMMANDS_WALKED, ids=IDS)
def test_no_issue_numbers_or_history_in_help(path, command, ctx):
    history = re.compile(r"\bissues?\s*#?\s*\d+|\b(formerly|previously|no longer|used to|renamed|deprecated)\b|"
                         r"\bsince (v\d|version|\d{4})", re.I)
    for text in _all_help_texts(command, ctx):
        found = history.search(text)
        assert found is None, f"{path}: {found.group(0)!r} in {text[:200]!r}"


@pytest.mark.parametrize("path,command,ctx", COMMANDS_WALKED, ids=IDS)
def test_help_fits_in_80_lines_at_100_columns(path, command, ctx):
    lines = command.get_help(ctx).splitlines()
    assert len(lines) <= MAX_HELP_LINES, f"{path}: {len(lines)} lines"
    assert max(len(line) for line in lines) <= 100


@pytest.mark.parametrize("path", ["simulate", "compare"])
def test_simulate_and_compare_group_their_options_in_panels(path):
    _, command, ctx = next(c for c in COMMANDS_WALKED if c[0] == path)
    for p in _options(command, ctx):
        if p.opts[0] != "--help":
            assert getattr(p, "rich_help_panel", None) in PANELS, f"{path} {p.opts[0]}: no panel"
    text = command.get_help(ctx)
    starts = [text.index(f"\n{panel}:\n") for panel in PANELS]
    assert starts == sorted(starts)


def _without_default(text: str) -> str:
    return re.sub(r"\s*\(default[^)]*\)", "", text)


def test_a_flag_means_one_thing_in_every_command():
    """A flag several commands take has one help (its default aside), declared once."""
    helps: dict[str, dict[str, str]] = {}
    for path, command, ctx in COMMANDS_WALKED:
        for p in _options(command, ctx):
            for flag in p.opts + p.secondary_opts:
                helps.setdefault(flag, {})[path] = _without_default(p.help or "")
    for flag, by_command in helps.items():
        if flag in PER_COMMAND or flag == "--help":
            continue
        assert len(set(by_command.values())) == 1, f"{flag} differs: {by_command}"


def test_the_network_is_an_option_where_the_command_works_on_something_else():
    for path, command, ctx in COMMANDS_WALKED:
        arguments = [p.name for p in command.get_params(ctx) if p.param_type_name == "argument"]
        if not path.startswith("networks "):
            assert not {"network", "name"} & set(arguments) or path.startswith(("data ", "vehicles ")), (path, arguments)
    flags = {path: {f for p in _options(command, ctx) for f in p.opts} for path, command, ctx in COMMANDS_WALKED}
    for path in ("simulate", "route", "sumo atlas", "sumo drives", "drives import", "prior check"):
        assert "--network" in flags[path], path


def test_vehicle_and_fleet_vehicle_are_two_things():
    """--vehicle: the vehicle driven (the agents', the routes'); --fleet-vehicle: the one that drove traces."""
    flags = {path: {f for p in _options(command, ctx) for f in p.opts} for path, command, ctx in COMMANDS_WALKED}
    for path in ("drives import", "sumo drives"):
        assert "--fleet-vehicle" in flags[path] and "--vehicle" not in flags[path], path
    assert {"--vehicle", "--fleet-vehicle"} <= flags["prior check"]
    assert "--seed" not in flags["sumo atlas"] and "--atlas-seed" in flags["sumo atlas"]


@pytest.mark.parametrize("path", ["simulate", "compare"])
def test_config_and_preset_are_options_of_both(path):
    _, command, ctx = next(c for c in COMMANDS_WALKED if c[0] == path)
    flags = {f for p in _options(command, ctx) for f in p.opts}
    assert {"--config", "--preset"} <= flags


def test_every_folded_setting_is_settable_in_a_spec_and_a_config_file():
    commands = (ROOT / "docs" / "guide" / "commands.md").read_text(encoding="utf-8")
    for name, (head, key) in FOLDED.items():
        flag = RUN_SETTINGS[head].cli_flag
        value = "closures=random[rate=0.1]" if name == "closures" else f"{key}=1"
        given = unfold_settings({head: f"x[{value}]"})
        assert name in given and given[head] == "x", name
        assert ConfigFile.from_dict({name: "1"}).settings[name] == "1"
        assert f"{key}=" in commands and flag in commands, f"{spelling(name)} is not in docs/guide/commands.md"
    for name in CONFIG_ONLY:
        assert ConfigFile.from_dict({name: 10}).settings[name] == 10
        assert name in commands, f"{name} is not in docs/guide/commands.md"
    assert set(FOLDED) == {s for keys in FOLDS.values() for s in keys.values()}
    assert unfold_settings({"route": "43.7,7.4:43.8,7.5"}) == {"route": None, "from_point": "43.7,7.4",
                                                               "to_point": "43.8,7.5"}


def test_a_preset_is_a_config_file(tmp_path):
    """Each preset is a typed config file: written as JSON and read back, it is the same."""
    import json

    for name, preset in PRESETS.items():
        assert isinstance(preset, ConfigFile) and preset.description
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(preset.to_dict()))
        again = read_config_file(path)
        for field in ("routes", "policies", "seeds", "lengthscales", "description"):
            assert getattr(again, field) == getattr(preset, field), (name, field)
        assert dict(again.settings) == dict(preset.settings)
        assert read_config_file(name) is preset


def test_a_config_file_is_checked_when_read(tmp_path):
    from evroute.errors import EvrouteError

    for text, phrase in (('{"horizon": 3, "bogus": 1}', "unknown setting(s) bogus"),
                         ('{"routes": 3}', "routes must be a non-empty list"),
                         ('{"seeds": "five"}', "seeds must be a whole number"),
                         ('{"kernel": "combined[nu=1]", "nu": 2}', "given twice"),
                         ("[1, 2]", "not an object"), ("{", "not a readable configuration")):
        path = tmp_path / "c.json"
        path.write_text(text)
        with pytest.raises(EvrouteError, match=re.escape(phrase)):
            read_config_file(path)


def _doc_commands() -> list[tuple[str, str]]:
    """Every ``evroute ...`` line of the docs and the README: in bash blocks, and as inline code."""
    import shlex

    found = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        lines = []
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            lines += [x.strip() for x in block.replace("\\\n", " ").splitlines()]
        lines += [" ".join(x.split()) for x in re.findall(r"`(evroute [^`]+)`", re.sub(r"```.*?```", "", text,
                                                                                             flags=re.S))]
        for line in lines:
            if not line.startswith("evroute "):
                continue
            try:
                found.append((f"{page.relative_to(ROOT)}: {line}", shlex.split(line, comments=True)))
            except ValueError:
                found.append((f"{page.relative_to(ROOT)}: {line}", line.split("#")[0].split()))
    return found


def test_the_docs_commands_use_only_options_their_command_has():
    flags = {path: {f for p in _options(command, ctx) for f in (*p.opts, *p.secondary_opts)}
             for path, command, ctx in COMMANDS_WALKED}
    groups = {path.split()[0] for path in flags if " " in path}
    bad = []
    for where, words in _doc_commands():
        path = " ".join(words[1:3]) if len(words) > 2 and words[1] in groups else (words[1] if len(words) > 1 else "")
        if path not in flags:
            continue  # (a command group's help, or prose)
        for word in words[2:]:
            word = word.strip("[]|.,;:()")
            if word.startswith("--") and word.split("=")[0] not in flags[path]:
                bad.append(f"{where} ({word.split('=')[0]})")
    assert bad == []


def test_the_config_file_of_the_docs_is_valid():
    """docs/guide/commands.md's example config file reads, and its grid is made (on the embedded
    city instead of its routes)."""
    import tomllib

    from evroute.runs.grid import make_grid

    text = (ROOT / "docs" / "guide" / "commands.md").read_text(encoding="utf-8")
    block = re.findall(r"```toml\n(.*?)```", text, flags=re.S)[0]
    cf = ConfigFile.from_dict(tomllib.loads(block), name="commands.md")
    grid = make_grid(preset=cf, routes="synthetic:A")
    assert grid.base.drift == 0.01 and grid.base.exact_optimum_time_limit == 60 and grid.lengthscales == [0.5]
    assert [v for _, v in grid.sweeps] == [(1.0, 2.0, 3.0)] and len(grid.cells()) == 2 * 5 * 3
