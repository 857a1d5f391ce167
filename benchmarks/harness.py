"""What every benchmark and reproduction shares.

- :func:`parser`: the arguments every script takes (``--out DIR``, ``--seed N``), its help from
  the script's docstring;
- :func:`median_seconds`, :func:`spread`, :func:`peak_rss_gb`: timing by medians and memory;
- :class:`Table`: a Markdown table printed row by row as the rows come;
- :func:`finish`: the hardware line printed under the tables, and with ``--out`` the result
  written as ``NAME.md`` and ``NAME.json`` (the command, the hardware, the tables);
  :func:`write_rows`: the raw rows as ``NAME.csv``.

A script in ``benchmarks/`` or ``reproductions/`` starts with::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and this module
    from benchmarks.harness import Table, finish, parser
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The reference data beside the checkout where nothing else is set (as the tests read them).
if "EVROUTE_DATA_DIR" not in os.environ and (ROOT.parent / "shared" / "data").is_dir():
    os.environ["EVROUTE_DATA_DIR"] = str(ROOT.parent / "shared" / "data")


def parser(doc: str | None, *, seed: int | None = None, out: bool = True,
           out_required: bool = False) -> argparse.ArgumentParser:
    """An argument parser whose description is the first paragraph of ``doc`` and whose epilog is
    the rest; with ``--out DIR`` (where the result goes) and, when ``seed`` is given, ``--seed N``
    (default ``seed``)."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    p = argparse.ArgumentParser(description=head, epilog=rest or None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if out:
        p.add_argument("--out", type=Path, required=out_required, default=None, metavar="DIR",
                       help="write the result here as NAME.md and NAME.json (and what the script keeps)"
                       + ("" if out_required else "; default: print only"))
    if seed is not None:
        p.add_argument("--seed", type=int, default=seed, help="the random seed (default: %(default)s)")
    return p


def median_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    """The median wall time of ``repeats`` calls of ``fn`` (seconds), and every call's."""
    times = []
    for _ in range(max(1, repeats)):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return float(_median(times)), times


def spread(seconds: Sequence[float]) -> dict[str, float]:
    """Median, 95th percentile, maximum and mean of a list of timings (seconds)."""
    import numpy as np

    s = np.asarray(seconds, dtype=float)
    return {"median": float(np.median(s)), "p95": float(np.percentile(s, 95)), "max": float(s.max()),
            "mean": float(s.mean())}


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (ddof = 1); the error is NaN for fewer than two values."""
    v = [float(x) for x in values]
    mean = sum(v) / len(v)
    if len(v) < 2:
        return mean, float("nan")
    var = sum((x - mean) ** 2 for x in v) / (len(v) - 1)
    return mean, math.sqrt(var / len(v))


def peak_rss_gb(children: bool = False) -> float:
    """The peak resident memory so far, GB: this process's, or its largest finished child's."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    kib = resource.getrusage(who).ru_maxrss  # KiB on Linux
    return kib / 1024**2


def hardware() -> str:
    """One line: the CPU, the CPUs this process may use, the memory, the system and the versions of
    Python, NumPy and SciPy, and the BLAS threads where the environment limits them."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 1024**3:.0f} GB"
    except (ValueError, OSError, AttributeError):
        memory = ""
    versions = [f"Python {platform.python_version()}"]
    for module in ("numpy", "scipy"):
        mod = sys.modules.get(module)
        if mod is not None:
            versions.append(f"{module.replace('numpy', 'NumPy').replace('scipy', 'SciPy')} {mod.__version__}")
    blas = next((f", BLAS threads {os.environ[k]}" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
                 if k in os.environ), "")
    return f"{cpu}, {cpus} CPUs{memory}, {platform.system()} {platform.machine()}; {', '.join(versions)}{blas}"


class Table:
    """A Markdown table. Each row is printed as it is added (the header before the first), so a
    long benchmark shows its rows as it goes; :meth:`markdown` gives the whole table."""

    def __init__(self, columns: Sequence[str], *, align: str | None = None, title: str | None = None,
                 stream: bool = True):
        self.columns = list(columns)
        self.align = align if align is not None else "l" + "r" * (len(self.columns) - 1)
        self.title = title
        self.rows: list[list[str]] = []
        self.stream = stream

    def _header(self) -> list[str]:
        rule = ["---:" if a == "r" else "---" for a in self.align.ljust(len(self.columns), "r")]
        lines = [] if self.title is None else [self.title, ""]
        return lines + ["| " + " | ".join(self.columns) + " |", "| " + " | ".join(rule) + " |"]

    def add(self, *cells: object) -> None:
        """A row, its cells formatted with ``str``."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        row = [str(c) for c in cells]
        if self.stream and not self.rows:
            print("\n".join(self._header()), flush=True)
        self.rows.append(row)
        if self.stream:
            print("| " + " | ".join(row) + " |", flush=True)

    def markdown(self) -> str:
        return "\n".join(self._header() + ["| " + " | ".join(r) + " |" for r in self.rows])

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def command_line() -> str:
    """The command that ran, as typed (the script's path relative to the checkout where it is in it)."""
    script = Path(sys.argv[0]).resolve()
    name = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else sys.argv[0]
    return shlex.join(["python", name, *sys.argv[1:]])


def finish(out: Path | None, name: str, *tables: Table, notes: Sequence[str] = (), data: dict | None = None) -> None:
    """Print the tables not yet printed, the notes and the hardware line; with ``out``, write
    ``out/NAME.md`` (the command, the tables, the notes, the hardware) and ``out/NAME.json`` (the
    same as data, plus ``data``)."""
    for t in tables:
        if not t.stream:
            print(t.markdown() + "\n", flush=True)
    for n in notes:
        print(n)
    line = hardware()
    print(f"\nHardware: {line}", flush=True)
    if out is None:
        return
    from evroute.io import atomic_write_with

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    command = command_line()
    md = [f"`{command}`", ""] + [t.markdown() + "\n" for t in tables] + [*notes, "", f"Hardware: {line}", ""]
    atomic_write_with(out / f"{name}.md", lambda p: p.write_text("\n".join(md), encoding="utf-8"))
    record = {"command": command, "hardware": line,
              "tables": [{"title": t.title, "columns": t.columns, "rows": t.records()} for t in tables],
              "notes": list(notes), **(data or {})}
    atomic_write_with(out / f"{name}.json",
                      lambda p: p.write_text(json.dumps(record, indent=2, default=str), encoding="utf-8"))
    print(f"wrote {out / name}.md and .json", flush=True)


def write_rows(out: Path | None, name: str, rows: Sequence[dict]) -> None:
    """With ``out``, the raw rows as ``out/NAME.csv`` (written whole or not at all)."""
    if out is None:
        return
    import pandas as pd

    from evroute.io import atomic_write_with

    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_with(Path(out) / f"{name}.csv", lambda p: pd.DataFrame(list(rows)).to_csv(p, index=False))


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
