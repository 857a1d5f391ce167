"""Coverage of the logged lower bounds (issue "Tighter confidence bounds"): for every policy of
an ``evroute compare`` directory, the share of (edge, round) pairs whose logged index
(``index_before``: the LCB for gp-ucb and the paper-000 agents) lies at or below the edge's
true expected energy, the rounds with an empty confidence set, and for gp-cmm the share of
rounds whose route-level bound lies below the route's true energy.

Usage::

    python scripts/coverage.py /tmp/bounds-rkhs     # a directory written by evroute compare
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from evroute.runs.config import flat_config_json


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("directory", type=Path)
    args = p.parse_args(argv)
    rows: dict[str, dict] = {}
    for run in sorted((args.directory / "runs").iterdir()):
        if not (run / "summary.json").is_file():
            continue
        policy = flat_config_json(json.loads((run / "config.json").read_text()))["policy"]
        obs = pd.read_parquet(run / "observations.parquet", columns=["index_before", "expected_wh"])
        rounds = pd.read_parquet(run / "rounds.parquet")
        r = rows.setdefault(policy, {"below": 0, "pairs": 0, "empty": 0, "rounds": 0, "route_below": 0, "runs": 0})
        r["below"] += int((obs.index_before <= obs.expected_wh).sum())
        r["pairs"] += len(obs)
        r["rounds"] += len(rounds)
        r["runs"] += 1
        if "empty_set" in rounds:
            r["empty"] += int(rounds.empty_set.sum())
        if "path_lower_bound" in rounds:
            r["route_below"] += int((rounds.path_lower_bound <= rounds.expected_energy_wh).sum())
    print(f"{args.directory}\n")
    print("| policy | runs | (edge, round) pairs | LCB ≤ truth | rounds with an empty set | route bound ≤ truth |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for pol, r in rows.items():
        route = f"{100 * r['route_below'] / r['rounds']:.2f} %" if pol == "gp-cmm" else "–"
        print(f"| {pol} | {r['runs']} | {r['pairs']:,} | {100 * r['below'] / max(r['pairs'], 1):.2f} % | "
              f"{r['empty']} | {route} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
