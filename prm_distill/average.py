"""`prm-distill average`: one checkpoint whose weights are the mean of several checkpoints' (tail averaging).

Late snapshots of one run sit in one basin; their mean is a student of the same size and scoring cost
that often transfers better than the last weights alone (stochastic weight averaging, model soups).
Only checkpoints that can be averaged are: the same architecture, step tag, encoding, verifier rule,
tokenizer files and tensor names and shapes; anything else is refused with what differs. The output
is written to a temporary folder beside it and renamed into place, so an interrupted run leaves no
half-written checkpoint, and an existing checkpoint is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .atomic import atomic_folder, occupied
from .checkpoint import MODEL_FILES, TOKENIZER_FILES, TRAINING_IDS, CheckpointError, Sidecar, read_sidecar, write_sidecar, write_training_ids

# config.json keys that say how a folder was written, not what the model computes.
_CONFIG_VOLATILE = {"_name_or_path", "transformers_version", "torch_dtype", "dtype"}


def _weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """Normalised mixing weights (uniform when None)."""
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ValueError(f"average: {len(weights)} weight(s) for {n} checkpoints (give one per --model)")
    if any(not w >= 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"average: weights must be >= 0 with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


def _config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder}: config.json is missing")
    return {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k not in _CONFIG_VOLATILE}


def _weight_files(folder: Path) -> list[str]:
    names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        raise CheckpointError(f"{folder} has no .safetensors weights (other weight formats are refused)")
    return names


def check_compatible(folders: Sequence[Path]) -> list[Sidecar]:
    """The sidecars of `folders`, after checking that their weights can be averaged into one checkpoint
    (raises CheckpointError naming the first difference)."""
    first, sidecars = folders[0], [read_sidecar(f) for f in folders]
    base_cfg, base_files = _config(first), _weight_files(first)
    same = ("step_tag", "step_tag_id", "max_length", "encoding_version", "layout", "text_format", "label_meaning", "verifier")
    for folder, sc in zip(folders[1:], sidecars[1:]):
        for key in same:
            if getattr(sc, key) != getattr(sidecars[0], key):
                raise CheckpointError(f"cannot average {first} and {folder}: their sidecars differ in {key} "
                                      f"({getattr(sidecars[0], key)!r} vs {getattr(sc, key)!r})")
        cfg = _config(folder)
        diff = sorted(k for k in base_cfg.keys() | cfg.keys() if base_cfg.get(k) != cfg.get(k))
        if diff:
            raise CheckpointError(f"cannot average {first} and {folder}: config.json differs in {', '.join(diff)}")
        if _weight_files(folder) != base_files:
            raise CheckpointError(f"cannot average {first} and {folder}: different weight files "
                                  f"({base_files} vs {_weight_files(folder)})")
        for name in TOKENIZER_FILES:
            a, b = first / name, folder / name
            if a.is_file() != b.is_file() or (a.is_file() and a.read_bytes() != b.read_bytes()):
                raise CheckpointError(f"cannot average {first} and {folder}: their tokenizers differ ({name})")
    return sidecars


def _mean_file(name: str, folders: Sequence[Path], weights: Sequence[float]) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The weighted mean of one safetensors file across `folders` (accumulated in float64, stored in
    each tensor's own dtype); non-float tensors must be equal in every checkpoint."""
    import torch
    from safetensors import safe_open

    out: dict[str, Any] = {}
    handles = [safe_open(str(f / name), framework="pt") for f in folders]
    metadata = handles[0].metadata()
    keys = list(handles[0].keys())
    for f, h in zip(folders[1:], handles[1:]):
        if set(h.keys()) != set(keys):
            missing = sorted(set(keys) ^ set(h.keys()))[:3]
            raise CheckpointError(f"cannot average {folders[0]} and {f}: {name} holds other tensors (e.g. {', '.join(missing)})")
    for key in keys:
        tensors = [h.get_tensor(key) for h in handles]
        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) > 1:
            raise CheckpointError(f"cannot average: tensor {key} in {name} has different shapes {sorted(shapes)}")
        if tensors[0].is_floating_point():
            acc = torch.zeros(tensors[0].shape, dtype=torch.float64)
            for t, w in zip(tensors, weights):
                acc += t.to(torch.float64) * w
            out[key] = acc.to(tensors[0].dtype).contiguous()
        else:
            if any(not torch.equal(t, tensors[0]) for t in tensors[1:]):
                raise CheckpointError(f"cannot average: non-float tensor {key} in {name} differs between checkpoints")
            out[key] = tensors[0].contiguous()
    return out, metadata


