"""What a training run is, recorded beside its checkpoints (`output_dir/run.json`), so that a rerun
into the same folder resumes only the run it started, says so when that run is finished, and is
refused (exit 2, naming what changed) when it would be another run.

The identity is the config with its defaults resolved, the data files (size and sha256 of the
bytes, read once, streaming), the backbone (its resolved folder's file names and sizes; the weights
are not hashed) and the encoding version. The settings in `MAY_CHANGE` are recorded but not
compared: a rerun may give a longer (or shorter) budget and other logging, evaluation, snapshot and
save frequencies. `optim.output_dir` (the folder may move) and `optim.resume` are not compared either.

Why not `jobfiles.check_job` (rollout's and label's `job.json`): a training run also has a finished
state (the export), settings that may change, lists of files to tell apart (added, removed, content
changed) and a third way on, `--fresh`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..checkpoint import MODEL_FILES, SIDECAR_NAME, TOKENIZER_FILES, TRAINING_IDS
from ..encoding import ENCODING_VERSION
from ..records import file_and_format
from . import state as ckpt
from .config import TrainJobConfig

log = logging.getLogger("prm_distill.train")

RUN_FILE = "run.json"
IDENTITY_VERSION = 1
# May change on resume (docs/jobs.md): the budget and how often the loop logs, evaluates, snapshots and saves.
MAY_CHANGE = ("optim.max_steps", "optim.stop_at_step", "optim.max_minutes", "optim.logging_steps", "optim.eval_steps",
              "optim.snapshot_steps", "optim.save_steps", "optim.save_total_limit")
NOT_COMPARED = ("optim.output_dir", "optim.resume")  # where the run lives (a folder may move) and whether to resume
FILE_LISTS = ("data.train", "data.dev")
# What an export writes at the top of output_dir (save_pretrained's model and tokenizer files, the sidecar,
# training_ids.txt, the training log train_log.jsonl): `--fresh` removes these and nothing else there (a log the user keeps beside them stays).
EXPORT_FILES = (SIDECAR_NAME, f"{SIDECAR_NAME}.lock", TRAINING_IDS, *MODEL_FILES, *TOKENIZER_FILES, "train_log.jsonl")
EXPORT_GLOBS = ("*.safetensors", "*.safetensors.index.json")
_CHUNK = 1 << 20
# Files of a backbone folder that are not the model: an exported checkpoint used as a backbone (the pipeline's next
# iteration) keeps its identity when recalibration adopts a calibration into its sidecar.
_NOT_MODEL = {SIDECAR_NAME, f"{SIDECAR_NAME}.lock", TRAINING_IDS, RUN_FILE}


def file_digest(path: str | Path) -> dict[str, Any]:
    """Size and sha256 of a file's bytes, read in 1 MiB chunks (a data file may be GBs)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return {"size": p.stat().st_size, "sha256": h.hexdigest()}


def backbone_identity(name: str) -> dict[str, Any]:
    """The backbone as resolved (the embedded default's converted folder, a folder, or a hub id) and, for a
    folder, its files and sizes: cheap, and a different model at the same path shows."""
    from ..backbones import resolve_backbone

    path = resolve_backbone(name)
    folder = Path(path)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name not in _NOT_MODEL} if folder.is_dir() else None
    return {"path": path, "files": files}


