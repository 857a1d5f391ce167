#!/usr/bin/env bash
# Reproduce the experiments of Sandberg, Åkerblom & Haghir Chehreghani (paper 003, Sec. 4.2 and
# App. C): Fig. 2 (GP vs BI with UCB/BUCB/TS), Fig. 3 (β_t parametrisations), Fig. 4–5
# (lengthscale sweep) and Fig. 6–9 (exploration maps), on Luxembourg and Monaco.
#
# Usage: scripts/reproduce_paper.sh [OUT_DIR] [extra options for evroute compare...]
#   e.g. scripts/reproduce_paper.sh results --jobs 8
#        scripts/reproduce_paper.sh results --executor ray --ray-address auto
#        scripts/reproduce_paper.sh results --dem luxembourg=/data/lux-dem.tif
#
# The OSM files are read from $EVROUTE_DATA_DIR (default: ../shared/data next to the repo).
# Luxembourg has no elevation unless a DEM is given (--dem luxembourg=PATH).
# Every step resumes: run the script again after an interruption and finished runs are kept.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-results}"
shift || true
export EVROUTE_DATA_DIR="${EVROUTE_DATA_DIR:-$here/../shared/data}"
export MPLBACKEND=Agg

for preset in paper-fig2 paper-fig3 paper-lengthscale; do
    echo "== evroute compare --preset $preset --out $out/$preset $*" >&2
    start=$(date +%s)
    evroute compare --preset "$preset" --out "$out/$preset" "$@"
    echo "== $preset: $(( $(date +%s) - start )) s" >&2
    evroute plot "$out/$preset"
done
