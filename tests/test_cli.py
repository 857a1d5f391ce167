"""The command line: outputs, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from evroute.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_networks_list(capsys):
    code, out, _ = run(capsys, "networks", "list")
    assert code == 0 and "synthetic" in out and "monaco" in out and "luxembourg" in out


def test_networks_info_json(capsys):
    code, out, _ = run(capsys, "networks", "info", "synthetic", "--json")
    info = json.loads(out)
    for key in ("nodes", "edges", "km", "elevation_source", "elevation_min_m", "elevation_max_m",
                "energy_mean_wh", "energy_std_wh", "energy_negative_share", "connections"):
        assert key in info
    assert code == 0 and info["edges"] > 0 and info["elevation_max_m"] > info["elevation_min_m"]


@pytest.mark.real
def test_networks_info_monaco_table(capsys):
    code, out, _ = run(capsys, "networks", "info", "monaco")
    assert code == 0 and "1,007" in out and "connections" in out


def test_route_json_and_geojson(capsys, tmp_path):
    gj = tmp_path / "out" / "r.geojson"
    code, out, _ = run(capsys, "route", "--network", "synthetic", "--route", "B", "--json", "--geojson", str(gj))
    assert code == 0
    data = json.loads(out)
    assert [r["kind"] for r in data["routes"]] == ["energy", "shortest", "fastest"]
    for r in data["routes"]:
        assert {"energy_wh", "length_m", "time_s", "edges"} <= set(r)
    fc = json.loads(gj.read_text())
    assert len(fc["features"]) == 3


def test_route_from_to(capsys, synthetic):
    s, w, n, e = synthetic.bounds
    a = f"{s + 0.2 * (n - s)},{w + 0.2 * (e - w)}"
    b = f"{s + 0.8 * (n - s)},{w + 0.8 * (e - w)}"
    code, out, _ = run(capsys, "route", "--route", f"{a}:{b}", "--json")
    assert code == 0 and len(json.loads(out)["routes"]) == 3


@pytest.mark.parametrize("args,msg", [
    (["networks", "info", "atlantis"], "unknown network"),
    (["networks", "info", "/nonexistent/x.osm"], "not found"),
    (["route", "--route", "Q"], "unknown route"),
    (["route", "--route", "1,1:2,2"], "outside"),
    (["route", "--route", "oops,1:2,2"], "LAT,LON"),
    (["route", "--vehicle", "hovercraft"], "unknown vehicle"),
    (["networks", "fetch", "synthetic"], "nothing to fetch"),
    (["simulate", "--model", "exact[merge=often]"], "unknown merge 'often'"),
    (["simulate", "--model", "exact[rank=3]"], "unknown option(s) for model 'exact': rank (accepted: merge"),
    (["simulate", "--inducing", "4"], "No such option: --inducing"),
    (["simulate", "--model", "svgp[inducing"], "cannot parse model"),
    (["compare", "--out", "/tmp/evroute-never", "--model", "exact[merge=often]"], "unknown merge"),
])
def test_bad_input_one_line_exit_2(capsys, args, msg):
    code, out, err = run(capsys, *args)
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0]


def test_not_osm_file(capsys, tmp_path):
    f = tmp_path / "x.osm"
    f.write_text("not xml at all")
    code, _, err = run(capsys, "networks", "info", str(f))
    assert code == 2 and "not an OSM XML" in err


def test_subprocess_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "evroute", "route", "--route", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error:")
    proc = subprocess.run([sys.executable, "-m", "evroute", "route", "--no-such-option"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.real
def test_networks_info_reports_kept_share_of_segments_and_length(capsys, monaco):
    code, out, _ = run(capsys, "networks", "info", "monaco")
    line = next(x for x in out.splitlines() if x.startswith("component"))
    assert "of the drivable road segments" in line and "of the drivable km" in line and "nodes" not in line
    # the segment share counts the OSM segments the kept (simplified) edges are made of:
    # it lies near the length share, not at the ratio of node counts
    seg, km = monaco.meta["component_edge_share"], monaco.meta["component_km_share"]
    assert 0.5 < seg <= 1.0 and abs(seg - km) < 0.15


def test_models_lists_backends_options_and_policies(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    for text in ("bi:", "exact:", "svgp:", "inducing = 1000", "merge = 'auto'", "gp-bucb:", "omega = 1.0",
                 "bi-ts:", "joint = False", "rkhs:", "B = None", "random:", "rate = 0.05",
                 "[offers: covariance, information_gain, joint_samples, sparse_precision]"):
        assert text in out


def test_model_spec_options_reach_the_run(capsys, tmp_path):
    out = tmp_path / "r"
    code, _, err = run(capsys, "simulate", "--model", "exact[merge=always,max_active=7]", "--horizon", "3",
                       "--out", str(out))
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["format"] == 4 and cfg["agent"]["model"] == "exact[merge=always,max_active=7]"


def test_svgp_with_a_bi_policy_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "simulate", "--policy", "bi-ts", "--model", "svgp", "--horizon", "2",
                       "--out", str(tmp_path / "r"))
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "--model svgp" in lines[0] and "bi-ts" in lines[0]
    assert not (tmp_path / "r").exists()


def test_flat_network_warns_on_every_run(tmp_path):
    from .osmxml import write_osm

    osm = write_osm(tmp_path / "flat.osm", ele=False)
    env = {**__import__("os").environ, "EVROUTE_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):  # the first builds the cache, the second reads it: both say it
        proc = subprocess.run([sys.executable, "-m", "evroute", "networks", "info", str(osm)],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        warns = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(warns) == 1 and warns[0].startswith("warning: network 'flat' has no elevation"), proc.stderr


def test_networks_osm_writes_a_synthetic_city(capsys, tmp_path):
    out = tmp_path / "city.osm"
    code, stdout, _ = run(capsys, "networks", "osm", "synthetic-1k", "--out", str(out))
    assert code == 0 and f"wrote {out}" in stdout and out.read_text().startswith("<?xml")
    code, _, err = run(capsys, "networks", "osm", "synthetic-1k", "--out", str(out))
    assert code == 0, err  # its own file: replaced without --overwrite
    mine = tmp_path / "mine.osm"
    mine.write_text("<?xml version='1.0'?><osm generator='JOSM'/>")
    code, _, err = run(capsys, "networks", "osm", "synthetic-1k", "--out", str(mine))
    assert code == 2 and "not written by evroute" in err and err.count("\n") == 1 and "JOSM" in mine.read_text()
    code, _, err = run(capsys, "networks", "osm", "monaco", "--out", str(tmp_path / "m.osm"))
    assert code == 2 and "only synthetic" in err and not (tmp_path / "m.osm").exists()
    code, stdout, _ = run(capsys, "networks", "info", str(out))
    assert code == 0 and "edges" in stdout


def test_a_component_whose_extra_is_missing_is_one_line_naming_the_extra(capsys, monkeypatch, tmp_path):
    """Without torch, --model svgp stops before any work with the install command (also
    without SUMO for --truth sumo)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in ("torch", "sumo") else real(name, *a))
    monkeypatch.chdir(tmp_path)
    for args, extra in ((["--model", "svgp"], "svgp"), (["--truth", "sumo"], "sumo")):
        code, out, err = run(capsys, "simulate", "--horizon", "2", *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and f'pip install "evroute[{extra}]"' in lines[0], err
    assert list(tmp_path.iterdir()) == []