def _training_ids(folders: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(the union of the checkpoints' training ids, in first-seen order; the folders that have none)."""
    seen: dict[str, None] = {}
    without = []
    for f in folders:
        path = f / TRAINING_IDS
        if not path.is_file():
            without.append(str(f))
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line:
                seen.setdefault(line, None)
    return list(seen), without


def average_checkpoints(models: Sequence[str | os.PathLike], output: str | os.PathLike,
                        weights: Sequence[float] | None = None) -> dict[str, Any]:
    """Write the weighted mean of `models` to `output` (a new folder); returns the provenance stored in the
    sidecar's `training`. The output carries no threshold (no dev split was scored): `choose_threshold_into`
    sets one."""
    from safetensors.torch import save_file

    folders = [Path(m) for m in models]
    if len(folders) < 2:
        raise ValueError(f"average needs at least two checkpoints, got {len(folders)}")
    for f in folders:
        if not f.is_dir():
            raise CheckpointError(f"model folder not found: {f}")
    out = Path(output)
    if occupied(out):
        raise ValueError(f"{out} exists and is not empty: average writes a new folder (it never overwrites a checkpoint)")
    resolved = {f.resolve() for f in folders}
    if len(resolved) != len(folders):
        raise ValueError("average: the same checkpoint is given twice (use --weight to weigh one more)")
    mix = _weights(weights, len(folders))
    sidecars = check_compatible(folders)

    with atomic_folder(out) as tmp:
        for name in _weight_files(folders[0]):
            tensors, metadata = _mean_file(name, folders, mix)
            save_file(tensors, str(tmp / name), metadata=metadata)
        for name in (*MODEL_FILES, "model.safetensors.index.json", *TOKENIZER_FILES):  # equal in every checkpoint (checked)
            if (folders[0] / name).is_file():
                shutil.copy2(folders[0] / name, tmp / name)
        ids, without_ids = _training_ids(folders)
        if ids:
            write_training_ids(tmp, ids)
        provenance = {
            "averaged_from": [{"path": str(f), "weight": w, "step": sc.training.get("step", sc.training.get("steps")),
                               "tokens_seen": sc.training.get("tokens_seen")} for f, w, sc in zip(folders, mix, sidecars)],
            "training_ids_missing_in": without_ids,
        }
        for key in ("backbone", "backbone_path"):  # snapshots' sidecars lack them: the first checkpoint that says
            said = [sc.training[key] for sc in sidecars if key in sc.training]
            if said:
                provenance[key] = said[0]
        sidecar = Sidecar(**{**asdict(sidecars[0]), "threshold": None, "calibration": None, "training": provenance,
                             "threshold_source": "none: averaged weights, no dev split scored (prm-distill average --dev chooses one)"})
        write_sidecar(tmp, sidecar)  # last: a folder with a sidecar is a complete checkpoint
    return provenance


def choose_threshold_into(model_dir: str | os.PathLike, dev_files: Sequence[str], *, device: str = "auto",
                          dev_limit: int | None = None, fmt: str = "jsonl") -> tuple[float, str]:
    """Choose the decision threshold on `dev_files` with the one rule (`evaluate.choose_threshold`, the same
    sample `prm-distill eval --dev` takes) and store it in the checkpoint's sidecar."""
    from .evaluate import DEV_LIMIT, choose_threshold
    from .serve.engine import PRMEngine

    engine = PRMEngine.from_checkpoint(Path(model_dir), device=device)
    threshold, source = choose_threshold(engine, None, dev_files, fmt, dev_limit=DEV_LIMIT if dev_limit is None else dev_limit or None)
    sidecar = read_sidecar(model_dir)
    sidecar.threshold, sidecar.threshold_source = float(threshold), f"{source}: best ProcessBench F1"
    write_sidecar(model_dir, sidecar)
    return float(threshold), sidecar.threshold_source
