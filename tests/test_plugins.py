"""Components from another package: a wheel declaring a truth and an agent in the
``evroute.components`` entry-point group is installed into a temporary folder, and
``evroute models``, ``simulate`` and a two-job ``compare`` (fresh worker processes) use them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _wheel(dst: Path) -> Path:
    """The plug-in's wheel, written by hand (no build backend needed): the module, its
    metadata, its entry points and the RECORD of their hashes."""
    files = {
        "evroute_flat/__init__.py": b"",
        "evroute_flat/components.py": (HERE / "plugin" / "components.py").read_bytes(),
        "evroute_flat-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: evroute-flat\nVersion: 0.1\n",
        "evroute_flat-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n",
        "evroute_flat-0.1.dist-info/entry_points.txt": b"[evroute.components]\n"
                                                       b"truth:flat = evroute_flat.components\n"
                                                       b"policy:prior-route = evroute_flat.components\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("evroute_flat-0.1.dist-info/RECORD,,")
    path = dst / "evroute_flat-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("evroute_flat-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """An environment where the plug-in is installed (pip, into a folder on PYTHONPATH)."""
    tmp = tmp_path_factory.mktemp("plugin")
    target = tmp / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                        str(target), str(_wheel(tmp))], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return env


def _evroute(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "evroute", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_a_plugin_is_listed_with_its_origin(plugin_env):
    p = _evroute(plugin_env, "models")
    assert p.returncode == 0, p.stderr
    assert "flat[shift=WH]" in p.stdout or "flat" in p.stdout
    assert "(from plug-in evroute-flat (evroute_flat.components))" in p.stdout
    assert "sumo, flat" in _evroute(plugin_env, "simulate", "--help").stdout  # listed in the help, nothing imported


def test_a_plugin_runs_through_simulate_and_a_two_job_compare(plugin_env, tmp_path):
    p = _evroute(plugin_env, "simulate", "--truth", "flat[shift=5]", "--policy", "prior-route", "--horizon", "3",
                 "--out", str(tmp_path / "run"), "--no-progress")
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["truth"] == "flat[shift=5]" and summary["flat_shift"] == 5.0 and summary["policy"] == "prior-route"
    p = _evroute(plugin_env, "compare", "--routes", "synthetic:A", "--policies", "prior-route,bi-ts", "--truth",
                 "flat[shift=5]", "--seeds", "2", "--horizon", "3", "--jobs", "2", "--out", str(tmp_path / "cmp"),
                 "--no-progress")
    assert p.returncode == 0, p.stderr
    runs = sorted(d.name for d in (tmp_path / "cmp" / "runs").iterdir())
    assert len(runs) == 4 and sum("prior-route" in r for r in runs) == 2


def test_without_the_plugin_the_names_are_unknown(tmp_path):
    p = _evroute(dict(os.environ), "simulate", "--truth", "flat", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "unknown truth 'flat'" in p.stderr
