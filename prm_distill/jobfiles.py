"""The files of a resumable job, shared by rollout, labeling and the select commands: an append-only
JSONL log, the job-identity check, and shards merged at the end. All JSONL goes through the strict
writer (`atomic.dumps`: NaN and inf are null).

- `AppendLog`: each append is one write of whole lines followed by fsync; a line torn by a kill
  mid-write is cut off when the file is opened again. Its rows are the done-set of a rerun (the
  labeling response cache, the select outputs).
- `check_job`: the first run records its settings in `job.json`; a rerun into the same folder must
  match them, so outputs of two settings (or two policies, two judges) never mix. Only outputs are
  guarded: a run refused before writing anything (a wrong `--policy` that fails to load) leaves
  just `job.json`, and a rerun with other settings takes the folder over.
- `Shards`: finished units go to `STEM-NNNNN.jsonl`, each written atomically once whole; the done
  rows are the merged file's and the shards' (first copy wins); `merge` writes `STEM.jsonl`
  atomically and then removes the shards (a crash in between leaves copies that `rows` skips).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .atomic import atomic_open, dumps, write_json

log = logging.getLogger("prm_distill.jobfiles")


def _lines(rows: Iterable[Any]) -> str:
    return "".join(dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_rows(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    """JSONL of `rows` (strict JSON), written atomically."""
    text = _lines(rows)
    with atomic_open(path) as f:
        f.write(text)


class AppendLog:
    """`rows` holds what the file already contains; `append(rows)` adds and persists more."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: list[Any] = []
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

    def append(self, rows: Iterable[Any]) -> None:
        rows = list(rows)
        if not rows:
            return
        self._f.write(_lines(rows))
        self._f.flush()
        os.fsync(self._f.fileno())
        self.rows += rows

    def keep(self, wanted: Callable[[Any], bool]) -> int:
        """Rewrite the file (atomically) with only the wanted rows; the number removed."""
        kept = [r for r in self.rows if wanted(r)]
        removed = len(self.rows) - len(kept)
        if removed:
            self.rewrite(kept)
        return removed

    def rewrite(self, rows: list[Any]) -> None:
        """Replace the file's rows (atomically: an interrupted rewrite leaves the old file whole)."""
        self._f.close()
        write_rows(self.path, rows)
        self.rows = list(rows)
        self._f = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def holds_outputs(job: str | os.PathLike, outputs: Iterable[str | os.PathLike] | None = None) -> bool:
    """Whether anything was written under the identity recorded in `job`: a non-empty file among
    `outputs` (files or folders), by default anywhere in `job`'s folder except `job` itself."""
    job = Path(job)
    for place in [job.parent] if outputs is None else [Path(p) for p in outputs]:
        files = place.rglob("*") if place.is_dir() else [place]
        if any(f != job and f.is_file() and f.stat().st_size > 0 for f in files):
            return True
    return False


def check_job(path: str | os.PathLike, identity: dict[str, Any], *, pending: Sequence[str] = (),
              outputs: Iterable[str | os.PathLike] | None = None) -> None:
    """Refuse to resume into outputs written with other settings: the first run records `identity`
    in `path`, later runs must match it. A key in `pending` whose value is None here (not known yet,
    e.g. a policy's version before it is loaded) is not compared; once known it is recorded, and a
    different recorded value is refused too.

    Only outputs are guarded (`holds_outputs(path, outputs)`): while none exist, a different
    identity replaces the recorded one, so a run refused before its first output does not lock
    its folder against the corrected rerun."""
    path = Path(path)
    if not path.exists():
        write_json(path, identity)
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    later = {k for k in pending if identity.get(k) is None or old.get(k) is None}
    changed = sorted(k for k in set(old) | set(identity) if k not in later and old.get(k) != identity.get(k))
    if changed and not holds_outputs(path, outputs):
        log.info("%s: no outputs yet, so this run's settings replace the recorded ones (%s)", path,
                 ", ".join(f"{k}={old.get(k)!r} -> {identity.get(k)!r}" for k in changed))
        write_json(path, identity)
        return
    if changed:
        was = ", ".join(f"{k}={old.get(k)!r}" for k in changed)
        now = ", ".join(f"{k}={identity.get(k)!r}" for k in changed)
        raise ValueError(f"{path.parent} holds outputs made with {was}, this run has {now}: rerun with the same settings to resume, "
                         f"or use a new output folder")
    learnt = {k: identity[k] for k in later if identity.get(k) is not None}
    if learnt:
        write_json(path, {**old, **learnt})


class Shards:
    """`folder/STEM-NNNNN.jsonl` shards, merged into `folder/STEM.jsonl`."""

    def __init__(self, folder: str | os.PathLike, stem: str) -> None:
        self.folder, self.stem = Path(folder), stem
        self.merged = self.folder / f"{stem}.jsonl"

    def shards(self) -> list[Path]:
        return sorted(self.folder.glob(f"{self.stem}-*.jsonl"))

    def rows(self, key: Callable[[dict[str, Any]], str]) -> Iterator[dict[str, Any]]:
        """Every row already written (merged file first, then the shards), the first copy of a key only."""
        seen: set[str] = set()
        for path in [self.merged, *self.shards()]:
            if not path.is_file():
                continue
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        if key(row) not in seen:
                            seen.add(key(row))
                            yield row

    def next_index(self) -> int:
        return 1 + max((int(p.stem.rsplit("-", 1)[1]) for p in self.shards()), default=-1)

    def write(self, index: int, rows: Iterable[Any]) -> Path:
        """One shard, atomically (readers see all of its rows or none)."""
        path = self.folder / f"{self.stem}-{index:05d}.jsonl"
        write_rows(path, rows)
        return path

    def merge(self, rows: Iterable[Any]) -> None:
        """The merged file (atomically), then the shards removed."""
        write_rows(self.merged, rows)
        for shard in self.shards():
            shard.unlink()
