"""The reference datasets: the real road networks and the terrain model that the docs, the
papers' reproductions and the tests use (``evroute data fetch``, ``evroute data list``).

Each dataset is pinned in ``data/datasets.json`` by the URL of one commit of its public source
and the SHA-256 of the file there; evroute downloads it with :mod:`pooch` (which checks the hash
before the file takes its name), into the data folder: ``--data-dir``, else ``$EVROUTE_DATA_DIR``,
else the user data folder (:func:`platformdirs.user_data_dir`). Every reader of a built-in network
looks there (:func:`data_dir`).

* A download that breaks off keeps what it received as ``.NAME.part`` in the data folder and the
  next ``evroute data fetch`` resumes it (an HTTP range request); a file whose hash differs is
  deleted, never kept under its name.
* A file already present under a dataset's name is verified, never replaced unless it was
  evroute's download or the user says ``--overwrite`` (and never when it is a link or a device:
  :func:`evroute.io.check_replaceable`).
* Luxembourg's terrain model is published in centimetres (uint16, 0 = no data); evroute keeps
  the published file in ``sources/`` and writes the metres the network reader expects
  (float32, no data −9999), verified by the SHA-256 of its values.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pooch
import requests

from ..errors import EvrouteError, Interrupted
from ..io import atomic_path, check_replaceable
from ..registry import load_registry

__all__ = ["data_dir", "dataset_names", "dataset", "dataset_path", "find_data_file", "DatasetState",
           "dataset_state", "fetch_datasets", "DATA_FETCH_HINT"]

#: What to tell a user whose data are missing.
DATA_FETCH_HINT = "run `evroute data fetch all` (or set EVROUTE_DATA_DIR to a folder holding the files)"

#: Seconds without a byte before a download is given up (it resumes on the next try).
TIMEOUT_S = 60
#: Bytes written to the part file at a time (a broken connection loses at most the last chunk).
_CHUNK = 1 << 14


def data_dir(folder: str | os.PathLike | None = None) -> Path:
    """The data folder: ``folder`` if given, else ``$EVROUTE_DATA_DIR``, else the user data
    folder (``~/.local/share/evroute`` on Linux).

    Returns
    -------
    pathlib.Path
        The folder (it may not exist yet).
    """
    if folder is not None:
        return Path(folder).expanduser()
    env = os.environ.get("EVROUTE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("evroute"))


def dataset_names() -> list[str]:
    """The pinned datasets' names (``monaco``, ``luxembourg``, ``luxembourg-dem``)."""
    return list(load_registry("datasets"))


def dataset(name: str) -> dict:
    """The registry entry of dataset ``name`` (file, url, sha256, bytes, source, licence).

    Raises
    ------
    EvrouteError
        For an unknown name, listing the known ones.
    """
    reg = load_registry("datasets")
    if name not in reg:
        raise EvrouteError(f"unknown dataset {name!r}; datasets: {', '.join(reg)} (or all)")
    return reg[name]


def dataset_path(name: str, folder: str | os.PathLike | None = None) -> Path:
    """Where dataset ``name`` lives in the data folder (present or not)."""
    return data_dir(folder) / dataset(name)["file"]


def find_data_file(file: str) -> Path | None:
    """The file ``file`` (``monaco-most.osm``) in the data folder, if it is there."""
    path = data_dir() / file
    return path if path.is_file() else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _values_sha256(path: Path) -> str | None:
    """SHA-256 of a raster's first band as little-endian float32 (None when unreadable)."""
    import numpy as np
    import rasterio

    try:
        with rasterio.open(path) as src:
            values = src.read(1)
    except Exception:  # noqa: BLE001 (any unreadable raster is "differs")
        return None
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f4").tobytes()).hexdigest()


def _verified(entry: dict, path: Path) -> bool:
    if "values_sha256" in entry:
        return _values_sha256(path) == entry["values_sha256"]
    return _sha256(path) == entry["sha256"]


