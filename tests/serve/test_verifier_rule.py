"""The checkpoint's verifier rule is applied in one place: every backend serves the same composed
scores, `--no-verifier` gives the model alone, and a checkpoint without the rule is unchanged."""

from __future__ import annotations

import json
import shutil

from prm_distill.checkpoint import SIDECAR_NAME, read_sidecar
from prm_distill.cli import main
from prm_distill.serve import PRMEngine

ITEMS = [
    ("What is 2 + 3?", ["2 + 3 = 6.", "The answer is 6."]),
    ("What is 4 * 4?", ["4 * 4 = 16.", "So $\\frac{16}{2} = 9$.", "The answer is 16."]),
]
REFUTED = [[True, False], [False, True, False]]


def test_new_checkpoints_carry_the_rule_and_the_engine_applies_it_exactly(tiny_checkpoint):
    assert read_sidecar(tiny_checkpoint).verifier == {"kind": "statements", "cap": 0.1}
    composed = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32").score(ITEMS)
    alone = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", verifier=False).score(ITEMS)
    for c_row, a_row, r_row in zip(composed, alone, REFUTED):
        for c, a, refuted in zip(c_row, a_row, r_row):
            assert c == (min(a, 0.1) if refuted else a)


def test_a_checkpoint_without_the_rule_scores_with_the_model_alone(tiny_checkpoint, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(tiny_checkpoint, old)
    side = json.loads((old / SIDECAR_NAME).read_text())
    del side["verifier"]
    (old / SIDECAR_NAME).write_text(json.dumps(side))
    legacy = PRMEngine.from_checkpoint(old, device="cpu", dtype="float32")
    assert legacy.verifier_rule is None
    assert legacy.score(ITEMS) == PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", verifier=False).score(ITEMS)


def test_eval_and_score_take_no_verifier(tiny_checkpoint, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "question": q, "steps": s, "labels": [1.0] * len(s)}) + "\n" for i, (q, s) in enumerate(ITEMS)))
    for flags, expected in (([], {"kind": "statements", "cap": 0.1}), (["--no-verifier"], None)):
        out = tmp_path / f"rep{len(flags)}.json"
        assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(data), "--threshold", "0.5", "--device", "cpu", "--output", str(out), *flags]) == 0
        assert json.loads(out.read_text())["verifier"] == expected
    assert "verifier: off (the model alone)" in capsys.readouterr().out
    scored = {}
    for flags in ([], ["--no-verifier"]):
        out = tmp_path / f"s{len(flags)}.jsonl"
        assert main(["score", "--model", str(tiny_checkpoint), "--input", str(data), "--output", str(out), "--device", "cpu", *flags]) == 0
        scored[len(flags)] = [json.loads(x)["step_scores"] for x in out.read_text().splitlines()]
    assert scored[0][0][0] <= 0.1 and scored[0][0][1] == scored[1][0][1]


def test_training_can_switch_the_rule_off(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train

    out = tmp_path / "m"
    train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **{"optim.max_steps": 1, "verifier.enabled": "false"})))
    assert read_sidecar(out).verifier is None
