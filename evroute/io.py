"""Atomic file writes, and the one rule for what evroute may replace.

A killed process never leaves a half-written file under the final name: every file is
written to a temporary file beside the target, then renamed. Temporary files and folders
are created private (mode 0600/0700) by :mod:`tempfile`; what is renamed into place gets the
permissions an ordinary ``open``/``mkdir`` would have given it (0666/0777 less the process
umask), so results stay readable by others on a shared file system.

The rule (:func:`check_replaceable`): an existing path is replaced only if it is a regular
file that evroute wrote (every file evroute writes says so inside: :func:`written_by_evroute`)
or the user said ``--overwrite``; a symbolic link, a directory, a device or a pipe is never
replaced, and :func:`atomic_path` refuses to rename over one whatever the caller checked.
Errors name the path the user gave, never a temporary file.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import __version__
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
    """Chmod a file or folder made by :mod:`tempfile` to :func:`public_mode`."""
    os.chmod(path, public_mode(directory))


#: The text every file evroute writes carries (GeoJSON ``generator``, an HTML comment, the
#: PNG ``Software`` and SVG ``Creator`` metadata, the GeoPackage's layer descriptions, the OSM
#: XML ``generator``): how :func:`written_by_evroute` recognises them.
GENERATOR_PREFIX = "evroute"


def generator() -> str:
    """``evroute <version>``: the generator mark of the files evroute writes."""
    return f"{GENERATOR_PREFIX} {__version__}"


#: ``-`` as an output path: standard output, for writers that can stream (``--geojson -``).
STDOUT = "-"


def is_stdout(path) -> bool:
    """Whether an output path is ``-`` (standard output)."""
    return str(path) == STDOUT


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_special(path: Path, shown) -> bool:
    """One-line error if ``path`` is a link, a directory, a device, a pipe or a socket;
    True when it is an existing regular file, False when nothing is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise EvrouteError(f"cannot write {shown}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise EvrouteError(f"{shown} is a symbolic link; evroute never replaces a link (give a new file's path)")
    if not stat.S_ISREG(st.st_mode):
        raise EvrouteError(f"{shown} is {_file_kind(st.st_mode)}; evroute writes only regular files and never "
                           "replaces anything else")
    return True


def check_parent(path: str | os.PathLike, shown=None) -> None:
    """One-line error when a folder on the way to ``path`` exists and is not a folder
    (``--out notes.txt/run``), naming the path the user gave."""
    path = Path(path)
    shown = path if shown is None else shown
    for anc in path.parents:
        try:
            st = os.stat(anc)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue  # a file further up: reported when that ancestor is reached
        except OSError as exc:
            raise EvrouteError(f"cannot write {shown}: {exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise EvrouteError(f"cannot write {shown}: {anc} is not a directory")
        return


def check_replaceable(path: str | os.PathLike, *, overwrite: bool = False, ours=None) -> None:
    """Whether evroute may write ``path``, replacing what is there: the rule for every file it
    writes (see the module docstring). A command checks a path the user gave with
    :func:`evroute.runs.directory.check_output_file`, which also keeps a run's own files.

    Parameters
    ----------
    path : path-like
        The file the user asked for.
    overwrite : bool
        The user's ``--overwrite``: a regular file evroute did not write may be replaced.
    ours : callable, optional
        ``ours(path) -> bool``: whether an existing regular file is evroute's to replace
        (default :func:`written_by_evroute`).

    Raises
    ------
    EvrouteError
        ``path`` is a link, a directory, a device or a pipe; a folder on the way is a file;
        or it is a regular file evroute did not write and ``overwrite`` is False.
    """
    path = Path(path)
    check_parent(path)
    if not _refuse_special(path, path):
        return
    if overwrite or (ours or written_by_evroute)(path):
        return
    raise EvrouteError(f"{path} exists and was not written by evroute; use --overwrite to replace it")


_SVG_CREATOR = re.compile(rb"<dc:creator>\s*<cc:Agent>\s*<dc:title>" + GENERATOR_PREFIX.encode())


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def written_by_evroute(path: str | os.PathLike) -> bool:
    """Whether the regular file ``path`` carries evroute's generator mark (:data:`GENERATOR_PREFIX`):
    a GeoJSON ``"generator"`` member first after ``"type"``, an HTML comment after the doctype, the
    ``Software`` text of a PNG, the ``Creator`` of an SVG, the layer descriptions of a GeoPackage,
    the ``generator`` attribute of an OSM XML file, a comment ``<!-- generator: ... -->`` right after
    another XML file's declaration, the ``creator`` of a GPX file, a JSON object's first member ``"generator"``, a
    Parquet file's ``generator`` metadata, a CSV's first line ``# generator: ...``."""
    path = Path(path)
    if not path.is_file() or path.is_symlink():
        return False
    mark = GENERATOR_PREFIX.encode()
    head = _head(path, 4096)
    if head.startswith(b'{"type":"FeatureCollection","generator":"' + mark):
        return True
    if head.startswith(b"<!DOCTYPE html>\n<!-- generator: " + mark):
        return True
    if head.startswith(b"<?xml") and (b' generator="' + mark in head[:400]  # OSM XML
                                      or b"?>\n<!-- generator: " + mark in head[:200]  # other XML
                                      or b' creator="' + mark in head[:1000]  # GPX
                                      or _SVG_CREATOR.search(head) is not None):  # SVG
        return True
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png_software(path).startswith(GENERATOR_PREFIX)
    if head.startswith(b"SQLite format 3\x00"):
        return _gpkg_generator(path)
    if _JSON_GENERATOR.match(head) is not None:  # a JSON object whose first member is "generator"
        return True
    if head.startswith(b"PAR1"):
        return _parquet_generator(path)
    if head.startswith(b"# generator: " + mark):  # a CSV with a comment line first
        return True
    return False


_JSON_GENERATOR = re.compile(rb'\{\s*"generator":\s*"' + re.escape(GENERATOR_PREFIX.encode()))


def _parquet_generator(path: Path) -> bool:
    """Whether a Parquet file's key-value metadata names evroute as its generator."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):
        return False
    return meta.get(b"generator", b"").startswith(GENERATOR_PREFIX.encode())


def atomic_write_parquet(path: str | os.PathLike, df) -> None:
    """Write a DataFrame as Parquet atomically, with evroute's generator mark in the file's
    key-value metadata (so that evroute recognises the file as its own)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"generator": generator().encode()})
    atomic_write_with(path, lambda p: pq.write_table(table, p))


def _png_software(path: Path) -> str:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            return str(img.info.get("Software", ""))
    except (OSError, UnidentifiedImageError, ValueError):
        return ""


def _gpkg_generator(path: Path) -> bool:
    """Whether every layer of the GeoPackage is described as evroute's (read-only query)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        rows = con.execute("SELECT description FROM gpkg_contents").fetchall()
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return bool(rows) and all(str(r[0] or "").startswith(GENERATOR_PREFIX) for r in rows)


@contextmanager
def atomic_path(path: str | os.PathLike, shown=None):
    """Yield a temporary path in the target's folder; rename it to ``path`` on success.

    The rename never replaces a link, a directory, a device or a pipe (checked again just
    before it, whatever the caller checked); errors name ``shown`` (default ``path``), the
    path the user gave, never the temporary file.

    Parameters
    ----------
    path : path-like
        The final file name.
    shown : object, optional
        How to name the target in messages.
    """
    path = Path(path)
    shown = path if shown is None else shown
    check_parent(path, shown)
    _refuse_special(path, shown)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise EvrouteError(f"cannot write {shown}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        make_public(tmp)
        _refuse_special(path, shown)  # it may have changed while the file was written
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, EvrouteError):
            raise EvrouteError(f"cannot write {shown}: {exc.strerror or exc}") from None
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``-``: to standard output)."""
    if is_stdout(path):
        stream = getattr(sys.stdout, "buffer", None)
        if stream is None:  # a text stream that holds no bytes (a capture): its text
            sys.stdout.write(data.decode("utf-8"))
        else:
            stream.write(data)
        sys.stdout.flush()
        return
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (``-``: to standard output)."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
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


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


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
    check_parent(path)
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
