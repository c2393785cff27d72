"""Atomic file writes and the one strict-JSON writer of the package.

Readers see the old file or the whole new one, never a torn one. Every JSON file the package writes
(sidecars, reports, summaries, trainer state) goes through `write_json`: strict JSON, where an
undefined metric (NaN, inf) is `null`, so any parser (a browser, Go, Rust, FastAPI's responses) reads it.
Written files get the mode the process umask gives any new file (0644 under umask 022), like the
files `save_pretrained` writes beside them.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    """The process umask, read without changing it where Linux reports it (/proc), else by a swap."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[IO[str]]:
    """Write to a temporary file beside `path`, fsync, then rename over it; on error nothing changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600: a shared checkpoint would be unreadable
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def occupied(path: str | os.PathLike) -> bool:
    """Whether `path` is a file or a non-empty folder: what `atomic_folder` never replaces."""
    out = Path(path)
    return out.exists() and (any(out.iterdir()) if out.is_dir() else True)


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """A new folder built in a temporary folder beside `path` and renamed to it when the block ends without
    error (then readable by others, as any checkpoint is); on error nothing is left. `path` must not be
    `occupied`: the caller refuses that first, with its own words."""
    import shutil

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it 0700
        if out.is_dir():
            out.rmdir()  # empty, or this raises and nothing is overwritten
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def json_safe(obj: Any) -> Any:
    """NaN/inf become null, numpy scalars and arrays plain numbers and lists, paths strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays, without importing numpy here
    if callable(tolist):
        return json_safe(tolist())
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON text of `obj` (see `json_safe`); anything else non-serialisable raises TypeError."""
    return json.dumps(json_safe(obj), allow_nan=False, **kwargs)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Strict JSON, indented with sorted keys, written atomically (folders created as needed)."""
    text = dumps(obj, indent=2, sort_keys=True)
    with atomic_open(path) as f:
        f.write(text + "\n")