@dataclass(frozen=True)
class DatasetState:
    """What the data folder holds of one dataset.

    Attributes
    ----------
    name, path : str, pathlib.Path
        The dataset and where it lives.
    state : str
        ``present`` (verified), ``missing``, ``differs`` (a file of that name whose hash is not
        the pinned one) or ``partial`` (a download to resume).
    bytes_kept : int
        Bytes of a partial download.
    """

    name: str
    path: Path
    state: str
    bytes_kept: int = 0


def _partial(folder: Path, entry: dict) -> Path:
    """A download in progress: received bytes of the published file (the source of a converted one)."""
    return folder / f".{Path(entry['url']).name if 'convert' in entry else entry['file']}.part"


def dataset_state(name: str, folder: str | os.PathLike | None = None) -> DatasetState:
    """Whether dataset ``name`` is present and verified, missing, different or half-downloaded.

    Returns
    -------
    DatasetState
    """
    entry, root = dataset(name), data_dir(folder)
    path = root / entry["file"]
    if path.is_file():
        return DatasetState(name, path, "present" if _verified(entry, path) else "differs")
    part = _partial(root, entry)
    if part.is_file():
        return DatasetState(name, path, "partial", part.stat().st_size)
    return DatasetState(name, path, "missing")


class _ResumableDownloader:
    """A :mod:`pooch` downloader that keeps what it received in ``part`` and continues from there
    (an HTTP ``Range`` request) on the next call; ``progress`` is told the bytes as they come."""

    def __init__(self, part: Path, progress=None):
        self.part, self.progress = part, progress

    def __call__(self, url, output_file, pooch_obj, check_only=False):
        have = self.part.stat().st_size if self.part.is_file() else 0
        headers = {"Accept-Encoding": "identity"}  # byte ranges of the file itself, not of a compressed copy
        if have:
            headers["Range"] = f"bytes={have}-"
        with requests.get(url, headers=headers, stream=True, timeout=TIMEOUT_S) as response:
            if response.status_code == 416:  # the part is already whole (or longer): start again
                self.part.unlink()
                return self(url, output_file, pooch_obj)
            response.raise_for_status()
            if have and response.status_code != 206:  # the server ignored the range
                have = 0
            total = int(response.headers.get("content-length", 0)) + have
            if self.progress is not None:
                self.progress(have, total or None)
            with open(self.part, "ab" if have else "wb") as fh:
                for chunk in response.iter_content(chunk_size=_CHUNK):
                    fh.write(chunk)
                    have += len(chunk)
                    if self.progress is not None:
                        self.progress(have, total or None)
        shutil.copyfile(self.part, output_file)


def _describe_failure(exc: Exception, entry: dict, url: str, part: Path) -> str:
    kept = part.stat().st_size if part.is_file() else 0
    if isinstance(exc, requests.exceptions.HTTPError):
        return f"cannot download {entry['file']} from {url}: HTTP {exc.response.status_code}"
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout) and not kept:
        reason = "timed out" if isinstance(exc, requests.exceptions.Timeout) else "no connection"
        return f"cannot download {entry['file']} from {url}: {reason} (is this machine online?)"
    return (f"the download of {entry['file']} from {url} broke off after {kept:,} of {entry['bytes']:,} bytes; "
            "run the same command again to resume it")


def _download(entry: dict, target: Path, url: str, part: Path, progress) -> None:
    """``url`` into ``target`` through pooch, checked against the pinned SHA-256; the bytes
    received so far are kept in ``part`` for a later resume, a file with the wrong hash deleted."""
    pooch.get_logger().setLevel("WARNING")  # evroute says what it downloaded, in one line
    try:
        pooch.retrieve(url, known_hash=f"sha256:{entry['sha256']}", fname=target.name, path=target.parent,
                       downloader=_ResumableDownloader(part, progress))
    except ValueError as exc:  # pooch: the hash differs
        part.unlink(missing_ok=True)
        if "hash" not in str(exc).lower():
            raise
        raise EvrouteError(f"{entry['file']} from {url} does not have the pinned SHA-256 {entry['sha256'][:16]}…; "
                           "deleted it (the source changed, or a proxy altered it)") from None
    except requests.exceptions.RequestException as exc:
        raise EvrouteError(_describe_failure(exc, entry, url, part)) from None
    except KeyboardInterrupt:
        raise Interrupted(f"the download of {entry['file']} stopped; run the same command again to resume it") from None
    part.unlink(missing_ok=True)


