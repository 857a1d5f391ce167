"""The benchmarks (benchmarks/) and reproductions (reproductions/): the shared harness writes what
it says, and every script starts (its imports resolve, its --help prints) from the checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for folder in ("benchmarks", "reproductions") for p in (ROOT / folder).glob("*.py")
                 if p.name not in ("__init__.py", "harness.py"))


def test_the_harness_writes_the_tables_the_command_and_the_hardware(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "rounds.py"), "oracle", "--out", str(tmp_path)])
    args = harness.parser("A benchmark.\n\nIts details.", seed=3).parse_args(["--out", str(tmp_path)])
    assert args.seed == 3 and args.out == tmp_path
    table = harness.Table(["network", "median ms"], title="a title")
    table.add("synthetic", "0.18")
    harness.finish(args.out, "result", table, notes=["a note"])
    printed = capsys.readouterr().out
    assert "| synthetic | 0.18 |" in printed and "\nHardware: " in printed
    md = (tmp_path / "result.md").read_text(encoding="utf-8")
    assert md.startswith("`python benchmarks/rounds.py oracle --out ")
    assert "| --- | ---: |" in md and "a note" in md and "Hardware: " in md
    record = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert record["tables"][0]["rows"] == [{"network": "synthetic", "median ms": "0.18"}]
    assert record["hardware"] == harness.hardware() and "CPUs" in record["hardware"]
    harness.write_rows(tmp_path, "rows", [{"a": 1, "b": 2.5}])
    assert (tmp_path / "rows.csv").read_text(encoding="utf-8").splitlines() == ["a,b", "1,2.5"]


def test_the_harness_timings_are_medians():
    calls = iter([0.0] * 5)
    median, times = harness.median_seconds(lambda: next(calls), 5)
    assert len(times) == 5 and median == sorted(times)[2]
    assert harness.spread([1.0, 2.0, 3.0, 10.0])["median"] == 2.5
    mean, se = harness.mean_se([1.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(1.0)


@pytest.mark.slow
def test_every_script_starts_from_the_checkout():
    assert {p.name for p in SCRIPTS} >= {"rounds.py", "scale.py", "paper000_table1.py", "powertrains.py"}
    for script in SCRIPTS:
        done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                              cwd=ROOT.parent)
        assert done.returncode == 0 and "usage:" in done.stdout, (script.name, done.stderr[-1500:])
    shell = ROOT / "reproductions" / "paper003.sh"
    assert subprocess.run(["bash", "-n", str(shell)]).returncode == 0
