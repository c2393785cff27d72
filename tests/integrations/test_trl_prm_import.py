"""A PRM trained and saved by TRL 1.13's own PRMTrainer, imported with `prm-distill import-trl`, scores every
step as TRL's own `tokenize_row` sequences do (within 1e-5). TRL 1.13 lives in .venv-trl (scripts/setup_trl.sh:
the TRL in .venv, 1.16, no longer has PRMTrainer); the test skips where that env is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from prm_distill.import_trl import import_trl
from prm_distill.serve.engine import PRMEngine

pytestmark = pytest.mark.slow

TRL_PYTHON = Path(__file__).resolve().parents[2] / ".venv-trl" / "bin" / "python"
DRIVER = Path(__file__).with_name("trl_prm_driver.py")
ITEMS = [
    ["Tom has 3 boxes of 4 pens. How many pens?", ["3 boxes x 4 pens = 12 pens.", "So he has\n12 pens.", "The answer is 12."]],
    ["What is 10 - 7?", ["10 - 7 = 4.", "The answer is 4."]],
]


@pytest.mark.parametrize("separator", ["\n", " ки"])
def test_a_prm_trained_by_trls_prmtrainer_scores_as_trl_scores_it(tiny_backbone, tmp_path, separator):
    if not TRL_PYTHON.is_file():
        pytest.skip(f"TRL 1.13 is not installed in {TRL_PYTHON.parents[1]} (run scripts/setup_trl.sh)")
    rows = [{"prompt": f"What is {a} + 2?", "completions": [f"{a} + 2 = {a + 2 + (a % 2)}.", f"The answer is {a + 2 + (a % 2)}."],
             "labels": [a % 2 == 0] * 2} for a in range(12)]
    trl_dir = tmp_path / "trl-prm"
    spec = {"backbone": str(tiny_backbone), "out": str(trl_dir), "separator": separator, "rows": rows, "items": ITEMS}
    done = subprocess.run([str(TRL_PYTHON), str(DRIVER), json.dumps(spec)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    trl = json.loads(done.stdout.strip().splitlines()[-1])

    import_trl(trl_dir, tmp_path / "imported", separator=separator)
    engine = PRMEngine.from_checkpoint(tmp_path / "imported", device="cpu")
    for (question, steps), seq in zip(ITEMS, trl["sequences"]):  # the very ids TRL trained on, scored where TRL labelled
        (window,) = engine.encoder.encode(question, steps).windows
        assert window.input_ids == seq["input_ids"] and window.tag_positions == seq["positions"]
    got, want = engine.score([(q, s) for q, s in ITEMS]), trl["scores"]
    assert [len(g) for g in got] == [len(s) for _, s in ITEMS] == [len(w) for w in want]
    assert max(abs(a - 0.5) for w in want for a in w) > 0.05  # not scores that all sit at 0.5
    assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) <= 1e-5