def _centimetres_to_metres(source: Path, target: Path, shown: str) -> None:
    """The published DEM (uint16 centimetres, 0 = no data) as float32 metres with no data −9999."""
    import numpy as np
    import rasterio

    with rasterio.open(source) as src:
        cm, profile = src.read(1), src.profile
    metres = np.where(cm != 0, (cm / 100.0).astype(np.float32), np.float32(-9999.0))
    profile.update(dtype="float32", nodata=-9999.0, compress="deflate")
    with atomic_path(target, shown) as tmp, rasterio.open(tmp, "w", **profile) as dst:
        dst.write(metres, 1)


def fetch_datasets(names, folder: str | os.PathLike | None = None, *, base_url: str | None = None,
                   overwrite: bool = False, progress=None) -> list[tuple[str, Path, str]]:
    """Download the named datasets into the data folder and verify them.

    Parameters
    ----------
    names : iterable of str
        Dataset names, or ``all``.
    folder : path-like, optional
        The data folder (default :func:`data_dir`).
    base_url : str, optional
        A mirror holding the published files under their published names (the last part of
        each pinned URL), e.g. a local copy; the pinned hashes still apply.
    overwrite : bool
        Replace a file of a dataset's name that is not the pinned file (never a link or a
        device).
    progress : callable, optional
        ``progress(name, bytes_done, bytes_total)`` while a file downloads.

    Returns
    -------
    list of (str, pathlib.Path, str)
        Each dataset, its path and what was done: ``present`` (already there and verified),
        ``downloaded`` or ``resumed``.

    Raises
    ------
    EvrouteError
        An unknown name; a file in the way; a failed download or a hash that differs (one line,
        naming the file and the URL).
    """
    names = list(names)
    wanted = dataset_names() if "all" in names else list(dict.fromkeys(names))
    entries = {name: dataset(name) for name in wanted}  # unknown names fail before any download
    root = data_dir(folder)
    done = []
    for name, entry in entries.items():
        state = dataset_state(name, root)
        if state.state == "present":
            done.append((name, state.path, "present"))
            continue
        if state.state == "differs":
            check_replaceable(state.path, overwrite=overwrite)  # a user's file stays unless --overwrite
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvrouteError(f"cannot create the data folder {root}: {exc.strerror or exc}") from None
        url = entry["url"] if base_url is None else f"{base_url.rstrip('/')}/{Path(entry['url']).name}"
        report = None if progress is None else (lambda done_, total, _n=name: progress(_n, done_, total))
        part = _partial(root, entry)
        if "convert" in entry:
            source = root / "sources" / Path(entry["url"]).name
            source.parent.mkdir(exist_ok=True)
            if source.is_file() and _sha256(source) != entry["sha256"]:
                check_replaceable(source, overwrite=overwrite)
                source.unlink()
            _download(entry, source, url, part, report)
            _centimetres_to_metres(source, state.path, str(state.path))
            if not _verified(entry, state.path):
                state.path.unlink()
                raise EvrouteError(f"{entry['file']} converted from {source} does not have the pinned values "
                                   f"(SHA-256 {entry['values_sha256'][:16]}…); deleted it")
        else:
            if state.state == "differs":
                state.path.unlink()
            _download(entry, state.path, url, part, report)
        done.append((name, state.path, "resumed" if state.state == "partial" else "downloaded"))
    return done
