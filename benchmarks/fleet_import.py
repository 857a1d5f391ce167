"""Throughput of ``evroute drives import`` on a fleet (an hour of a 1,000-vehicle fleet at 1 Hz).

SUMO's drives on a network (``--vehicles`` of them, seed 0), copied ``--copies`` times with
independent GPS noise (each copy its own trips, named apart) into one CSV; then the import,
timed as a user runs it (``evroute drives import FLEET.csv --network NET --gps-noise M --jobs
J``), with the peak memory of the command and its workers together (sampled) and of its largest
process. Prints one Markdown row: network, fixes, matcher, jobs, seconds, fixes a second, a
second per process, memory together, the largest process's. The fleet's CSV and the import go
under ``--out`` (the CSV is reused when there)::

    python benchmarks/fleet_import.py monaco --vehicles 30 --copies 250 --noise 10 --jobs 2 --out fleet-import
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, peak_rss_gb  # noqa: E402
from evroute.physics.energy import load_vehicle  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.world.drives import degrade  # noqa: E402
from evroute.world.sumo_drives import sumo_drives  # noqa: E402


def fleet_csv(network: str, vehicles: int, copies: int, noise: float, path: Path) -> int:
    net = load_network(network)
    d = sumo_drives(net, network, load_vehicle(None), vehicles=vehicles, seed=0)
    parts = []
    for c in range(copies):
        t = degrade(d.traces, noise, 1.0, seed=c)
        parts.append(t.assign(trip=t.trip.astype(str) + f"-{c}", vehicle=t.vehicle.astype(str) + f"-{c}"))
    fleet = pd.concat(parts, ignore_index=True)
    part = path.with_name(path.name + ".part")  # then renamed: a half-written file is never reused
    fleet.to_csv(part, index=False)
    part.replace(path)
    return len(fleet)


def main(argv=None) -> int:
    ap = parser(__doc__, out_required=True)
    ap.add_argument("network")
    ap.add_argument("--vehicles", type=int, default=30)
    ap.add_argument("--copies", type=int, default=250)
    ap.add_argument("--noise", type=float, default=10.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--matcher", default="hmm")
    args = ap.parse_args(argv)
    folder = args.out
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / f"fleet-{args.network}-{args.vehicles}x{args.copies}-{args.noise:g}m.csv"
    if not csv.exists():
        t0 = time.perf_counter()
        n = fleet_csv(args.network, args.vehicles, args.copies, args.noise, csv)
        print(f"# wrote {csv} ({n:,} fixes, {csv.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t0:.0f} s")
    n = sum(1 for _ in open(csv, encoding="utf-8")) - 1
    out = folder / f"import-{args.matcher}-j{args.jobs}"
    cmd = [sys.executable, "-m", "evroute", "drives", "import", str(csv), "--network", args.network,
           "--gps-noise", f"{args.noise:g}", "--jobs", str(args.jobs), "--matcher", args.matcher, "--out", str(out),
           "--overwrite", "--json", "--no-progress"]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:  # (a pipe nobody reads would block the command once full)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        total = 0.0
        while proc.poll() is None:  # the command and its workers together, sampled
            total = max(total, tree_rss_mb(proc.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        if proc.returncode:
            errors.seek(0)
            sys.exit(errors.read()[-2000:])
    largest = peak_rss_gb(children=True) * 1024
    table = Table(["network", "fixes", "matcher", "jobs", "seconds", "fixes a second", "a second per process",
                   "memory (command and workers, sampled)", "largest process"], align="lrl")
    table.add(args.network, f"{n:,}", args.matcher, args.jobs, f"{wall:.1f} s", f"{n / wall:,.0f}",
              f"{n / wall / args.jobs:,.0f}", f"{total:,.0f} MB", f"{largest:,.0f} MB")
    finish(args.out, f"fleet-import-{args.network}", table)
    return 0


def tree_rss_mb(pid: int) -> float:
    """The resident memory of a process and its descendants (MB), from ``ps``."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,rss="], capture_output=True, text=True).stdout
    rows = [tuple(int(x) for x in line.split()) for line in out.splitlines() if line.strip()]
    tree, grew = {pid}, True
    while grew:
        grew = False
        for p, pp, _ in rows:
            if pp in tree and p not in tree:
                tree.add(p)
                grew = True
    return sum(r for p, _, r in rows if p in tree) / 1024


if __name__ == "__main__":
    sys.exit(main())
