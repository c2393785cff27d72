"""The manifest of one iteration (`iter-K/manifest.json`): what each stage ran with and produced.

For every stage it records the sha256 of the stage's config section, of each input file (a folder:
all its files) and of each output file. A stage is skipped when its entry says done and the config
and input hashes are unchanged and every recorded output still exists; so an interrupted or failed
pipeline resumes at the stage that did not finish, and a changed config or input reruns that stage
and, through the changed outputs, the stages that read them. Every invocation appends which stages
ran and which were skipped under `invocations`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..atomic import dumps, write_json

MANIFEST = "manifest.json"
VERSION = 1


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_path(path: Path) -> str:
    """A file's sha256, or a folder's: the hash of its files' relative paths and hashes, sorted."""
    if path.is_file():
        return sha256_file(path)
    if not path.is_dir():
        raise FileNotFoundError(f"pipeline input not found: {path}")
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def sha256_config(section: Any) -> str:
    """The hash of a config section's canonical JSON (sorted keys)."""
    return hashlib.sha256(dumps(section, sort_keys=True).encode()).hexdigest()


def output_files(folder: Path) -> dict[str, str]:
    """Every file under a stage's folder, by path relative to it, with its sha256."""
    return {f.relative_to(folder).as_posix(): sha256_file(f) for f in sorted(folder.rglob("*")) if f.is_file()}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Manifest:
    """Load, decide, record, save (atomically, after every stage)."""

    def __init__(self, path: Path, name: str, iteration: int) -> None:
        self.path = path
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e.msg}); delete it to rerun every stage of this iteration") from None
            if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("stages"), dict):
                raise ValueError(f"{path}: not a pipeline manifest of version {VERSION}; delete it to rerun every stage")
        else:
            data = {"version": VERSION, "name": name, "iteration": iteration, "stages": {}, "invocations": []}
        self.data = data
        self.invocation: dict[str, Any] = {"started_at": _now(), "ran": [], "skipped": [], "failed": None, "finished_at": None}
        self.data["invocations"].append(self.invocation)

    @property
    def stages(self) -> dict[str, Any]:
        return self.data["stages"]

    def is_current(self, stage: str, config_sha: str, inputs: Mapping[str, str], folder: Path) -> bool:
        """Done before, with the same config and inputs, and every recorded output still there."""
        e = self.stages.get(stage)
        return (e is not None and e.get("status") == "done" and e.get("config_sha256") == config_sha and e.get("inputs") == dict(inputs)
                and all((folder / rel).is_file() for rel in e.get("outputs", {})))

    def is_stale(self, stage: str, config_sha: str, inputs: Mapping[str, str]) -> bool:
        """Recorded with another config or other inputs: its folder holds results that no longer apply."""
        e = self.stages.get(stage)
        return e is not None and (e.get("config_sha256") != config_sha or e.get("inputs") != dict(inputs))

    def skipped(self, stage: str) -> None:
        self.invocation["skipped"].append(stage)
        self.save()

    def record(self, stage: str, config_sha: str, inputs: Mapping[str, str], folder: Path, *, elapsed_s: float,
               summary: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        self.stages[stage] = {
            "status": "failed" if error else "done", "config_sha256": config_sha, "inputs": dict(inputs),
            "outputs": output_files(folder) if folder.is_dir() and not error else {}, "folder": str(folder),
            "finished_at": _now(), "elapsed_s": round(elapsed_s, 2), "summary": dict(summary or {}), **({"error": error} if error else {}),
        }
        if error:
            self.invocation["failed"] = stage
        else:
            self.invocation["ran"].append(stage)
        self.save()

    def finish(self) -> None:
        self.invocation["finished_at"] = _now()
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)


def hash_inputs(paths: Iterable[Path]) -> dict[str, str]:
    return {str(p): sha256_path(p) for p in paths}
