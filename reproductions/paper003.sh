#!/usr/bin/env bash
# Reproduce the experiments of Sandberg, Åkerblom & Haghir Chehreghani (paper 003, Sec. 4.2 and
# App. C): Fig. 2 (GP vs BI with UCB/BUCB/TS), Fig. 3 (β_t parametrisations), Fig. 4–5
# (lengthscale sweep) and Fig. 6–9 (exploration maps), on Luxembourg and Monaco.
#
# Usage: reproductions/paper003.sh [OUT_DIR] [extra options for evroute compare...]
#   e.g. reproductions/paper003.sh results --jobs 8
#        reproductions/paper003.sh results --executor "ray[address=auto]"
#        reproductions/paper003.sh results --dem luxembourg=/data/lux-dem.tif
#
# The OSM files come from the data folder (`evroute data fetch all`; $EVROUTE_DATA_DIR, else
# ../shared/data beside the checkout where it exists).
# Luxembourg has no elevation unless a DEM is given (--dem luxembourg=PATH).
# Every step resumes: run the script again after an interruption and finished runs are kept.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-results}"
shift || true
if [ -z "${EVROUTE_DATA_DIR:-}" ] && [ -d "$here/../shared/data" ]; then
    export EVROUTE_DATA_DIR="$here/../shared/data"
fi
export MPLBACKEND=Agg

for preset in paper-fig2 paper-fig3 paper-lengthscale; do
    echo "== evroute compare --preset $preset --out $out/$preset $*" >&2
    start=$(date +%s)
    evroute compare --preset "$preset" --out "$out/$preset" "$@"
    echo "== $preset: $(( $(date +%s) - start )) s" >&2
    evroute plot "$out/$preset"
done
python -c "import sys; sys.path.insert(0, '$here'); from benchmarks.harness import hardware; print('Hardware:', hardware())"
