"""Bad input, as a new user would type it, across every command: each case must end with exit
code 2 and exactly one ``error:`` line (warnings aside), no traceback, and every file that was
in the working folder before (a user's notes, a link, a pipe, finished runs, a compare
directory, damaged runs) byte-identical afterwards, links still links, nothing new.

Cases run in-process through :func:`evroute.cli.main` (its exit code and stderr are the
command's), in a fresh copy of a working folder each; a sample runs again in subprocesses,
where a traceback would reach the terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.runs.config import SimulationConfig


def _snapshot(root: Path) -> dict:
    """Every entry below ``root``: (kind, content) with links as their target, pipes as kind only."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st_ = os.lstat(p)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", None)
            elif stat.S_ISREG(st_.st_mode):
                out[rel] = ("file", p.read_bytes())
            else:
                out[rel] = ("special", stat.S_IFMT(st_.st_mode))
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
    return out


def _damage(src: Path, dest: Path, **files) -> None:
    shutil.copytree(src, dest)
    for name, content in files.items():
        path = dest / name.replace("__", ".")
        if isinstance(content, pd.DataFrame):
            content.to_parquet(path)
        else:
            path.write_text(content)


@pytest.fixture(scope="session")
def template(tmp_path_factory):
    """A working folder: a user's files, finished evroute outputs and damaged ones."""
    root = tmp_path_factory.mktemp("workdir")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main(["simulate", "--policy", "gp-ucb", "--horizon", "3", "--out", "run", "--no-progress"]) == 0
        assert main(["compare", "--routes", "A", "--policies", "gp-ts", "--seeds", "1", "--horizon", "3",
                     "--jobs", "1", "--out", "cmp", "--no-progress"]) == 0
    finally:
        os.chdir(cwd)
    (root / "notes.txt").write_text("my notes\n")
    (root / "link.geojson").symlink_to("notes.txt")
    (root / "dangling.geojson").symlink_to("nowhere.geojson")
    (root / "adir").mkdir()
    (root / "adir" / "user.txt").write_text("mine\n")
    (root / "adir" / "regret.png").write_bytes(b"\x89PNG\r\n\x1a\n not evroute's")
    (root / "link-dir").symlink_to("adir")
    (root / "empty.osm").write_text("")
    (root / "garbage.osm").write_text("this is not XML")
    (root / "city.osm.gz").write_bytes(b"\x1f\x8b compressed")
    (root / "notes.tif").write_text("not a raster")
    vehicles = {"big": '{"base": "sumo-ev", "mass_kg": 1' + "0" * 400 + "}",
                "huge": '{"base": "sumo-ev", "mass_kg": 1' + "0" * 5000 + "}",
                "nan": '{"base": "sumo-ev", "mass_kg": NaN}', "absurd": '{"base": "sumo-ev", "mass_kg": 1e300}',
                "list": "[1, 2]", "text": '{"base": "sumo-ev", "mass_kg": "heavy"}',
                "badbase": '{"base": "nope", "mass_kg": 1000}', "partial": '{"mass_kg": 1000}',
                "unknown": '{"base": "sumo-ev", "wings": 2}', "negative": '{"base": "sumo-ev", "g": -9.81}',
                "eta": '{"base": "sumo-ev", "eta_plus": 1.5}', "broken": '{"base": ',
                "negaux": '{"base": "sumo-ev", "aux_power_w": -5}'}
    for name, text in vehicles.items():
        (root / f"{name}.json").write_text(text)
    (root / "cands-empty.json").write_text('{"candidates": []}')
    (root / "cands-bad.json").write_text('{"candidates": [{"vehicle": "nope"}]}')
    (root / "cands-opt.json").write_text('{"candidates": [{"vehicle": "sumo-ev", "eps": 2}]}')
    (root / "limit-0.json").write_text('{"exact_optimum_time_limit": 0}')
    (root / "limit-huge.json").write_text('{"exact_optimum_time_limit": 1e300}')
    (root / "cfg-unknown.json").write_text('{"horizon": 3, "wings": 2}')
    (root / "cfg-list.json").write_text("[1, 2]")
    (root / "cfg-bad.toml").write_text("horizon = ")
    (root / "cfg-twice.json").write_text('{"truth": "gp[drift=0.1]", "drift": 0.2}')
    (root / "cfg-points.json").write_text('{"route": "43.73,7.42:43.74,7.43"}')
    run = root / "run"
    edges = pd.read_parquet(run / "edges.parquet")
    rounds = pd.read_parquet(run / "rounds.parquet")
    _damage(run, root / "bad-summary-list", summary__json="[1]")
    _damage(run, root / "bad-summary-empty", summary__json="{}")
    summary = json.loads((run / "summary.json").read_text())
    _damage(run, root / "bad-summary-types", summary__json=json.dumps({**summary, "final_cumulative_regret_wh": "x"}))
    _damage(run, root / "bad-summary-path", summary__json=json.dumps({**summary, "optimal_path": [10**9]}))
    _damage(run, root / "bad-config", config__json="{")
    _damage(run, root / "bad-config-list", config__json="[1]")
    _damage(run, root / "bad-edges", edges__parquet=pd.DataFrame({"a": [1], "b": [2]}))
    _damage(run, root / "bad-edges-types", edges__parquet=edges.assign(visits=edges.visits.astype(str)))
    _damage(run, root / "bad-rounds", rounds__parquet=rounds.head(2))
    _damage(run, root / "bad-route", rounds__parquet=rounds.assign(path=[[10**9]] * len(rounds)))
    (root / "bad-truncated").mkdir()
    for f in run.iterdir():
        shutil.copy(f, root / "bad-truncated" / f.name)
    data = (root / "bad-truncated" / "observations.parquet").read_bytes()
    (root / "bad-truncated" / "observations.parquet").write_bytes(data[: len(data) // 2])
    (root / "bad-grid").mkdir()
    (root / "bad-grid" / "grid.json").write_text("[1]")
    # a fleet's drives, its prior file (for the van), a damaged one and an import of an earlier evroute
    from evroute.roads.network import load_network

    from .conftest import fleet_table, make_prior_file, write_drives_import

    net = load_network("synthetic")
    table = fleet_table(net, trips=8, seed=1)
    write_drives_import(root / "fleet-drives", net, table)
    make_prior_file(root / "adir", net, table, name="prior.json", residual_sd=0.0,
                    fitted={"prior_std": 20.0, "noise_std": 5.0, "lengthscale": 1.0})
    shutil.move(root / "adir" / "prior.json", root / "prior.json")
    shutil.rmtree(root / "adir" / "drives-prior.json")
    (root / "bad-prior.json").write_text((root / "prior.json").read_text()[:300])
    (root / "old-drives").mkdir()
    table.to_parquet(root / "old-drives" / "traversals.parquet")
    (root / "old-drives" / "report.json").write_text('{"network": "my-city", "vehicle": "sumo-ev"}')
    shutil.copytree(root / "old-drives", root / "old-car")
    (root / "old-car" / "report.json").write_text('{"network": "synthetic", "vehicle": "my-car"}')
    shutil.copytree(root / "fleet-drives", root / "moved-drives")
    report = json.loads((root / "fleet-drives" / "report.json").read_text())
    report["network"]["fingerprint"] = "synthetic-0123456789ab"
    (root / "moved-drives" / "report.json").write_text(json.dumps(report))
    return root


@pytest.fixture
def workdir(template, tmp_path, monkeypatch):
    root = tmp_path / "w"
    shutil.copytree(template, root, symlinks=True)
    os.mkfifo(root / "pipe")  # (copytree cannot copy a pipe)
    monkeypatch.chdir(root)
    return root


M = "monaco"  # a real network (the data folder)
#: The cases that load a real network (skipped without the reference data)
LOADS_REAL: set[tuple] = set()


def real(*args: str) -> list[str]:
    """A case's arguments that load the real network ``M`` (``evroute data fetch``)."""
    LOADS_REAL.add(args)
    return list(args)


OUT = ["--out", "new-run"]
SIM = ["simulate", "--horizon", "3", "--no-progress"]
CMP = ["compare", "--out", "new-cmp", "--horizon", "3", "--seeds", "1", "--jobs", "1", "--no-progress"]
DRV = ["drives", "import", "nope.csv", "--network", "synthetic", "--out", "new-drives", "--no-progress"]

#: (arguments, a phrase the one error line must hold)
CASES = [
    # ---- general usage
    (["nope"], "No such command"),
    (["simulate", "--no-such-option"], "No such option"),
    (["simulate", "--csv=1"], "does not take a value"),
    (["simulate", "--horizon"], "requires an argument"),
    (["models", "extra"], "unexpected extra argument"),
    (["networks", "frobnicate"], "No such command"),
    # ---- networks info
    (["networks", "info", "atlantis"], "unknown network"),
    (["networks", "info", "/nonexistent/x.osm"], "not found"),
    (["networks", "info", "notes.txt"], "not an OSM"),
    (["networks", "info", "city.osm.gz"], "compressed"),
    (["networks", "info", "garbage.osm"], "not an OSM XML"),
    (["networks", "info", "empty.osm"], "empty.osm"),
    (["networks", "info", "adir"], "adir"),
    (["networks", "info", "synthetic-0.1k"], "at least 0.5k"),
    (["networks", "info", "synthetic-99999999k"], "memory"),
    (["networks", "info", "--dem", "/nonexistent.tif"], "DEM file not found"),
    (["networks", "info", "--dem", "notes.tif"], "notes.tif"),
    (["networks", "info", "--vehicle", "hovercraft"], "unknown vehicle"),
    (["networks", "info", "--vehicle", "big.json"], "mass_kg"),
    (["networks", "info", "--vehicle", "huge.json"], "huge.json"),
    (["networks", "info", "--vehicle", "nan.json"], "mass_kg"),
    (["networks", "info", "--vehicle", "absurd.json"], "mass_kg"),
    (["networks", "info", "--vehicle", "list.json"], "JSON object"),
    (["networks", "info", "--vehicle", "text.json"], "must be a number"),
    (["networks", "info", "--vehicle", "badbase.json"], "unknown base"),
    (["networks", "info", "--vehicle", "partial.json"], "missing parameter"),
    (["networks", "info", "--vehicle", "unknown.json"], "wings"),
    (["networks", "info", "--vehicle", "negative.json"], "g must be"),
    (["networks", "info", "--vehicle", "eta.json"], "eta_plus"),
    (["networks", "info", "--vehicle", "broken.json"], "not valid JSON"),
    (["networks", "info", "--vehicle", "missing.json"], "not found"),
    (["networks", "info", M, "--osm", "adir"], "not found"),
    (["networks", "info", "--osm", "garbage.osm"], "generated by code"),
    # ---- networks fetch
    (["networks", "fetch", "synthetic"], "nothing to fetch"),
    (["networks", "fetch", "atlantis"], "unknown network"),
    (["networks", "fetch", "monaco", "--force", "--overpass-url", "notaurl"], "--overpass-url must be"),
    (["networks", "fetch", "monaco", "--force", "--elevation-url", "ftp://x"], "--elevation-url must be"),
    (["networks", "fetch", "monaco", "--force", "--overpass-url", "http://127.0.0.1:9/api"], "cannot reach"),
    # ---- networks osm
    (["networks", "osm", "monaco", "--out", "m.osm"], "only synthetic"),
    (["networks", "osm", "synthetic", "--out", "notes.txt"], "not written by evroute"),
    (["networks", "osm", "synthetic", "--out", "link.geojson", "--overwrite"], "symbolic link"),
    (["networks", "osm", "synthetic", "--out", "dangling.geojson"], "symbolic link"),
    (["networks", "osm", "synthetic", "--out", "adir"], "directory"),
    (["networks", "osm", "synthetic", "--out", "pipe", "--overwrite"], "named pipe"),
    (["networks", "osm", "synthetic", "--out", "notes.txt/x.osm"], "not a directory"),
    (["networks", "osm", "synthetic", "--out", "run/config.json", "--overwrite"], "run's own files"),
    (["networks", "osm", "synthetic-99999k", "--out", "x.osm"], "built from arrays"),
    (["networks", "osm", "synthetic"], "Missing option"),
    # ---- route
    (["route", "--route", "Q"], "unknown route"),
    (real("route", "--network", M, "--route", "Z"), "unknown route"),
    (["route", "--route", "1,1:2,2"], "outside"),
    (["route", "--route", "oops,1:2,2"], "LAT,LON"),
    (["route", "--route", "91,0:0,0"], "latitude"),
    (["route", "--route", "nan,nan:0,0"], "latitude"),
    (["route", "--route", "1,1"], "two points are LAT,LON:LAT,LON"),
    (["route", "--route", "1,1:2,2:3,3"], "two points are LAT,LON:LAT,LON"),
    (["route", "monaco"], "the network is --network NAME"),
    (["route", "--from", "1,1"], "write --route LAT,LON:LAT,LON"),
    (real("route", "--network", M, "--route", "43.7350,7.4230:43.7350,7.4230"), "same edge"),
    (["route", "--vehicle", "absurd.json"], "mass_kg"),
    (["route", "--geojson", "notes.txt"], "not written by evroute"),
    (["route", "--geojson", "link.geojson", "--overwrite"], "symbolic link"),
    (["route", "--geojson", "adir"], "directory"),
    (["route", "--geojson", "pipe"], "named pipe"),
    (["route", "--geojson", "notes.txt/r.geojson"], "not a directory"),
    (["route", "--geojson", "run/rounds.parquet", "--overwrite"], "run's own files"),
    (["route", "--geojson", "cmp/grid.json", "--overwrite"], "compare directory"),
    (["route", "--geojson", "-", "--json"], "standard output"),
    (["route", "--html", "notes.txt"], "not written by evroute"),
    (["route", "--html", "adir"], "directory"),
    (["route", "--html", "run/rounds.parquet", "--overwrite"], "run's own files"),
    (["route", "--geojson", "x.geojson", "--html", "x.geojson"], "same file"),
    (["route", "--prior", "nope.json"], "no such prior file"),
    (["route", "--prior", "bad-prior.json"], "not JSON"),
    (["route", "--prior", "prior.json", "--vehicle", "compact-ev"], "made for the vehicle"),
    (["route", "--network", "synthetic-1k", "--prior", "prior.json"], "made for the network"),
    (["route", "--prior", "cands-empty.json"], "not a prior file"),
    # ---- simulate: specs
    ([*SIM, "--policy", "gp-magic"], "unknown policy"),
    ([*SIM, "--policy", "gp-ucb[beta=004]"], "beta"),
    ([*SIM, "--policy", "gp-ts[xi=0.5]"], "xi"),
    ([*SIM, "--policy", "gp-ucb["], "cannot parse"),
    ([*SIM, "--policy", "gp-ucb[beta_scale=-1]"], "beta_scale"),
    ([*SIM, "--policy", "gp-ucb[beta_scale=nan]"], "beta_scale"),
    ([*SIM, "--policy", "gp-bucb[xi=abc]"], "xi"),
    ([*SIM, "--policy", "gp-ts[joint=maybe]"], "joint"),
    ([*SIM, "--policy", "gp-pe[delta=2]", "--horizon", "1"], "delta"),
    ([*SIM, "--policy", "gp-amm[b=-1]"], "must be"),
    ([*SIM, "--model", "exact[merge=often]"], "unknown merge 'often'"),
    ([*SIM, "--model", "exact[rank=3]"], "unknown option(s) for model 'exact'"),
    ([*SIM, "--model", "svgp[inducing=0]"], "inducing"),
    ([*SIM, "--model", "svgp[inducing=abc]"], "inducing"),
    ([*SIM, "--model", "nonsense"], "unknown model"),
    ([*SIM, "--model", "nystrom[gamma=-1]"], "gamma"),
    ([*SIM, "--inducing", "4"], "no such option: --inducing"),  # svgp's options live in its spec only
    ([*SIM, "--policy", "bi-ts", "--model", "svgp"], "--model svgp"),
    # ---- simulate: numbers
    ([*SIM, "--horizon", "0"], "horizon"),
    ([*SIM, "--horizon", "-1"], "horizon"),
    ([*SIM, "--horizon", "1e3"], "--horizon must be an integer"),
    ([*SIM, "--horizon", "999999999999"], "100,000,000"),
    ([*SIM, "--seed", "-1"], "seed"),
    ([*SIM, "--seed", "9999999999999999999999"], "seed"),
    ([*SIM, "--seed", "abc"], "--seed must be an integer"),
    ([*SIM, "--kernel", "combined[kappa=0]"], "--kernel kappa"),
    ([*SIM, "--kernel", "combined[kappa=-1]"], "--kernel kappa"),
    ([*SIM, "--kernel", "combined[kappa=1e-300]"], "--kernel kappa"),
    ([*SIM, "--kernel", "graph[kappa=1e300]"], "--kernel kappa"),
    ([*SIM, "--kernel", "combined[kappa=nan]"], "--kernel kappa"),
    ([*SIM, "--kernel", "combined[kappa=inf]"], "--kernel kappa"),
    ([*SIM, "--kernel", "combined[nu=0]"], "--kernel nu"),
    ([*SIM, "--kernel", "combined[nu=10000]"], "--kernel nu"),
    ([*SIM, "--kernel", "combined[nu=1000]"], "--kernel nu"),
    ([*SIM, "--kernel", "combined[nu=-2]"], "--kernel nu"),
    ([*SIM, "--kernel", "combined[nu=nan]"], "--kernel nu"),
    ([*SIM, "--kernel", "combined[lengthscale=0]"], "--kernel lengthscale"),
    ([*SIM, "--kernel", "context[lengthscale=1e-300]"], "--kernel lengthscale"),
    ([*SIM, "--kernel", "combined[lengthscale=1e300]"], "--kernel lengthscale"),
    ([*SIM, "--kernel", "combined[lengthscale=inf]"], "--kernel lengthscale"),
    ([*SIM, "--kernel", "combined[ell=1]"], "unknown option(s) ell=1 (accepted: lengthscale, kappa, nu)"),
    ([*SIM, "--kernel", "combined[nu=1"], "--kernel"),
    ([*SIM, "--kappa", "1"], "write --kernel KIND[kappa=...]"),
    ([*SIM, "--truth", "gp[lengthscale=0]"], "--truth lengthscale"),
    ([*SIM, "--truth", "gp[lengthscale=1e300]"], "--truth lengthscale"),
    ([*SIM, "--truth", "gp[lengthscale=same]"], "--truth lengthscale"),
    ([*SIM, "--truth-lengthscale", "1"], "write --truth NAME[lengthscale=...]"),
    ([*SIM, "--omega", "-1"], "no such option: --omega"),  # the policy's options live in its spec only
    ([*SIM, "--policy", "gp-bucb[omega=-1]"], "omega"),
    ([*SIM, "--policy", "gp-bucb[xi=nan]"], "xi"),
    ([*SIM, "--policy", "gp-ucb[bs=-1]"], "beta_scale"),
    ([*SIM, "--config", "limit-0.json"], "exact_optimum_time_limit"),
    ([*SIM, "--config", "limit-huge.json"], "exact_optimum_time_limit"),
    ([*SIM, "--exact-optimum-time-limit", "60"], "exact_optimum_time_limit in a --config file"),
    ([*SIM, "--blas-threads", "-1"], "--blas-threads"),
    ([*SIM, "--blas-threads", "100000"], "--blas-threads"),
    ([*SIM, "--truth", "gp[drift=1]"], "--truth drift"),
    ([*SIM, "--truth", "gp[drift=-0.1]"], "--truth drift"),
    ([*SIM, "--truth", "gp[drift=nan]"], "--truth drift"),
    ([*SIM, "--truth", "lognormal[drift=0.1]", "--turns", "physics[kernel=fixed,x=1]"], "--turns"),
    ([*SIM, "--turns", "fleet"], "--turns"),
    ([*SIM, "--turns", "physics[kernel=learnt]"], "--turns kernel"),
    # ---- simulate: kinds, truths, environments, priors
    ([*SIM, "--kernel", "foo"], "kernel"),
    ([*SIM, "--truth", "foo"], "unknown truth"),
    ([*SIM, "--truth", "rkhs"], "needs b"),
    ([*SIM, "--truth", "rkhs[B=-1]"], "b must be"),
    ([*SIM, "--truth", "rkhs[B=10,anchors=0]"], "anchors"),
    ([*SIM, "--truth", "rkhs[B=10,anchors=100000]"], "anchors"),
    ([*SIM, "--truth", "rkhs[B=10,x=1]"], "unknown option"),
    ([*SIM, "--truth", "gp[closures=foo]"], "unknown closures"),
    ([*SIM, "--truth", "gp[closures=random[rate=1]]"], "rate"),
    ([*SIM, "--truth", "gp[closures=random[rate=0]]"], "rate"),
    ([*SIM, "--truth", "gp[closures=random[x=1]]"], "unknown option"),
    ([*SIM, "--closures", "alternate"], "write --truth NAME[closures=...]"),
    ([*SIM, "--priors", ""], "--priors is empty"),
    ([*SIM, "--priors", "hovercraft"], "unknown vehicle"),
    ([*SIM, "--priors", "nope.json"], "not found"),
    ([*SIM, "--priors", "sumo-ev,sumo-ev"], "twice"),
    ([*SIM, "--priors", "sumo-ev[eps=1]"], "eps"),
    ([*SIM, "--priors", "sumo-ev[foo=1]"], "unknown option"),
    ([*SIM, "--priors", "cands-empty.json"], "non-empty list"),
    ([*SIM, "--priors", "cands-bad.json"], "unknown vehicle"),
    ([*SIM, "--priors", "cands-opt.json"], "eps"),
    ([*SIM, "--truth", "gp[prior=hovercraft]"], "unknown vehicle"),
    ([*SIM, "--vehicle", "big.json"], "mass_kg"),
    ([*SIM, "--vehicle", "absurd.json"], "mass_kg"),
    # ---- simulate: where it writes
    ([*SIM, "--out", "notes.txt"], "not a directory"),
    ([*SIM, "--out", "link-dir"], "symbolic link"),
    ([*SIM, "--out", "dangling.geojson"], "symbolic link"),
    ([*SIM, "--out", "adir"], "not empty"),
    ([*SIM, "--out", "adir", "--overwrite"], "not an evroute run directory"),
    ([*SIM, "--out", "."], "current directory"),
    ([*SIM, "--out", ".."], "current directory"),
    ([*SIM, "--out", "notes.txt/run"], "not a directory"),
    ([*SIM, "--out", "run"], "not empty"),
    ([*SIM, "--out", "cmp", "--overwrite"], "not an evroute run directory"),
    ([*SIM, "--out", "pipe"], "not a directory"),
    # ---- simulate: a run's configuration again
    ([*SIM, "--config", "nope.json"], "no such configuration"),
    ([*SIM, "--config", "notes.txt"], "not a readable configuration"),
    ([*SIM, "--config", "adir"], "no such configuration"),
    ([*SIM, "--preset", "nope"], "no such configuration"),
    ([*SIM, "--config", "cfg-unknown.json"], "unknown setting(s) wings"),
    ([*SIM, "--config", "cfg-list.json"], "not an object"),
    ([*SIM, "--config", "cfg-bad.toml"], "not a readable configuration"),
    ([*SIM, "--config", "cfg-twice.json"], "given twice"),
    # ---- data
    (["data", "fetch", "atlantis"], "unknown dataset 'atlantis'"),
    (["data", "path", "atlantis"], "unknown dataset 'atlantis'"),
    (["data", "fetch", "monaco", "--data-dir", "notes.txt/data"], "notes.txt"),
    (["data", "path", "monaco", "--data-dir", "adir"], "evroute data fetch monaco"),
    # ---- simulate: networks and routes
    ([*SIM, "--network", "atlantis"], "unknown network"),
    ([*SIM, "--network", "notes.txt"], "not an OSM"),
    ([*SIM, "--network", "city.osm.gz"], "compressed"),
    ([*SIM, "--osm", "/nonexistent.osm", "--network", M], "not found"),
    ([*SIM, "--dem", "/nonexistent.tif"], "not found"),
    ([*SIM, "--route", "Z"], "unknown route"),
    (real(*SIM, "--network", M, "--route", "43.7350,7.4230:43.7350,7.4230"), "same edge"),
    ([*SIM, "--route", "0,0:1,1"], "outside"),
    # ---- compare
    (["compare"], "Missing option"),
    ([*CMP, "--preset", "nope"], "no such configuration"),
    ([*CMP, "--network", M], "write --routes NETWORK:ROUTE"),
    ([*CMP, "--config", "cfg-points.json"], "named routes"),
    ([*CMP, "--seeds", "0"], "--seeds"),
    ([*CMP, "--seeds", "-1"], "--seeds"),
    ([*CMP, "--seeds", "9999999999999999999999"], "--seeds"),
    ([*CMP, "--seeds", "1000000000"], "--seeds"),
    ([*CMP, "--horizon", "0"], "horizon"),
    ([*CMP, "--policies", ""], "--policies is empty"),
    ([*CMP, "--policies", "gp-magic"], "unknown policy"),
    ([*CMP, "--policies", "gp-ucb,gp-ucb"], "same run twice"),
    ([*CMP, "--policies", "gp-bucb[xi=-1]"], "xi"),
    ([*CMP, "--routes", ""], "--routes is empty"),
    ([*CMP, "--routes", "Z"], "unknown route"),
    ([*CMP, "--routes", "atlantis:A"], "unknown network"),
    ([*CMP, "--routes", "monaco:Z"], "unknown route"),
    ([*CMP, "--sweep", "lengthscale=,"], "the lengthscales are empty"),
    ([*CMP, "--sweep", "lengthscale=0"], "lengthscale"),
    ([*CMP, "--sweep", "lengthscale=a,b"], "lengthscales"),
    ([*CMP, "--sweep", "lengthscale=nan"], "lengthscales"),
    ([*CMP, "--sweep", "lengthscale=1e300"], "lengthscale"),
    ([*CMP, "--sweep", "lengthscale=1", "--kernel", "combined[lengthscale=2]"], "given twice"),
    ([*CMP, "--sweep", "kernel=combined[nu=1],graph"], "sweep nu by name"),
    ([*CMP, "--lengthscales", "1"], "write --sweep lengthscale=V1,V2"),
    ([*CMP, "--truth", "gp[lengthscale=foo]"], "--truth lengthscale"),
    ([*CMP, "--truth", "gp[lengthscale=0]"], "--truth lengthscale"),
    ([*CMP, "--jobs", "0"], "--jobs"),
    ([*CMP, "--jobs", "-1"], "--jobs"),
    ([*CMP, "--jobs", "100000"], "--jobs"),
    ([*CMP, "--executor", "foo"], "executor"),
    ([*CMP, "--executor", "local[address=x]"], "--executor"),
    ([*CMP, "--executor", "ray[port=1]"], "--executor"),
    ([*CMP, "--ray-address", "x"], "write --executor ray[address=...]"),
    ([*CMP, "--osm", "monaco=/nonexistent.osm"], "monaco"),
    ([*CMP, "--dem", "/nonexistent.tif"], "not found"),
    ([*CMP, "--model", "bad"], "unknown model"),
    ([*CMP, "--model", "exact[merge=often]"], "unknown merge"),
    ([*CMP, "--truth", "gp[drift=2]"], "drift"),
    ([*CMP, "--truth", "gp[closures=bad]"], "closures"),
    ([*CMP, "--truth", "rkhs"], "needs b"),
    ([*CMP, "--vehicle", "big.json"], "mass_kg"),
    (["compare", "--out", "notes.txt", "--horizon", "3", "--no-progress"], "not a directory"),
    (["compare", "--out", "run", "--horizon", "3", "--no-progress"], "simulate run directory"),
    (["compare", "--out", "adir", "--horizon", "3", "--no-progress"], "not an evroute compare directory"),
    (["compare", "--out", "bad-grid", "--horizon", "3", "--no-progress"], "not a valid grid description"),
    (["compare", "--out", "cmp", "--routes", "A", "--policies", "gp-ts", "--seeds", "1", "--horizon", "4",
      "--jobs", "1", "--no-progress"], "other settings"),
    # ---- plot
    (["plot", "nothing-here"], "not a directory"),
    (["plot", "notes.txt"], "not a directory"),
    (["plot", "adir"], "neither a run directory"),
    (["plot", "bad-summary-list"], "not a readable run"),
    (["plot", "bad-summary-empty"], "not a readable run"),
    (["plot", "bad-summary-types"], "not a readable run"),
    (["plot", "bad-summary-path"], "not a readable run"),
    (["plot", "bad-config"], "not a readable run"),
    (["plot", "bad-config-list"], "not a readable run"),
    (["plot", "bad-edges"], "not a readable run"),
    (["plot", "bad-edges-types"], "not a readable run"),
    (["plot", "bad-rounds"], "not a readable run"),
    (["plot", "bad-truncated"], "not a readable run"),
    (["plot", "run", "--out", "notes.txt"], "not a directory"),
    (["plot", "run", "--out", "adir", "--no-maps"], "not written by evroute"),
    (["plot", "bad-grid"], "not a valid grid description"),
    # ---- export
    (["export", "run"], "nothing to write"),
    (["export", "run", "--geojson", "notes.txt"], "not written by evroute"),
    (["export", "run", "--geojson", "link.geojson", "--overwrite"], "symbolic link"),
    (["export", "run", "--geojson", "run/rounds.parquet", "--overwrite"], "run's own files"),
    (["export", "run", "--geojson", "cmp/summary.csv", "--overwrite"], "compare directory"),
    (["export", "run", "--html", "adir"], "directory"),
    (["export", "run", "--gpkg", "pipe"], "named pipe"),
    (["export", "run", "--html", "-"], "standard output"),
    (["export", "run", "--geojson", "a.geojson", "--html", "a.geojson"], "same file"),
    (["export", "run", "--geojson", "x.geojson", "--last", "0"], "--last"),
    (["export", "run", "--geojson", "x.geojson", "--last", "-1"], "--last"),
    (["export", "run", "--geojson", "x.geojson", "--run", "x"], "--run is for compare directories"),
    (["export", "cmp", "--geojson", "x.geojson", "--run", "nope"], "no finished run"),
    (["export", "nothing-here", "--geojson", "x.geojson"], "not a directory"),
    (["export", "adir", "--geojson", "x.geojson"], "neither a run directory"),
    (["export", "bad-summary-list", "--geojson", "x.geojson"], "not a readable run"),
    (["export", "bad-summary-path", "--geojson", "x.geojson"], "not a readable run"),
    (["export", "bad-edges", "--geojson", "x.geojson"], "not a readable run"),
    (["export", "bad-config", "--geojson", "x.geojson"], "not a readable run"),
    (["export", "bad-route", "--geojson", "x.geojson"], "outside"),
    # ---- drives import
    (DRV, "no such trace file: nope.csv"),
    ([*DRV, "--units", "speed=kmh"], "--units: speed must be one of m/s, km/h, mph, got 'kmh'"),
    ([*DRV, "--units", "volts=V"], "--units: unknown field 'volts'"),
    ([*DRV, "--units", "speed"], "--units: expected FIELD=UNIT"),
    ([*DRV, "--units", "time=hours"], "--units: time must be one of s, ms"),
    ([*DRV, "--columns", "when=t"], "--columns: unknown field 'when'"),
    ([*DRV, "--capacity-kwh", "0"], "--capacity-kwh"),
    ([*DRV, "--gps-noise", "0"], "--gps-noise"),
    ([*DRV, "--jobs", "-1"], "--jobs"),
    ([*DRV, "--matcher", "fmm"], "unknown --matcher"),
    ([*DRV, "--boundary", "edge"], "--boundary"),
    ([*DRV, "--vehicle", "delivery-van"], "write --fleet-vehicle"),
    (["prior", "check", "notes.txt", "--network", "synthetic", "--fleet-vehicle", "hovercraft"], "unknown vehicle"),
    (["prior", "check", "notes.txt", "--network", "synthetic", "--vehicle", "hovercraft"], "unknown vehicle"),
    (["drives", "import", "run", "--network", "synthetic", "--out", "new-drives"], "no trace files in the folder run"),
    (["drives", "import", "notes.txt", "--network", "synthetic", "--out", "new-drives", "--sumo-net", "nope.net.xml"],
     "no such SUMO network"),
    (["drives", "import", "notes.txt", "--network", "synthetic", "--out", "notes.txt"], "not a directory"),
    # ---- prior fit, and a prior file in the runs
    (["prior", "fit", "nope", "--out", "p.json"], "no drives import"),
    (["prior", "fit", "adir", "--out", "p.json"], "no drives import"),
    (["prior", "fit", "old-drives", "--out", "p.json"], "give it with --network"),
    (["prior", "fit", "old-car", "--out", "p.json"], "give it with --fleet-vehicle"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--fleet-vehicle", "delivery-van"], "leave --fleet-vehicle out"),
    (["prior", "fit", "moved-drives", "--out", "p.json"], "loads differently now"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--network", "synthetic-1k"], "loads differently now"),
    (["prior", "fit", "old-drives", "--out", "p.json", "--network", "nowhere.osm"], "not found"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--residual-sd", "-1"], "--residual-sd"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--vehicle-scale", "11"], "--vehicle-scale"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--seed", "-1"], "--seed"),
    (["prior", "fit", "fleet-drives", "--out", "p.json", "--vehicle", "hovercraft"], "unknown vehicle"),
    (["prior", "fit", "fleet-drives", "--out", "notes.txt"], "not written by evroute"),
    (["prior", "fit", "fleet-drives", "--out", "adir"], "directory"),
    (["prior", "fit", "fleet-drives", "--out", "run/config.json", "--overwrite"], "run's own files"),
    (["prior", "fit", "fleet-drives"], "Missing option"),
    ([*SIM, "--prior", "nope.json"], "no such prior file"),
    ([*SIM, "--prior", "bad-prior.json"], "not JSON"),
    ([*SIM, "--prior", "notes.txt"], "not JSON"),
    ([*SIM, "--prior", "cands-empty.json"], "not a prior file"),
    ([*SIM, "--prior", "prior.json", "--vehicle", "compact-ev"], "made for the vehicle"),
    ([*SIM, "--prior", "prior.json", "--network", "synthetic-1k"], "made for the network"),
    ([*SIM, "--turns", "drives"], "--prior"),
    ([*SIM, "--turns", "auto[kernel=sometimes]"], "--turns kernel"),
    ([*SIM, "--prior-turns", "drives"], "write --turns PRIOR"),
    ([*CMP, "--prior", "nope.json"], "no such prior file"),
    ([*CMP, "--prior", "prior.json", "--vehicle", "suv-ev"], "made for the vehicle"),
    ([*CMP, "--prior", "prior.json", "--routes", "synthetic-1k:A"], "made for the network"),
    ([*CMP, "--sweep", "prior=none,bad-prior.json"], "not JSON"),
    # ---- the powertrain world and vehicles fit (checked before FASTSim is looked for)
    (["networks", "info", "--vehicle", "negaux.json"], "aux_power_w"),
    ([*SIM, "--truth", "sumo[powertrain=tractor]"], "unknown car"),
    ([*SIM, "--truth", "sumo[powertrain=/nonexistent/car.yaml]"], "no such FASTSim vehicle file"),
    ([*SIM, "--truth", "sumo[ambient_c=99]"], "ambient_c"),
    ([*SIM, "--truth", "sumo[ambient_c=cold]"], "ambient_c"),
    (["sumo", "atlas", "--powertrain", "tractor"], "unknown car"),
    (["sumo", "atlas", "--ambient-c", "-60"], "ambient"),
    (["sumo", "atlas", "--seed", "1"], "write --atlas-seed"),
    (["sumo", "atlas", "synthetic"], "the network is --network NAME"),
    (["sumo", "drives", "--rate", "1"], "write --fix-rate"),
    (["vehicles", "fit", "tractor", "--out", "x.json"], "unknown car"),
    (["vehicles", "fit", "leaf", "--out", "notes.txt"], ".json"),
    (["vehicles", "fit", "leaf", "--out", "x.json", "--ambient-c", "99"], "ambient"),
    (["vehicles", "fit", "leaf", "--out", "x.json", "--seed", "-1"], "--seed"),
    (["vehicles", "fit", "leaf", "--out", "x.json", "--baseline", "hovercraft"], "unknown vehicle"),
    (["vehicles", "fit", "leaf", "--out", "big.json"], "not written by evroute"),
    (["vehicles", "frobnicate"], "No such command"),
]


def _check(code: int, err: str, phrase: str, before: dict, root: Path) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    assert "Traceback" not in err
    assert code == 2, err
    assert len(errors) == 1 and all(x.startswith(("error:", "warning:")) for x in lines), err
    assert phrase.lower() in errors[0].lower(), errors[0]
    assert _snapshot(root) == before


def test_at_least_150_bad_inputs():
    assert len(CASES) >= 150


@pytest.mark.parametrize("args,phrase", [
    pytest.param(a, p, id=" ".join(a)[:60], marks=[pytest.mark.real] if tuple(a) in LOADS_REAL else [])
    for a, p in CASES])
def test_bad_input(args, phrase, workdir, capsys):
    before = _snapshot(workdir)
    code = main(list(args))
    _, err = capsys.readouterr()
    _check(code, err, phrase, before, workdir)


#: A sample of the cases again as a user runs them: a process of its own, where nothing catches
#: what the command line would let through.
SUBPROCESS = [0, 2, 9, 37, 57, 77, 96, 150, 215, 230]


@pytest.mark.parametrize("i", SUBPROCESS)
def test_bad_input_in_a_process(i, workdir):
    args, phrase = CASES[i]
    before = _snapshot(workdir)
    proc = subprocess.run([sys.executable, "-m", "evroute", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "default"})
    _check(proc.returncode, proc.stderr, phrase, before, workdir)


def test_damaged_runs_in_a_grid_are_skipped_and_recomputed(workdir, capsys):
    """A compare directory with a damaged run: plot skips it with one warning line, compare
    recomputes it (one line saying so), and then plot is clean."""
    run = next((workdir / "cmp" / "runs").iterdir())
    (run / "summary.json").write_text("[1]")
    code = main(["plot", "cmp", "--no-maps"])
    _, err = capsys.readouterr()
    assert code == 2 and "has no finished readable runs" in err  # its only run is damaged
    code = main(["compare", "--out", "cmp", "--routes", "A", "--policies", "gp-ts", "--seeds", "1",
                 "--horizon", "3", "--jobs", "1", "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 0 and f"recomputing {run.name}" in err and "Traceback" not in err
    assert json.loads((run / "summary.json").read_text())["horizon"] == 3
    assert main(["plot", "cmp", "--no-maps"]) == 0


def test_writers_replace_their_own_files_and_keep_the_users(workdir, capsys):
    """Re-running a writer replaces what evroute wrote before; --overwrite is needed for anything
    else, and then only regular files are replaced."""
    for args in (["route", "--geojson", "r.geojson"], ["export", "run", "--geojson", "e.geojson", "--html", "e.html",
                                                       "--gpkg", "e.gpkg"],
                 ["plot", "run", "--no-maps"], ["networks", "osm", "synthetic", "--out", "city.osm"]):
        assert main(args) == 0, capsys.readouterr().err
        assert main(args) == 0, capsys.readouterr().err  # its own files: replaced without --overwrite
    assert main(["route", "--geojson", "notes.txt", "--overwrite"]) == 0
    assert json.loads((workdir / "notes.txt").read_text())["generator"].startswith("evroute")
    assert main(["plot", "run", "--out", "adir", "--no-maps", "--overwrite"]) == 0
    assert (workdir / "adir" / "user.txt").read_text() == "mine\n"
    # a run directory with evroute's own figures and exports in it is still evroute's to replace
    assert main(["export", "run", "--geojson", "run/map.geojson"]) == 0
    assert main([*SIM, "--out", "run", "--overwrite"]) == 0, capsys.readouterr().err
    assert not (workdir / "run" / "plots").exists() and not (workdir / "run" / "map.geojson").exists()


def test_geojson_to_standard_output(workdir, capsys):
    assert main(["route", "--geojson", "-"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["type"] == "FeatureCollection"
    assert main(["export", "run", "--geojson", "-"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["features"]) > 0 and "wrote" not in out


def test_help_shows_the_spec_syntax_and_flags_as_flags(capsys):
    code = main(["simulate", "--help"])
    out, _ = capsys.readouterr()
    assert code == 0
    text = " ".join(out.split())
    assert "svgp[inducing=500,steps=2]" in text and "gp-bucb[xi=0.5]" in text and "evroute models" in text
    assert "[lengthscale=1,kappa=1,nu=2]" in text and "LAT,LON:LAT,LON" in text
    assert "--overwrite Replace" in text and "<bool>" not in text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["kappa", "nu", "lengthscale", "truth_lengthscale", "policy:omega", "policy:xi",
                             "policy:beta_scale", "drift", "exact_optimum_time_limit"]),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
                       st.sampled_from([1e-300, 1e300, 0.0, -0.0, 5e-324])))
def test_numeric_settings_are_accepted_or_refused_in_one_line(name, value):
    """Any number for any numeric setting (or policy option): accepted, or one EvrouteError line,
    never another error."""
    kind, _, option = name.partition(":")
    settings = {"policy": f"gp-bucb[{option}={value}]"} if option else {name: value}
    try:
        SimulationConfig(**settings)
    except EvrouteError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
