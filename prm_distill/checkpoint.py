"""The checkpoint format: a plain `save_pretrained` *ForTokenClassification folder + JSON sidecar.

Transformers and vLLM (pooling runner, STEP pooler with `step_tag_id`) load the folder without
this package; the sidecar carries what they cannot know: the step tag and its id, what the labels
mean, the encoding version, the decision threshold, the calibration and a training summary.
Weights load from safetensors only and remote code is never trusted unless asked for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import calibration as calib
from .atomic import current_umask, write_json
from .encoding import ENCODING_VERSION, LAYOUTS, EncodingError, TextFormat

SIDECAR_NAME = "prm_distill.json"
TRAINING_IDS = "training_ids.txt"  # the ids trained on, one per line: `recalibrate --heldout` refuses a held-out set sharing any
# What save_pretrained writes beside the weights: the model's config files and the tokenizer's.
MODEL_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
                   "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")
LABEL_MEANING = "class 1 = step is good (correct and advancing); P(good) = softmax(logits at the step tag)[1]"


class CheckpointError(ValueError):
    """A folder is not a usable prm_distill checkpoint."""


@dataclass
class Sidecar:
    step_tag: str
    step_tag_id: int
    max_length: int
    encoding_version: int = ENCODING_VERSION
    label_meaning: str = LABEL_MEANING
    threshold: float | None = None
    threshold_source: str | None = None  # how `threshold` was chosen, e.g. "none: dev split unusable (...)"; None = not said (older checkpoints)
    calibration: dict[str, Any] | None = None
    verifier: dict[str, Any] | None = None  # the scoring rule of prm_distill.verify ({kind, cap}); None = scores are the model's alone
    training: dict[str, Any] = field(default_factory=dict)
    layout: str = "tagged"  # encoding.LAYOUTS: tagged (trained here) | trl (TRL PRMTrainer, `import-trl`) | openrlhf (`import-openrlhf`)
    text_format: dict[str, Any] | None = None  # openrlhf layout: encoding.TextFormat's fields (None = Math-Shepherd's); step_tag is the placeholder

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = SIDECAR_NAME) -> "Sidecar":
        known = {f for f in cls.__dataclass_fields__}
        missing = {"step_tag", "step_tag_id", "max_length"} - set(d)
        if missing:
            raise CheckpointError(f"{source}: missing key(s) {sorted(missing)}")
        if d.get("encoding_version", ENCODING_VERSION) != ENCODING_VERSION:
            raise CheckpointError(
                f"{source}: encoding_version {d['encoding_version']} is not supported by this prm_distill "
                f"(it encodes version {ENCODING_VERSION}); scores would not match training"
            )
        if d.get("layout", "tagged") not in LAYOUTS:
            raise CheckpointError(f"{source}: layout must be one of {', '.join(LAYOUTS)}, got {d['layout']!r}")
        if d.get("layout") == "openrlhf":
            try:
                TextFormat(**(d.get("text_format") or {})).check(d["step_tag"])
            except (TypeError, EncodingError) as e:
                raise CheckpointError(f"{source}: text_format: {e}") from None
        from .verify import validate_rule

        try:
            validate_rule(d.get("verifier"), f"{source}: verifier")
        except ValueError as e:
            raise CheckpointError(str(e)) from None
        return cls(**{k: v for k, v in d.items() if k in known})


def _not_a_checkpoint(model_dir: Path) -> str:
    """Why a folder without a sidecar is no checkpoint, and where the real one is when it belongs to a
    training run (`train` exports into output_dir; output_dir/checkpoints/step-N is resumable state
    for `train` alone; output_dir/snapshots/step-N are full checkpoints)."""
    base = f"{model_dir} is not a prm_distill checkpoint"
    if not model_dir.exists():
        return f"{base}: the folder does not exist"
    steps = [p for p in model_dir.glob("step-*") if p.name[5:].isdigit()]
    if model_dir.name == "snapshots" and steps:
        snaps = [p for p in steps if (p / SIDECAR_NAME).is_file()]
        newest = max(snaps, key=lambda p: int(p.name[5:]), default=None)
        return f"{base}: it holds the snapshots of a training run, each a checkpoint" + (f", the newest {newest}" if newest else "")
    if (model_dir.name == "checkpoints" and steps) or (model_dir.parent.name == "checkpoints" and model_dir.name.startswith("step-")):
        run = model_dir.parent if model_dir.name == "checkpoints" else model_dir.parent.parent
        if (run / SIDECAR_NAME).is_file():
            return f"{base}: it is the resumable training state of a run; its exported checkpoint is {run}"
        return f"{base}: it is the resumable training state of a run whose model is not exported yet (train exports it to {run})"
    if (model_dir / "checkpoints").is_dir() or (model_dir / "snapshots").is_dir() or (model_dir / "run.json").is_file():  # train/identity.py
        return (f"{base}: it is a training output folder whose model is not exported yet ({SIDECAR_NAME} is missing); "
                f"rerun the same train command to finish it: the checkpoint is then {model_dir}")
    return f"{base}: {SIDECAR_NAME} is missing"


def read_sidecar(model_dir: str | os.PathLike) -> Sidecar:
    path = Path(model_dir) / SIDECAR_NAME
    if not path.is_file():
        raise CheckpointError(_not_a_checkpoint(Path(model_dir)))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    return Sidecar.from_dict(data, str(path))


def write_sidecar(model_dir: str | os.PathLike, sidecar: Sidecar) -> None:
    write_json(Path(model_dir) / SIDECAR_NAME, asdict(sidecar))


def write_training_ids(model_dir: str | os.PathLike, train_ids: Sequence[str]) -> None:
    (Path(model_dir) / TRAINING_IDS).write_text("".join(i + "\n" for i in train_ids), encoding="utf-8")


def write_calibration(model_dir: str | os.PathLike, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """Store a calibration in the model's sidecar with the next version number.

    Read-modify-write under an exclusive lock on `prm_distill.json.lock` (`filelock`: POSIX and
    Windows), so two writers never lose each other's version; the file itself is replaced
    atomically, so readers (engines reloading the calibration) see the old sidecar or the new one.
    """
    from filelock import FileLock

    if calibration is None:
        raise calib.CalibrationError("write_calibration needs a calibration")
    calib.validate(calibration)
    with FileLock(Path(model_dir) / f"{SIDECAR_NAME}.lock"):
        sidecar = read_sidecar(model_dir)
        stored = {
            **dict(calibration),
            "version": calib.version_of(sidecar.calibration) + 1,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        sidecar.calibration = stored
        write_sidecar(model_dir, sidecar)
    return stored


class CalibrationWatch:
    """The current calibration of a checkpoint folder, re-read when its sidecar file changes.

    `current()` costs one `os.stat` per call, so a server can call it on every batch: a new
    calibration written by `recalibrate --adopt` is in use from the next batch, without a restart.
    A sidecar that cannot be read (mid-replacement on an odd filesystem, or broken by hand) keeps
    the last good calibration and records the error in `last_error`.
    """

    def __init__(self, model_dir: str | os.PathLike, initial: Mapping[str, Any] | None = None) -> None:
        self.path = Path(model_dir) / SIDECAR_NAME
        self.model_dir = Path(model_dir)
        self._stamp: tuple[int, int, int] | None = None
        self._calibration: dict[str, Any] | None = dict(initial) if initial else None
        self.last_error: str | None = None
        self.current()

    def current(self) -> dict[str, Any] | None:
        try:
            st = os.stat(self.path)
        except OSError as e:
            self.last_error = f"{self.path}: {e.strerror}"
            return self._calibration
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            try:
                sidecar = read_sidecar(self.model_dir)
                calib.validate(sidecar.calibration, str(self.path))
            except ValueError as e:
                self.last_error = str(e)
                return self._calibration
            self._stamp, self._calibration, self.last_error = stamp, sidecar.calibration, None
        return self._calibration


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, sidecar: Sidecar) -> Path:
    """Save model (safetensors), tokenizer and sidecar; the sidecar is written last, so a folder
    with a sidecar is a complete checkpoint."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SIDECAR_NAME).unlink(missing_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # transformers writes the weights through a private temporary file (mode 0600): give every file
    # the mode the umask gives new files, so another user (a vLLM container) can read the checkpoint.
    mode = 0o666 & ~current_umask()
    for path in out.iterdir():
        if path.is_file():
            path.chmod(mode)
    write_sidecar(out, sidecar)
    return out


