"""Runs TRL 1.13's OWN PRMTrainer (the last release that has it) with .venv-trl's python, for
test_trl_prm_import.py: trains a token-classification PRM a few steps and saves it as PRMTrainer's users
did, then loads it back and scores items on the sequences PRMTrainer's own `tokenize_row` builds (the positions it labels are
the ones it scores). Prints one JSON object: {"scores": [[P(good) per step], ...], "sequences": [{"input_ids", "positions"}]}.

    python trl_prm_driver.py '{"backbone": DIR, "out": DIR, "separator": "\\n", "rows": [...], "items": [[question, steps], ...]}'
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def _vs_trl():
    """benchmarks/vs_trl.py, whose TRL helpers (imports, tokenize_row's sequence) this driver shares: stdlib at import."""
    spec = importlib.util.spec_from_file_location("vs_trl", Path(__file__).resolve().parents[2] / "benchmarks" / "vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(spec: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    vs_trl = _vs_trl()
    PRMConfig, PRMTrainer = vs_trl.trl_imports()

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(spec["backbone"])
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForTokenClassification.from_pretrained(spec["backbone"], num_labels=2, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    torch.nn.init.normal_(model.score.weight, std=0.1)  # scores spread away from 0.5, not saturated at 0 or 1
    args = PRMConfig(output_dir=spec["out"] + "-trainer", max_steps=3, per_device_train_batch_size=4, learning_rate=5e-3,
                     step_separator=spec["separator"], max_length=512, report_to="none", save_strategy="no", disable_tqdm=True,
                     seed=0, use_cpu=True)
    trainer = PRMTrainer(model=model, args=args, train_dataset=Dataset.from_list(spec["rows"]), processing_class=tok)
    trainer.train()
    trainer.save_model(spec["out"])  # what a user of PRMTrainer kept: the model folder and its tokenizer
    tok.save_pretrained(spec["out"])

    # scored as a TRL user serves it: loaded back from the saved folder (the trainer's in-memory model gave P(good)
    # up to 5e-4 away from the saved folder's here; the folder gives the same scores in either transformers release)
    model = AutoModelForTokenClassification.from_pretrained(spec["out"], dtype=torch.float32).eval()
    scores, sequences = [], []
    with torch.inference_mode():
        for question, steps in spec["items"]:
            ids, positions = vs_trl.trl_sequence(PRMTrainer, tok, spec["separator"], question, steps)
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            scores.append(logits[positions].softmax(-1)[:, 1].tolist())
            sequences.append({"input_ids": ids, "positions": positions})
    return {"scores": scores, "sequences": sequences}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
