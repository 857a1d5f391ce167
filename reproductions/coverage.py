"""Coverage of the logged lower confidence bounds of an ``evroute compare`` directory (paper 000).

For every policy that logs a lower bound (``index_before``: the LCB of gp-ucb and of the paper-000
agents): the share of (edge, round) pairs whose bound lies at or below the edge's true expected
energy at the last round (the mean over the policy's runs, as ``evroute plot`` draws it in its
``coverage`` figure), the rounds with an empty confidence set, and for gp-cmm the share of rounds
whose route-level bound lies below the route's true energy. With ``--out DIR`` it also draws the
coverage figure there (evroute's own)::

    evroute compare --preset bounds --routes monaco:B --truth "rkhs[B=10]" --seeds 5 --horizon 200 --out bounds
    python reproductions/coverage.py bounds --out bounds-coverage
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("directory", type=Path, help="a directory written by evroute compare")
    args = p.parse_args(argv)

    from evroute.bandit.agents import LOWER_CONFIDENCE_BOUND, POLICIES
    from evroute.reports.figures import FigureSet, find_runs, load_runs
    from evroute.reports.plots import (
        _bound_curves as bound_curves,  # the coverage figure's own numbers
    )
    from evroute.reports.plots import plot_coverage
    from evroute.runs.directory import read_run_table

    run_dirs, _ = find_runs(args.directory)  # finished, readable runs (a damaged one is skipped with a warning)
    runs = load_runs(run_dirs)
    runs = runs[runs.policy_name.isin(set(POLICIES.with_capability(LOWER_CONFIDENCE_BOUND)))]
    table = Table(["policy", "runs", "bound ≤ truth at T (mean over runs)", "rounds with an empty set",
                   "route bound ≤ truth"], title=str(args.directory))
    for policy, g in runs.groupby("policy", sort=False):
        coverage, empty, route_below, rounds = [], 0, 0, 0
        for d in g.dir:
            cov, _ = bound_curves(d)
            coverage.append(cov[-1] if cov.size else np.nan)
            r = read_run_table(d, "rounds")
            rounds += len(r)
            if "empty_set" in r:
                empty += int(r.empty_set.sum())
            if "path_lower_bound" in r:
                route_below += int((r.path_lower_bound <= r.expected_energy_wh).sum())
        route = f"{100 * route_below / rounds:.2f} %" if g.policy_name.iloc[0] == "gp-cmm" else "–"
        table.add(policy, len(g), f"{np.nanmean(coverage):.2f} %", empty, route)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        figures = FigureSet(args.out)
        plot_coverage(runs, figures)
        for path in figures.write(overwrite=True):
            print(f"wrote {path}")
    finish(args.out, "coverage", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