def run_identity(cfg: TrainJobConfig) -> dict[str, Any]:
    """The identity of the run `cfg` describes (as run.json stores it: JSON types)."""
    files = dict.fromkeys([*cfg.data.train, *cfg.data.dev])
    identity = {"version": IDENTITY_VERSION, "encoding_version": ENCODING_VERSION, "config": asdict(cfg),
                "data_files": {p: file_digest(file_and_format(p, cfg.data.format)[0]) for p in files}, "backbone": backbone_identity(cfg.model.backbone),
                "may_change": list(MAY_CHANGE)}
    return json.loads(json.dumps(identity))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _list_change(key: str, old: list[str], new: list[str]) -> str:
    added, removed = [p for p in new if p not in old], [p for p in old if p not in new]
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
    return f"{key}: {'; '.join(parts) if parts else f'order {_show(old)} -> {_show(new)}'}"


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two identities, one phrase each ("optim.learning_rate: 0.0001 -> 0.001",
    "data.train: added runs/x.jsonl", "data file runs/a.jsonl changed (size/hash)"); MAY_CHANGE and
    NOT_COMPARED keys aside."""
    out = []
    if old.get("encoding_version") != new.get("encoding_version"):
        out.append(f"encoding version: {old.get('encoding_version')} -> {new.get('encoding_version')}")
    oc, nc = _flat(old.get("config", {})), _flat(new.get("config", {}))
    for key in sorted(set(oc) | set(nc)):
        if key in MAY_CHANGE or key in NOT_COMPARED or oc.get(key) == nc.get(key):
            continue
        if key in FILE_LISTS and isinstance(oc.get(key), list) and isinstance(nc.get(key), list):
            out.append(_list_change(key, oc[key], nc[key]))
        elif key not in oc or key not in nc:
            out.append(f"{key}: {'not set' if key not in oc else _show(oc[key])} -> {'not set' if key not in nc else _show(nc[key])}")
        else:
            out.append(f"{key}: {_show(oc[key])} -> {_show(nc[key])}")
    of, nf = old.get("data_files", {}), new.get("data_files", {})
    for path in [p for p in nf if p in of]:
        a, b = of[path], nf[path]
        if a != b:
            what = [f"size {a.get('size')} -> {b.get('size')}"] if a.get("size") != b.get("size") else []
            what += [f"sha256 {str(a.get('sha256'))[:12]} -> {str(b.get('sha256'))[:12]}"] if a.get("sha256") != b.get("sha256") else []
            out.append(f"data file {path} changed ({', '.join(what)})")
    ob, nb = old.get("backbone", {}), new.get("backbone", {})
    if ob.get("files") != nb.get("files"):
        out.append(f"backbone {nb.get('path')}: its files changed ({_show(ob.get('files'))} -> {_show(nb.get('files'))})")
    return out


def _export_steps(out: Path) -> int | None:
    """The step the export in `out` was taken at (its sidecar's training.steps); None without an export."""
    try:
        steps = json.loads((out / SIDECAR_NAME).read_text(encoding="utf-8")).get("training", {}).get("steps")
    except (OSError, ValueError, AttributeError):
        return None
    return steps if isinstance(steps, int) else None


def _has_outputs(out: Path) -> bool:
    return bool(ckpt.checkpoints(out)) or (out / SIDECAR_NAME).is_file() or (out / "snapshots").is_dir()


def target_step(cfg: TrainJobConfig) -> int:
    """The step this command trains to: optim.stop_at_step when it comes first, else optim.max_steps."""
    t = cfg.optim
    return min(t.max_steps, t.stop_at_step) if t.stop_at_step is not None else t.max_steps


@dataclass
class RunCheck:
    """The verdict on `out` for this run (`check_run`); `apply` acts on it, on the main process only."""

    out: Path
    identity: dict[str, Any]
    start_over: bool = False  # --fresh or optim.resume=false: the folder's outputs are removed first
    finished: dict[str, Any] | None = None  # the export's training summary when there is nothing left to do
    notes: list[str] = field(default_factory=list)  # warnings to log when the run starts

    @property
    def path(self) -> Path:
        return self.out / RUN_FILE


def _advice(out: Path) -> str:
    return (f"Rerun with the same settings to resume it, add --fresh to start over in {out} (its checkpoints, snapshots, export "
            f"and {RUN_FILE} are removed), or set another optim.output_dir. Settings that may change on resume: "
            f"{', '.join(MAY_CHANGE)} (docs/jobs.md)")


def check_run(cfg: TrainJobConfig, fresh: bool = False) -> RunCheck:
    """Read-only (every rank may call it): compare this run with the one recorded in output_dir.
    Raises ValueError (exit 2) when the folder holds another run, or when the budget is below the step
    the run already reached."""
    out = Path(cfg.optim.output_dir)
    check = RunCheck(out, run_identity(cfg), start_over=fresh or not cfg.optim.resume)
    if check.start_over:
        return check
    old = None
    if check.path.is_file():
        try:
            old = json.loads(check.path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"{check.path}: invalid JSON ({e}); --fresh starts the run over") from None
    if old is not None:
        diff = changes(old, check.identity)
        if diff and _has_outputs(out):
            raise ValueError(f"{out} holds a training run made with other settings ({check.path}): {'; '.join(diff)}. {_advice(out)}")
        if diff:
            check.notes.append(f"{out} holds no checkpoint or export yet: its {RUN_FILE} is replaced by this run's ({'; '.join(diff)})")
    elif _has_outputs(out):
        check.notes.append(f"{out} has training outputs but no {RUN_FILE} (made before runs recorded their identity): its settings are not "
                           f"checked this time; {RUN_FILE} is written now and later reruns are checked against it")
    target, exported, saved = target_step(cfg), _export_steps(out), ckpt.checkpoints(out)
    newest = int(saved[-1].name.split("-")[1]) if saved else 0
    if exported is not None and exported >= target:
        check.finished = {**json.loads((out / SIDECAR_NAME).read_text(encoding="utf-8"))["training"], "already_finished": str(out)}
        return check
    if newest > target:
        raise ValueError(f"{out}: this run already reached step {newest} ({saved[-1]}), past the {target} this command asks for "
                         f"(optim.max_steps / optim.stop_at_step): ask for at least {newest}, add --fresh to start over, or set another "
                         f"optim.output_dir")
    if exported is not None and newest < exported:
        check.notes.append(f"the export in {out} is at step {exported} but the newest resumable checkpoint is "
                           f"{f'step {newest}' if saved else 'none (optim.save_steps was 0)'}: steps {newest + 1}-{exported} are trained "
                           f"again, on the schedule of optim.max_steps={cfg.optim.max_steps}, and the export is replaced")
    return check


def _remove_outputs(out: Path) -> list[str]:
    """Remove what a training run wrote in `out` (checkpoints, snapshots, the export, run.json); the names removed."""
    removed = []
    for sub in ("checkpoints", "snapshots"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
            removed.append(f"{sub}/")
    ours = (out / RUN_FILE).is_file() or (out / SIDECAR_NAME).is_file() or removed
    files = [out / n for n in EXPORT_FILES] + [p for g in EXPORT_GLOBS for p in out.glob(g)] if ours else []
    if any(p.is_file() for p in files):
        for p in files:
            p.unlink(missing_ok=True)
        removed.append("the export")
    if (out / RUN_FILE).is_file():
        (out / RUN_FILE).unlink()
        removed.append(RUN_FILE)
    return removed


def apply(check: RunCheck, print_fn: Any = print) -> None:
    """On the main process, before the checkpoint is loaded: start over when asked, log the notes, write run.json."""
    if check.start_over:
        removed = _remove_outputs(check.out)
        if removed:
            print_fn(f"starting over in {check.out}: removed {', '.join(removed)}")
    for note in check.notes:
        log.warning(note)
    write_json(check.path, check.identity)


def record_finished(check: RunCheck) -> None:
    """A finished run found without run.json (an old folder): write it, so later reruns are checked."""
    if not check.path.is_file():
        for note in check.notes:
            log.warning(note)
        write_json(check.path, check.identity)