def load_checkpoint(model_dir: str | os.PathLike, *, device: str = "cpu", dtype=None, trust_remote_code: bool = False):
    """(model in eval mode, tokenizer, sidecar) from a checkpoint folder."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model folder not found: {model_dir}")
    sidecar = read_sidecar(model_dir)
    if not any(model_dir.glob("*.safetensors")):
        raise CheckpointError(f"{model_dir} has no .safetensors weights (other weight formats are refused)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    model = AutoModelForTokenClassification.from_pretrained(
        model_dir, use_safetensors=True, trust_remote_code=trust_remote_code, dtype=dtype or torch.float32
    )
    if model.config.num_labels != 2:
        raise CheckpointError(f"{model_dir}: expected a 2-label token classifier, got num_labels={model.config.num_labels}")
    check_step_tag(tokenizer, sidecar, str(model_dir))
    model.to(device).eval()
    return model, tokenizer, sidecar


def check_step_tag(tokenizer, sidecar: Sidecar, where: str) -> None:
    """The tokenizer must encode the sidecar's step tag to its id (tagged: that one token; trl: a separator
    whose last token it is), or scores would be read at the wrong positions."""
    tag_ids = tokenizer.encode(sidecar.step_tag, add_special_tokens=False)
    if (tag_ids[-1:] if sidecar.layout == "trl" else tag_ids) != [sidecar.step_tag_id]:
        raise CheckpointError(f"{where}: the tokenizer encodes step tag {sidecar.step_tag!r} as {tag_ids}, sidecar says {sidecar.step_tag_id}")


def is_token_classifier(config: dict[str, Any]) -> bool:
    """Whether a model's config.json says it was saved as a *ForTokenClassification (a PRM's head on it)."""
    return any(str(a).endswith("ForTokenClassification") for a in config.get("architectures") or [])


def pad_token_id(tokenizer) -> int:
    """Padding never reaches a real position (right padding, masked), so any valid id will do."""
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    return 0
