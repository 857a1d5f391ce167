"""On-disk cache of prepared networks and expensive factors.

An entry is a folder ``<cache>/<kind>/<key>/`` holding data files and a ``manifest.json``
(written last, atomically) that lists every file with its SHA-256. An entry is used only
when the manifest exists and every checksum matches; anything else (a crash mid-write, a
corrupted or truncated file) counts as a miss and the entry is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .errors import EvrouteError
from .io import atomic_write_bytes, atomic_write_json

CACHE_FORMAT = 1


def cache_dir() -> Path:
    """The cache root: ``$EVROUTE_CACHE_DIR`` or the user cache directory."""
    env = os.environ.get("EVROUTE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("evroute"))


def hash_bytes(*parts: bytes | str) -> str:
    """SHA-256 hex digest of the concatenated parts (strings encoded as UTF-8)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8") if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()


def hash_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def make_key(params: dict) -> str:
    """A short stable key for a JSON-serialisable parameter dict."""
    return hash_bytes(json.dumps(params, sort_keys=True, default=str))[:20]


class CacheEntry:
    """One cache folder; see the module docstring for the integrity rules."""

    def __init__(self, kind: str, key: str, root: Path | None = None):
        self.root = (root or cache_dir()) / kind / key
        self.manifest_path = self.root / "manifest.json"

    def is_valid(self, names: Iterable[str]) -> bool:
        """True when the manifest lists ``names`` and every listed checksum matches."""
        try:
            manifest = json.loads(self.manifest_path.read_text())
            files = manifest["files"]
            if manifest.get("format") != CACHE_FORMAT or not set(names) <= set(files):
                return False
            return all(hash_file(self.root / n) == digest for n, digest in files.items())
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def path(self, name: str) -> Path:
        return self.root / name

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def commit(self, names: Iterable[str], extra: dict | None = None) -> None:
        """Write the manifest for files already written into the entry."""
        files = {n: hash_file(self.root / n) for n in names}
        atomic_write_json(self.manifest_path, {"format": CACHE_FORMAT, "files": files, **(extra or {})})

    def prepare(self) -> None:
        """Start (re)writing the entry: drop any old manifest, make the folder."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.manifest_path.unlink(missing_ok=True)
        except OSError as exc:
            raise EvrouteError(f"cache directory {self.root} is not writable: {exc.strerror}") from None


def cached_arrays(kind: str, params: dict, builder, *, names: tuple[str, ...] = ("value",)) -> dict:
    """Return arrays from the cache, building and storing them on a miss.

    Parameters
    ----------
    kind : str
        Cache sub-folder (e.g. ``"kernel"``).
    params : dict
        Everything the arrays depend on (JSON-serialisable); hashed into the key.
    builder : callable
        ``builder() -> dict[name, numpy.ndarray]`` with the given ``names``.
    """
    entry = CacheEntry(kind, make_key(params))
    files = [f"{n}.npy" for n in names]
    if entry.is_valid(files):
        try:
            return {n: np.load(entry.path(f"{n}.npy"), allow_pickle=False) for n in names}
        except (OSError, ValueError):
            pass
    arrays = builder()
    try:
        entry.prepare()
        for n in names:
            buf = _npy_bytes(arrays[n])
            atomic_write_bytes(entry.path(f"{n}.npy"), buf)
        entry.commit(files, {"params": params})
    except (OSError, EvrouteError):
        pass  # an unwritable cache only costs time
    return arrays


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    bio = io.BytesIO()
    np.save(bio, np.ascontiguousarray(arr), allow_pickle=False)
    return bio.getvalue()
