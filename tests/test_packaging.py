"""The wheel carries the registries and reads them without the source checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evroute.registry import DATA_REGISTRIES, load_registry

REPO = Path(__file__).resolve().parent.parent


def test_registries_load_through_the_package():
    for name in DATA_REGISTRIES:
        reg = load_registry(name)
        assert isinstance(reg, dict) and reg
    assert {"synthetic", "monaco", "luxembourg"} <= set(load_registry("networks"))
    # the source of truth is data/ at the repository root
    assert load_registry("networks") == json.loads((REPO / "data" / "networks.json").read_text())


@pytest.mark.slow
def test_wheel_carries_and_reads_the_registries(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path / "dist"), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"cannot build a wheel offline here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("evroute-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    for name in DATA_REGISTRIES:
        assert f"evroute/data/{name}.json" in names
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "evroute").rglob("*.py")}
    assert sources - names == set(), "modules missing from the wheel"
    assert not any(n.startswith(("data/", "tests/", "benchmarks/", "reproductions/")) for n in names)
    # read from the unpacked wheel, in a folder outside the checkout, with the source
    # tree out of sys.path
    code = ("import evroute, evroute.registry as r, sys; "
            "assert evroute.__file__.startswith(sys.argv[1]), evroute.__file__; "
            "print(sorted(r.load_registry('networks')), len(r.load_registry('vehicles')))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(tmp_path / "site")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "monaco" in out.stdout
