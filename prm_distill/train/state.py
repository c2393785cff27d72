"""Resumable training state: `output_dir/checkpoints/step-N/` holds accelerate's state (model,
optimizer, scheduler, RNGs, sampler) and `trainer_state.json` (step, tokens seen, history), written
last, so a folder without it is incomplete and ignored. A rerun of the same command resumes from
the newest complete one; which run these checkpoints belong to is `output_dir/run.json` (`identity`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json

STATE_NAME = "trainer_state.json"


@dataclass
class TrainState:
    """What the loop has done so far: saved with every checkpoint, restored on resume."""

    step: int = 0
    tokens_seen: int = 0
    train_wall_s: float = 0.0  # training-loop seconds over every process of the run, so a resumed run's rate stays true
    history: list[dict[str, Any]] = field(default_factory=list)


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints under `out/checkpoints`, oldest first."""
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    done = [p for p in root.glob("step-*") if (p / STATE_NAME).is_file()]
    return sorted(done, key=lambda p: int(p.name.split("-")[1]))


def resume(accelerator: Any, out: Path, enabled: bool) -> TrainState:
    """Load the newest complete checkpoint into the prepared objects (when `enabled` and one exists)."""
    previous = checkpoints(out) if enabled else []
    if not previous:
        return TrainState()
    accelerator.load_state(str(previous[-1]))
    state = TrainState(**json.loads((previous[-1] / STATE_NAME).read_text(encoding="utf-8")))
    accelerator.print(f"resumed from {previous[-1]} at step {state.step}")
    return state


def save(accelerator: Any, out: Path, state: TrainState, limit: int) -> Path:
    """Save accelerate state, then the trainer state last; keep the newest `limit` checkpoints
    (0 = all). Every rank must call it."""
    path = out / "checkpoints" / f"step-{state.step}"
    accelerator.save_state(str(path))
    if accelerator.is_main_process:
        write_json(path / STATE_NAME, asdict(state))
        for old in checkpoints(out)[:-limit] if limit > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return path
