"""`prm-distill import-trl`: a PRM saved as TRL's PRMTrainer saved it is scored here exactly as TRL scored it.

The "TRL checkpoint" is a real `LlamaForTokenClassification` (tiny, random, from a config, with SmolLM2's real
tokenizer) saved with `save_pretrained`, as PRMTrainer's `save_model` leaves it. The reference scores are a
plain transformers forward pass over the sequence PRMTrainer's `tokenize_row` builds: BOS, the prompt's ids,
then each step's ids followed by the separator's ids, P(good) read at the separator's last token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prm_distill.checkpoint import CheckpointError, read_sidecar
from prm_distill.cli import main
from prm_distill.import_trl import import_trl, read_separator
from prm_distill.serve.engine import PRMEngine

ITEMS = [
    ("Tom has 3 boxes of 4 pens. How many pens?", ["3 boxes x 4 pens = 12 pens.", "So he has\n12 pens.", "The answer is 12."]),
    ("What is 10 - 7?", ["10 - 7 = 4.", "The answer is 4."]),
]


@pytest.fixture(scope="module")
def trl_model(tiny_backbone, tmp_path_factory) -> Path:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    torch.manual_seed(3)
    out = tmp_path_factory.mktemp("trl") / "prm"
    model = AutoModelForTokenClassification.from_pretrained(tiny_backbone, num_labels=2)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # a head far from zero: scores spread well away from 0.5
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_backbone).save_pretrained(out)
    return out


def trl_reference(model_dir: Path, question: str, steps: list[str], separator: str) -> list[float]:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    sep = tok.encode(separator, add_special_tokens=False)
    ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + tok(question, add_special_tokens=False)["input_ids"]
    positions = []
    for step in steps:
        ids += tok(step, add_special_tokens=False)["input_ids"] + sep
        positions.append(len(ids) - 1)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    return logits[positions].softmax(-1)[:, 1].tolist()


@pytest.mark.parametrize("separator", ["\n", " ки"])  # one token, and Math-Shepherd's tag: two tokens here
def test_imported_scores_are_trls(trl_model, tmp_path, separator):
    out = tmp_path / "imported"
    sidecar = import_trl(trl_model, out, separator=separator)
    assert sidecar.layout == "trl" and sidecar.threshold is None and sidecar.verifier is None
    assert read_sidecar(out).step_tag == separator
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    got = engine.score(ITEMS)
    for (question, steps), scores in zip(ITEMS, got):
        ref = trl_reference(trl_model, question, steps, separator)
        assert scores == pytest.approx(ref, abs=1e-5)
    assert max(abs(s - 0.5) for s in sum(got, [])) > 0.05  # the comparison is not between constant scores
    # a newline inside a step is not a step boundary: three steps, three scores
    assert len(got[0]) == 3


def test_windows_score_every_step_once_and_the_first_window_as_trl(trl_model, tmp_path):
    out = tmp_path / "short"
    import_trl(trl_model, out, max_length=40)
    question, steps = ITEMS[1][0], [f"Step {i}: add {i} to get {i * 3}." for i in range(8)]
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    enc = engine.encoder.encode(question, steps)
    assert not enc.truncated and len(enc.windows) > 1 and sorted(i for w in enc.windows for i in w.step_indices) == list(range(8))
    scores = engine.score([(question, steps)])[0]
    first = enc.windows[0].step_indices  # a causal model: the first window is the full sequence's beginning
    assert [scores[i] for i in first] == pytest.approx(trl_reference(trl_model, question, steps, "\n")[: len(first)], abs=1e-5)


def test_cli_imports_with_a_dev_threshold_and_eval_reads_it(trl_model, tmp_path, capsys):
    rows = [{"prompt": q, "completions": s, "labels": [True] * (len(s) - 1) + [k % 2 == 0]} for k, (q, s) in enumerate(ITEMS * 3)]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "imported"
    assert main(["import-trl", "--model", str(trl_model), "--output", str(out), "--separator", "\\n", "--dev", str(dev),
                 "--dev-format", "trl", "--device", "cpu"]) == 0
    sidecar = read_sidecar(out)
    assert sidecar.step_tag == "\n" and sidecar.layout == "trl" and sidecar.threshold is not None
    assert sidecar.threshold_source.startswith("dev (6 records)")
    assert "imported" in capsys.readouterr().out
    report = tmp_path / "eval.json"
    assert main(["eval", "--model", str(out), "--data", str(dev), "--format", "trl", "--output", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["n_steps"] == 15 and rep["threshold"] == pytest.approx(sidecar.threshold)


def test_what_import_refuses(trl_model, tiny_backbone, tmp_path, capsys):
    # a causal LM is not a PRM
    assert main(["import-trl", "--model", str(tiny_backbone), "--output", str(tmp_path / "a")]) == 2
    assert "not a token classifier" in capsys.readouterr().err and not (tmp_path / "a").exists()
    # a LoRA run's adapter alone
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "Qwen/Qwen2.5-Math-1.5B"}))
    assert main(["import-trl", "--model", str(adapter), "--output", str(tmp_path / "a")]) == 2
    assert "a peft adapter, not a whole model: merge it" in capsys.readouterr().err
    # pickled weights only
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for f in trl_model.iterdir():
        if f.suffix != ".safetensors":
            (pickled / f.name).write_bytes(f.read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    assert main(["import-trl", "--model", str(pickled), "--output", str(tmp_path / "b")]) == 2
    assert "pickled .bin weights are refused" in capsys.readouterr().err
    # an existing folder is never overwritten
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert main(["import-trl", "--model", str(trl_model), "--output", str(taken)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err and [p.name for p in taken.iterdir()] == ["keep.txt"]
    # a separator the tokenizer turns into nothing, and leftovers of a refused import: none
    with pytest.raises(ValueError, match="must not be empty"):
        import_trl(trl_model, tmp_path / "c", separator="")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "pickled", "taken"]


def test_a_sidecar_with_an_unknown_layout_is_refused(trl_model, tmp_path):
    out = tmp_path / "imported"
    import_trl(trl_model, out)
    data = json.loads((out / "prm_distill.json").read_text())
    (out / "prm_distill.json").write_text(json.dumps({**data, "layout": "sideways"}))
    with pytest.raises(CheckpointError, match="layout must be one of tagged, trl, openrlhf, got 'sideways'"):
        read_sidecar(out)


def test_training_an_imported_prm_goes_on_in_trls_encoding(trl_model, synthetic_files, train_overrides, tmp_path, capsys):
    # a TRL user fine-tunes their imported PRM on new data: the rows are encoded as TRL encoded them (BOS, the
    # prompt, each step + the separator's ids), no step tag is added, and the new checkpoint says trl layout.
    from transformers import AutoTokenizer

    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train
    from prm_distill.train.loop import setup

    imported = tmp_path / "imported"
    import_trl(trl_model, imported, separator=" ки")  # two tokens here
    out = tmp_path / "continued"
    cfg = load_config(TrainJobConfig, None, train_overrides(imported, synthetic_files, out, **{"optim.max_steps": 1, "optim.learning_rate": 0.0}))
    engine = PRMEngine.from_checkpoint(imported, device="cpu")
    question, steps = ITEMS[0]
    assert setup(cfg).encoder.encode(question, steps) == engine.encoder.encode(question, steps)
    train(cfg)
    sidecar = read_sidecar(out)
    assert (sidecar.layout, sidecar.step_tag, sidecar.step_tag_id) == ("trl", " ки", read_sidecar(imported).step_tag_id)
    assert len(AutoTokenizer.from_pretrained(out)) == len(AutoTokenizer.from_pretrained(trl_model))
    # learning rate 0: the same weights, so in the same encoding the scores are still TRL's own
    for (q, s), scores in zip(ITEMS, PRMEngine.from_checkpoint(out, device="cpu").score(ITEMS)):
        assert scores == pytest.approx(trl_reference(trl_model, q, s, " ки"), abs=1e-5)
    # another step tag than the checkpoint's is refused (exit 2), naming both
    args = train_overrides(imported, synthetic_files, tmp_path / "other", **{"model.step_tag": "<x>"})
    assert main(["train", *args]) == 2
    assert "trained with the step tag ' ки' (trl layout)" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_a_trl_folder_given_as_backbone_without_import_is_warned_about(trl_model, synthetic_files, train_overrides, tmp_path, caplog):
    # the folder PRMTrainer saved, given to train as it is: it has a head but no sidecar, so nothing says how it was
    # encoded; it is trained in this package's encoding (a step tag is added) and the log says how to keep TRL's
    from transformers import AutoTokenizer

    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train

    out = tmp_path / "plain"
    with caplog.at_level("WARNING", logger="prm_distill.train"):
        train(load_config(TrainJobConfig, None, train_overrides(trl_model, synthetic_files, out, **{"optim.max_steps": 1})))
    assert any("already a token classifier" in r.message and "prm-distill import-trl" in r.message for r in caplog.records)
    assert read_sidecar(out).layout == "tagged"
    assert len(AutoTokenizer.from_pretrained(out)) == len(AutoTokenizer.from_pretrained(trl_model)) + 1  # the step tag
    caplog.clear()
    with caplog.at_level("WARNING", logger="prm_distill.train"):  # an exported checkpoint has its sidecar: no warning
        train(load_config(TrainJobConfig, None, train_overrides(out, synthetic_files, tmp_path / "again", **{"optim.max_steps": 1})))
    assert not any("already a token classifier" in r.message for r in caplog.records)


def test_separators_typed_in_a_shell():
    assert read_separator("\\n") == "\n" and read_separator("\\n\\n") == "\n\n" and read_separator(" ки") == " ки"


@pytest.mark.slow
def test_vllm_scores_an_imported_checkpoint_as_the_engine(trl_model, tmp_path, vllm_offline_scores):
    # the STEP pooler answers at every newline, inside steps too; the backend keeps the separators' rows
    model = tmp_path / "imported"
    import_trl(trl_model, model, max_length=64)
    items = ITEMS + [(ITEMS[1][0], [f"Step {i}:\nadd {i} to get {i * 3}." for i in range(10)])]  # several windows
    expected = PRMEngine.from_checkpoint(model, device="cpu").score(items)
    got = vllm_offline_scores(model, items)
    assert [len(g) for g in got] == [len(e) for e in expected]
    assert max(abs(a - b) for g, e in zip(got, expected) for a, b in zip(g, e)) <= 1e-5
