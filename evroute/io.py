"""Atomic file writes: write to a temporary file beside the target, then rename.

A killed process never leaves a half-written file under the final name. Temporary files
and folders are created private (mode 0600/0700) by :mod:`tempfile`; what is renamed into
place gets the permissions an ordinary ``open``/``mkdir`` would have given it (0666/0777
less the process umask), so results stay readable by others on a shared file system.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import EvrouteError


@functools.cache
def _umask() -> int:
    # the only portable way to read it is to set it and restore it: do that once, not on
    # every write (another thread could create a file in between)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def public_mode(directory: bool = False) -> int:
    """Mode an ordinary ``open`` (0666) or ``mkdir`` (0777) gives under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


def make_public(path: str | os.PathLike, directory: bool = False) -> None:
    """chmod a file or folder made by :mod:`tempfile` to :func:`public_mode`."""
    os.chmod(path, public_mode(directory))


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path in the target's folder; rename it to ``path`` on success.

    Parameters
    ----------
    path : path-like
        The final file name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        make_public(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (keys kept in insertion order)."""
    atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=True) + "\n")


def atomic_write_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> None:
    """Call ``writer(tmp_path)`` and rename the result to ``path`` atomically.

    Use it for writers that take a path, e.g. ``df.to_parquet``.
    """
    with atomic_path(path) as tmp:
        writer(tmp)


def available_memory() -> int | None:
    """Bytes of physical memory available now (None where the system does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def directory_entries(path: str | os.PathLike, what: str = "output directory") -> list[str] | None:
    """Sorted names in the directory ``path``, or None when it does not exist.

    Raises
    ------
    EvrouteError
        ``path`` is a file, or the directory cannot be read (one line naming ``what``).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise EvrouteError(f"{what} {path} exists and is not a directory")
    if not path.is_dir():
        return None
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError as exc:
        raise EvrouteError(f"cannot read the {what} {path}: {exc.strerror}") from None


def short_list(names: list[str], k: int = 3) -> str:
    """``a, b, c, ...``: the first ``k`` names for a one-line message."""
    return ", ".join(names[:k]) + (", ..." if len(names) > k else "")
