"""verl 0.9.1's own trainer code on the PRM reward manager, in .venv-verl (scripts/setup_verl.sh; `make test`
builds it). Each check runs tests/integrations/verl_driver.py there in a subprocess against a real
`prm-distill serve` on 127.0.0.1 (this process's `prm_server`), and is compared here with numbers
computed from the engine's calibrated step scores. Skipped when .venv-verl is absent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERL_PY = Path(os.environ.get("VERL_VENV", ROOT / ".venv-verl")) / "bin" / "python"
DRIVER = Path(__file__).with_name("verl_driver.py")
QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."
BAD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 8.\n\nThe answer is 8."

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VERL_PY.exists(), reason=f"needs {VERL_PY} (scripts/setup_verl.sh)"),
]


def drive(check: str, env: dict[str, str] | None = None, **args) -> dict:
    done = subprocess.run(
        ["nice", "-n", "10", str(VERL_PY), str(DRIVER), check, json.dumps({k: str(v) for k, v in args.items()})],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **(env or {})})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"{check} failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def expected_scalar(step_scores, text: str, outcome: float) -> float:
    """min-form: the step rewards sum to the weakest step's 2P - 1; verl's scalar is that plus the outcome."""
    return outcome + min(2 * p - 1 for p in step_scores(QUESTION, text))


def test_verls_agent_loop_takes_one_number_per_sample_at_the_last_token(prm_server, tiny_backbone, step_scores):
    out = drive("agent_loop", url=prm_server.url, policy=tiny_backbone)
    assert out["manager"] == "prm_distill.integrations.verl.PRMRewardLoopManager" and out["dense_rows"] is False
    for row, text, outcome, n in zip(out["rm_scores"], (GOOD, BAD), (1.0, 0.0), out["response_lengths"], strict=True):
        assert len(row) == 48 and all(v == 0.0 for i, v in enumerate(row) if i != n - 1)  # verl's last valid token
        assert row[n - 1] == pytest.approx(expected_scalar(step_scores, text, outcome), abs=1e-5)
    for as_dict, row, n in zip(out["as_dict_rm_scores"], out["rm_scores"], out["response_lengths"], strict=True):
        assert len(as_dict) == n and as_dict[-1] == pytest.approx(row[n - 1])
    extra = out["extra"]
    assert extra["score"] == [1.0, 0.0] and extra["prm_fallback"] == [0.0, 0.0] and extra["prm_num_steps"] == [3.0, 3.0]
    assert extra["prm_min_step_score"] == pytest.approx([min(step_scores(QUESTION, GOOD)), min(step_scores(QUESTION, BAD))], abs=1e-6)


def test_verls_colocated_reward_model_route_gets_the_dense_rows(prm_server, tiny_backbone, step_scores, smol_tokenizer):
    from prm_distill.scorer.alignment import assign_tokens_to_steps, decode_with_offsets
    from prm_distill.steps import split_step_spans

    out = drive("dense_route", url=prm_server.url, policy=tiny_backbone)
    assert out["dense_rows"] is True
    for row, text, outcome in zip(out["rm_scores"], (GOOD, BAD), (1.0, 0.0), strict=True):
        ids = smol_tokenizer.encode(text, add_special_tokens=False) + [smol_tokenizer.eos_token_id]
        decoded, ends = decode_with_offsets(smol_tokenizer, ids)
        steps = assign_tokens_to_steps(ends, split_step_spans(decoded))
        last = [max(i for i, s in enumerate(steps) if s == k) for k in sorted(set(steps))]
        signed = [2 * p - 1 for p in step_scores(QUESTION, text)]
        # min-form rewrite by hand: step k gets min(v_k..) - min(v_k+1..), the last step its own value
        suffix = [min(signed[k:]) for k in range(len(signed))]
        per_step = [suffix[k] - suffix[k + 1] for k in range(len(signed) - 1)] + [suffix[-1]]
        per_step[-1] += outcome
        assert [row[i] for i in last] == pytest.approx(per_step, abs=1e-5)
        assert sum(abs(v) for i, v in enumerate(row) if i not in last) == 0.0
        assert sum(row) == pytest.approx(expected_scalar(step_scores, text, outcome), abs=1e-5)
    assert out["extra"]["prm_num_steps"] == [3.0, 3.0]


def test_verls_loader_gives_one_class_however_often_the_file_is_loaded():
    assert drive("loading") == {"same_class": True, "batch_same": True}


def test_a_fresh_process_finds_the_registered_name_through_verls_external_modules():
    out = drive("fresh_register", env={"VERL_USE_EXTERNAL_MODULES": "prm_distill.integrations.verl"})
    assert out == {"found": "prm_distill.integrations.verl.PRMRewardLoopManager"}


def test_the_engine_scores_the_same_under_verls_transformers(tiny_checkpoint, step_scores):
    out = drive("engine", checkpoint=tiny_checkpoint)
    assert out["transformers"].startswith("5.10.")  # the lowest transformers of our range (verl pins <5.11)
    assert out["good"] == pytest.approx(step_scores(QUESTION, GOOD), abs=1e-5)
    assert out["bad"] == pytest.approx(step_scores(QUESTION, BAD), abs=1e-5)


def test_pip_check_is_clean_in_the_verl_env():
    done = subprocess.run([str(VERL_PY), "-m", "pip", "check"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
