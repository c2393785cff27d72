"""The checks every importer makes on a folder another trainer saved, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .checkpoint import CheckpointError


def check_saved_model(src: Path, trainer: str) -> dict[str, Any]:
    """`src`'s config.json, when it is a whole transformers model with safetensors weights and a tokenizer; a
    CheckpointError saying what is missing otherwise (`trainer` names who should have saved it)."""
    if not src.is_dir():
        raise CheckpointError(f"model folder not found: {src}")
    if not (src / "config.json").is_file():
        if (src / "adapter_config.json").is_file():  # a LoRA run saves the adapter alone
            raise CheckpointError(f"{src}: a peft adapter, not a whole model: merge it into its base first "
                                  "(PeftModel.from_pretrained(base, folder).merge_and_unload().save_pretrained(out), tokenizer beside it)")
        raise CheckpointError(f"{src}: config.json is missing (not a saved transformers model)")
    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{src}/config.json is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{src}/config.json is not a JSON object")
    if not any(src.glob("*.safetensors")):
        raise CheckpointError(f"{src} has no .safetensors weights (pickled .bin weights are refused: re-save with safe_serialization=True)")
    if not (src / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{src}: no tokenizer files ({trainer} saves the tokenizer beside the model: tokenizer.save_pretrained)")
    return config
