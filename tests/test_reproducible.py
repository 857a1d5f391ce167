"""The same configuration gives the same network and the same run in every process,
whatever the string-hash seed and whichever process built the cache (issue: trust)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("repro_child.py")
RUNS = ["",  # the README's main job: gp-ts, 500 rounds on the embedded synthetic city
        "--network monaco --route B --policy gp-ucb --horizon 15 --seed 1",
        "--network luxembourg --policy gp-ts --horizon 10",
        # the sparse (GMRF) exact posterior and a Nyström dictionary (seeded KORS draws)
        "--network monaco --kernel graph --policy gp-ucb --horizon 8",  # (local updates, the default)
        "--network monaco --kernel graph --policy gp-ts --model exact[update=global] --horizon 5",
        "--network monaco --policy gp-ts --model nystrom --horizon 8",
        # paper 000's route-level bound on an RKHS truth (random anchors, Yen's candidates)
        "--network monaco --route B --policy gp-cmm --truth rkhs[B=10] --horizon 5"]


def _start(tmp: Path, tag: str, hash_seed: int, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "EVROUTE_CACHE_DIR": str(cache)}
    out = tmp / f"runs-{tag}"
    out.mkdir()
    return subprocess.Popen([sys.executable, "-W", "ignore", str(CHILD), str(out),
                             "synthetic,monaco,luxembourg", *RUNS],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.real
@pytest.mark.slow
def test_networks_and_runs_identical_across_hash_seeds_and_caches(tmp_path):
    caches = {h: tmp_path / f"cache-{h}" for h in (1, 2, 3)}
    # two at a time: the machine has two cores
    first = [_start(tmp_path, f"h{h}", h, caches[h]) for h in (1, 2)]
    results = {h: _result(p) for h, p in zip((1, 2), first, strict=True)}
    later = [_start(tmp_path, "h3", 3, caches[3]),
             # a warm cache built by another process (hash seed 1) must give the same again
             _start(tmp_path, "h2-warm", 2, caches[1])]
    results[3], results["warm"] = (_result(p) for p in later)
    ref = results[1]
    assert set(ref) == {"net:synthetic", "net:monaco", "net:luxembourg", *(f"run:{r}" for r in RUNS)}
    for key, value in results.items():
        for what in ref:
            assert value[what] == ref[what], f"{what} differs between hash seed 1 and {key}"
