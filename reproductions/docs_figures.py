"""The figures of the documentation site (``docs/figures/*.png``), made from real runs.

Each figure comes from an ``evroute compare`` grid (or a SUMO atlas) drawn by evroute's own
plotting code (``evroute plot``), then copied under a stable name into ``docs/figures``.
The PNGs are committed: the grids take minutes to an hour, and the site must build offline in
seconds (``mkdocs build --strict`` in CI); this script is how they were made, and remaking
them after a change of behaviour is one command::

    python reproductions/docs_figures.py --out figures-work                          # every figure
    python reproductions/docs_figures.py --out figures-work --only fig2 --reuse fig2=results/fig2

The grids go under ``--out`` and are resumed when run again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout: evroute and the harness
from benchmarks.harness import parser  # noqa: E402

#: name → (the command that makes its directory, [(figure evroute plot writes, name in docs/figures)])
FIGURES = {
    "fig2": (["compare", "--preset", "paper-fig2"],
             [("regret", "fig2-regret"), ("explore-luxembourg-A", "explore-luxembourg-A"),
              ("explore-monaco-B", "explore-monaco-B")]),
    "dictionary": (["compare", "--routes", "luxembourg:A", "--policies", "gp-ts,gp-ucb", "--model", "nystrom",
                    "--seeds", "2", "--horizon", "200"],
                   [("dictionary", "dictionary-size")]),
    "priors": (["compare", "--preset", "priors", "--routes", "monaco:B", "--seeds", "2", "--horizon", "200"],
               [("priors", "priors-survival")]),
    "coverage": (["compare", "--preset", "bounds", "--routes", "monaco:B", "--truth", "rkhs[B=10]", "--seeds", "3",
                  "--horizon", "200"],
                 [("coverage", "bounds-coverage")]),
    "atlas": (["sumo", "atlas", "monaco", "--route", "A"], [("atlas", "sumo-atlas-monaco")]),
}


def evroute(*args: str) -> None:
    cmd = [sys.executable, "-m", "evroute", *args]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def shrink(src: Path, dst: Path, width: int = 1100) -> None:
    """A copy at most ``width`` pixels wide, as a palette PNG (a page loads it quickly)."""
    from PIL import Image

    with Image.open(src) as im:
        im = im.convert("RGB")
        if im.width > width:
            im = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
        im.quantize(colors=256).save(dst, optimize=True)


def main(argv=None) -> int:
    p = parser(__doc__, out_required=True)
    p.add_argument("--only", default=",".join(FIGURES), help="comma-separated (default: %(default)s)")
    p.add_argument("--reuse", action="append", default=[], metavar="NAME=DIR",
                   help="take NAME's directory from an earlier run of its command")
    p.add_argument("--jobs", default="2")
    args = p.parse_args(argv)
    reuse = dict(r.split("=", 1) for r in args.reuse)
    dest = ROOT / "docs" / "figures"
    dest.mkdir(parents=True, exist_ok=True)
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        command, figures = FIGURES[name]
        directory = Path(reuse[name]) if name in reuse else args.out / name
        if name not in reuse:
            if command[0] == "compare":
                evroute(*command, "--out", str(directory), "--jobs", args.jobs, "--no-progress")
            else:
                evroute(*command, "--out", str(directory), "--overwrite")
        plots = args.out / f"{name}-plots"
        if command[0] == "compare":
            evroute("plot", str(directory), "--out", str(plots), "--overwrite")
        else:
            plots = directory
        for stem, target in figures:
            shrink(plots / f"{stem}.png", dest / f"{target}.png")
            print(f"docs/figures/{target}.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
