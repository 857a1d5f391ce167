"""What an import of traces kept, dropped and why (:class:`ImportReport`): filled by the readers of
the files (:mod:`evroute.world.trace_formats`, :mod:`evroute.world.traces`) and by the import
(:func:`evroute.world.drives.import_traces`), written as ``report.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ImportReport"]


@dataclass
class ImportReport:
    """What an import kept, dropped and why: ``problems`` (one line each, naming the file and the
    trip or row; printed as ``warning:`` lines), ``flags`` (how many of those lines of each kind,
    :data:`evroute.world.plausibility.FLAG_KINDS`), ``dropped`` (how many fixes, traversals or
    trips each reason dropped), ``skipped`` (the files not read, and why) and ``formats`` (per
    file, how it was read: separator, decimal mark, encoding, time, columns and units)."""

    files: int = 0
    fixes_read: int = 0
    fixes_dropped: int = 0
    trips_read: int = 0
    trips_kept: int = 0
    fixes_matched: int = 0
    traversals: int = 0
    trips_speed_estimated: int = 0
    problems: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    flags: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    formats: dict[str, dict] = field(default_factory=dict)

    def drop(self, why: str, n: int = 1) -> None:
        """Count ``n`` things dropped for ``why``."""
        self.dropped[why] = self.dropped.get(why, 0) + int(n)

    def flag(self, kind: str, line: str) -> None:
        """One problem of ``kind``: a line for the user, counted in ``flags``."""
        self.problems.append(line)
        self.flags[kind] = self.flags.get(kind, 0) + 1

    def why_empty(self) -> str:
        """Why no traversal came of the import, in words."""
        if not self.files:
            return (f"none of the {len(self.skipped):,} files could be read" if self.skipped
                    else "no trace file")
        if not self.trips_read:
            return "the files hold no trip"
        if self.dropped.get("fewer than 2 fixes", 0) >= self.trips_read:
            return "every trip has fewer than 2 fixes"
        if not self.fixes_matched:
            return f"no fix of the {self.trips_read:,} trips lies on the network's roads (another network?)"
        if self.dropped.get("no complete traversal", 0) >= self.trips_read:
            return (f"no trip drove a whole edge ({self.fixes_matched:,} of {self.fixes_read:,} fixes placed on the "
                    "network; the first and last edge of a trip are partial)")
        return f"every traversal of the {self.trips_read:,} trips was dropped as implausible (the warnings say why)"

    def to_dict(self) -> dict:
        """The report as ``report.json`` holds it."""
        return {"files": self.files, "fixes_read": self.fixes_read, "fixes_dropped": self.fixes_dropped,
                "trips_read": self.trips_read, "trips_kept": self.trips_kept, "fixes_matched": self.fixes_matched,
                "traversals": self.traversals, "trips_speed_estimated": self.trips_speed_estimated,
                "dropped": dict(sorted(self.dropped.items())), "flags": dict(sorted(self.flags.items())),
                "skipped": list(self.skipped), "formats": dict(self.formats), "problems": list(self.problems)}
