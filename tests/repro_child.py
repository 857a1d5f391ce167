"""Child process of tests/test_reproducible.py: build networks and run simulations in a
fresh cache, then print one JSON line of content hashes (nothing about timing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd


def table_hash(df: pd.DataFrame) -> str:
    from evroute.cache import hash_bytes

    df = df.copy()
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(lambda x: " ".join(map(str, x)) if hasattr(x, "__len__")
                                  and not isinstance(x, str) else str(x))
    return hash_bytes(pd.util.hash_pandas_object(df, index=True).values.tobytes())[:16]


def main() -> None:
    from evroute.cli import main as cli
    from evroute.roads.network import load_network

    out = Path(sys.argv[1])
    networks = sys.argv[2].split(",")
    runs = [r.split() for r in sys.argv[3:]]
    result = {}
    for name in networks:
        net = load_network(name)
        ways = pd.DataFrame({"w": [" ".join(map(str, w)) for w in net.edge_ways]})
        result[f"net:{name}"] = {"edges": table_hash(net.edges), "nodes": table_hash(net.nodes),
                                 "conn": table_hash(pd.DataFrame({"s": net.conn_src, "d": net.conn_dst})),
                                 "ways": table_hash(ways)}
    for i, args in enumerate(runs):
        rd = out / f"run{i}"
        code = cli(["simulate", *args, "--out", str(rd), "--no-progress"])
        if code != 0:
            raise SystemExit(f"simulate {args} exited {code}")
        summary = json.loads((rd / "summary.json").read_text())
        rounds = pd.read_parquet(rd / "rounds.parquet")  # timing columns: "seconds", "seconds_*"
        for k in ("mean_seconds_per_round", "median_seconds_per_round"):
            summary.pop(k)
        result[f"run:{' '.join(args)}"] = {
            "rounds": table_hash(rounds.drop(columns=[c for c in rounds.columns if c.startswith("seconds")])),
            "observations": table_hash(pd.read_parquet(rd / "observations.parquet")),
            "edges": table_hash(pd.read_parquet(rd / "edges.parquet")),
            "summary": summary,
        }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
