"""Runs TRL 1.13's OWN PRMTrainer (the last release that has it) with .venv-trl's python, for
test_trl_prm_import.py: trains a token-classification PRM a few steps and saves it as PRMTrainer's users
did, then loads it back and scores items on the sequences PRMTrainer's own `tokenize_row` builds (the positions it labels are
the ones it scores). Prints one JSON object: {"scores": [[P(good) per step], ...], "sequences": [{"input_ids", "positions"}]}.

    python trl_prm_driver.py '{"backbone": DIR, "out": DIR, "separator": "\\n", "rows": [...], "items": [[question, steps], ...]}'
"""

from __future__ import annotations

import inspect
import json
import sys


def main(spec: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    try:  # where TRL 1.x keeps it
        from trl.experimental.prm import PRMConfig, PRMTrainer
    except ImportError:  # older releases
        from trl import PRMConfig, PRMTrainer

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

    names = inspect.signature(PRMTrainer.tokenize_row).parameters
    given = {"tokenizer": tok, "step_separator": spec["separator"], "max_length": None, "max_prompt_length": None,
             "max_completion_length": None, "train_on_last_step_only": False, "is_eval": False}
    # scored as a TRL user serves it: loaded back from the saved folder (the trainer's in-memory model gave P(good)
    # up to 5e-4 away from the saved folder's here; the folder gives the same scores in either transformers release)
    model = AutoModelForTokenClassification.from_pretrained(spec["out"], dtype=torch.float32).eval()
    scores, sequences = [], []
    with torch.inference_mode():
        for question, steps in spec["items"]:
            features = {"prompt": question, "completions": steps, "labels": [True] * len(steps)}
            row = PRMTrainer.tokenize_row(features, **{k: v for k, v in given.items() if k in names})
            positions = [i for i, lab in enumerate(row["labels"]) if lab != -100]
            logits = model(input_ids=torch.tensor([row["input_ids"]])).logits[0]
            scores.append(logits[positions].softmax(-1)[:, 1].tolist())
            sequences.append({"input_ids": list(row["input_ids"]), "positions": positions})
    return {"scores": scores, "sequences": sequences}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
