"""`prm-distill import-trl`: a PRM that TRL's (removed) PRMTrainer trained, scored here as TRL scored it.

PRMTrainer saved a plain `*ForTokenClassification` folder and labelled the last token of a step separator
(`"\\n"` by default) after each step, with BOS and the prompt as given before the steps. A copy of the folder
with a sidecar in the `trl` layout (`encoding.StepEncoder`) gets the same token ids, so `eval`, `serve`, vLLM,
the RL scorer and `recalibrate` use the model as trained, without retraining. The copy is written beside the
output and renamed into place, and loaded once before that, so a folder that cannot be scored is refused
with why, and an existing folder is never overwritten.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .atomic import atomic_folder, occupied
from .checkpoint import MODEL_FILES, TOKENIZER_FILES, CheckpointError, Sidecar, is_token_classifier, load_checkpoint, write_sidecar
from .saved_model import check_saved_model

# PRMTrainer's defaults (trl.PRMConfig): the separator after each step and the longest sequence it trained on
TRL_SEPARATOR = "\n"
TRL_MAX_LENGTH = 1024


def read_separator(text: str) -> str:
    """A separator as typed in a shell: the two characters `\\n` (and `\\t`) mean a newline (a tab)."""
    return text.replace("\\n", "\n").replace("\\t", "\t")


def _check_source(src: Path) -> None:
    config = check_saved_model(src, "PRMTrainer")
    if not is_token_classifier(config):
        raise CheckpointError(f"{src}: a {', '.join(config.get('architectures') or []) or 'model without architectures'}, not a token classifier "
                              "(PRMTrainer saves *ForTokenClassification)")
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    if labels != 2:
        raise CheckpointError(f"{src}: {labels} labels; a PRM has 2 (0 = wrong step, 1 = correct)")


def import_trl(model: str | os.PathLike, output: str | os.PathLike, *, separator: str = TRL_SEPARATOR,
               max_length: int = TRL_MAX_LENGTH) -> Sidecar:
    """Write `output`: `model`'s weights, config and tokenizer plus a `trl`-layout sidecar; returns the sidecar.
    No threshold is stored (no dev split was scored): `average.choose_threshold_into` sets one."""
    from transformers import AutoTokenizer

    src, out = Path(model), Path(output)
    _check_source(src)
    if not separator:
        raise ValueError("the step separator must not be empty")
    if max_length < 8:
        raise ValueError(f"max_length must be at least 8 tokens, got {max_length}")
    if occupied(out):
        raise ValueError(f"{out} exists and is not empty: import-trl writes a new folder (it never overwrites one)")
    sep_ids = AutoTokenizer.from_pretrained(src).encode(separator, add_special_tokens=False)
    if not sep_ids:
        raise CheckpointError(f"{src}: the tokenizer encodes the separator {separator!r} to no tokens")
    sidecar = Sidecar(step_tag=separator, step_tag_id=int(sep_ids[-1]), max_length=int(max_length), layout="trl",
                      threshold_source="none: imported, no dev split scored (prm-distill import-trl --dev chooses one)",
                      training={"imported_from": str(src.resolve()), "trainer": "TRL PRMTrainer", "separator_ids": sep_ids})
    with atomic_folder(out) as tmp:
        names = [p.name for p in src.glob("*.safetensors")] + ["model.safetensors.index.json", *MODEL_FILES, *TOKENIZER_FILES]
        for name in names:  # weights, configs, tokenizer: not the trainer's state (optimizer, training_args.bin)
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        write_sidecar(tmp, sidecar)
        load_checkpoint(tmp)  # the folder loads and the separator checks out, before it takes the output's name
    return sidecar
