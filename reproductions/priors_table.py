"""The "which vehicle am I?" table of paper 004 in evroute, from one or more ``evroute compare``
output directories (``--preset priors`` and its variants).

Per (route, policy, vehicle): final regret (mean ± standard error over seeds), the share of
rounds driven under the true prior (the candidate with the truth's ``prior`` vehicle and the
run's drift as its ε), the most chosen prior, and each elimination as ``prior@round`` (median
round over the seeds that eliminated it, and in how many seeds)::

    evroute compare --preset priors --routes monaco:B --out priors
    python reproductions/priors_table.py priors [priors-closures ...]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402
from evroute.runs.config import normalise_config_json  # noqa: E402
from evroute.runs.directory import read_run_table  # noqa: E402


def rows(out_dir: Path) -> list[dict]:
    found = []
    for summary_file in sorted((out_dir / "runs").glob("*/summary.json")):
        d = summary_file.parent
        s = json.loads(summary_file.read_text())
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").is_file() else {}
        policy = normalise_config_json(cfg)["policy"] if cfg else s["policy"]  # the canonical spec
        variant = " ".join(x for x in (f"drift {cfg['drift']:g}" if cfg.get("drift") else "",
                                       f"closures {cfg['closures']}" if cfg.get("closures") else "") if x) or "static"
        row = {"variant": variant, "route": s["route"], "policy": policy, "vehicle": cfg.get("vehicle") or "sumo-ev",
               "seed": s["seed"], "regret": s["final_cumulative_regret_wh"], "truth": s.get("truth_prior"),
               "on_true": np.nan, "chosen": Counter(), "eliminated": s.get("priors_eliminated_at") or {}}
        if (d / "priors.parquet").is_file():
            pri = read_run_table(d, "priors")
            row["chosen"] = Counter(pri.chosen)
            truth = s.get("truth_prior")
            described = (cfg.get("resolved") or {}).get("candidates")
            if described:  # the truth's own candidate: its vehicle and the run's drift as ε
                true_names = [c["name"] for c in described if truth in (c["name"], c["vehicle"])
                              and float(c["eps"]) == float(cfg.get("drift") or 0.0)]
            else:
                true_names = [p for p in s.get("priors", []) if p == truth or p.split("[")[0] == truth]
            row["on_true"] = float(pri.chosen.isin(true_names).mean())
        found.append(row)
    return found


def table(found: list[dict]) -> Table:
    out = Table(["roads", "route", "policy", "prior of gp-ucb", "final regret (Wh)", "rounds on the true prior",
                 "most chosen", "eliminated (median round, seeds)"], align="llllrrll", stream=False)
    df = pd.DataFrame(found)
    for (variant, route, policy, vehicle), g in df.groupby(["variant", "route", "policy", "vehicle"], sort=True):
        reg = g.regret.to_numpy()
        se = reg.std(ddof=1) / np.sqrt(reg.size) if reg.size > 1 else float("nan")
        chosen = sum(g.chosen, Counter())
        total = sum(chosen.values())
        most = ", ".join(f"{p} {100 * c / total:.0f} %" for p, c in chosen.most_common(2)) if total else "–"
        elim: dict[str, list[int]] = {}
        for e in g.eliminated:
            for p, t in e.items():
                elim.setdefault(p, []).append(int(t))
        el = "; ".join(f"{p}@{int(np.median(ts))} ({len(ts)}/{len(g)})" for p, ts in sorted(elim.items())) or \
            ("none" if total and policy.split("[")[0] in ("gp-pe", "gp-rb") else "–")
        on_true = "–" if g.on_true.isna().all() else f"{100 * g.on_true.mean():.1f} %"
        prior = vehicle if policy.split("[")[0] in ("gp-ucb", "gp-ts", "gp-bucb") else "–"
        out.add(variant, route, policy, prior, f"{reg.mean():,.0f} ± {se:,.0f}", on_true, most, el)
    return out


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("dirs", nargs="+", type=Path, help="directories written by evroute compare")
    args = ap.parse_args(argv)
    found = [r for d in args.dirs for r in rows(d)]
    if not found:
        raise SystemExit(f"error: no runs under {', '.join(map(str, args.dirs))}")
    finish(args.out, "priors-table", table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
