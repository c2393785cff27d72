"""Append-only JSONL outputs, so a select command stopped mid-run (server gone, Ctrl-C) resumes.

Each append is one write of whole lines followed by fsync; a line torn by a kill mid-write is cut
off when the file is opened again. The rows already there are the done-set of the rerun.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..atomic import atomic_open, dumps, write_json


class AppendLog:
    """`rows` holds what the file already contains; `append(rows)` adds and persists more."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []
        good_end = 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        if not line.endswith(b"\n"):
                            raise ValueError("torn line")
                        row = json.loads(line)
                    except ValueError:
                        break
                    self.rows.append(row)
                    good_end += len(line)
            if good_end < self.path.stat().st_size:
                os.truncate(self.path, good_end)
        self._f = open(self.path, "a", encoding="utf-8")

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        self._f.write("".join(dumps(r, ensure_ascii=False) + "\n" for r in rows))
        self._f.flush()
        os.fsync(self._f.fileno())
        self.rows += rows

    def keep(self, wanted: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite the file (atomically) with only the wanted rows; the number removed."""
        kept = [r for r in self.rows if wanted(r)]
        removed = len(self.rows) - len(kept)
        if removed:
            self._f.close()
            with atomic_open(self.path) as f:
                f.write("".join(dumps(r, ensure_ascii=False) + "\n" for r in kept))
            self.rows = kept
            self._f = open(self.path, "a", encoding="utf-8")
        return removed

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_job(path: str | os.PathLike, identity: dict[str, Any]) -> None:
    """Refuse to resume into outputs written with other settings or another model (rows would mix):
    the first run records `identity` in `path`, later runs must match it."""
    path = Path(path)
    if not path.exists():
        write_json(path, identity)
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    changed = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
    if changed:
        was = ", ".join(f"{k}={old.get(k)!r}" for k in changed)
        now = ", ".join(f"{k}={identity.get(k)!r}" for k in changed)
        raise ValueError(f"{path.parent} holds a run with {was}, this one has {now}: rerun with the same settings to resume, "
                         f"or choose another --output")
