"""vLLM's pooling runner (STEP pooler) on a Qwen2-architecture checkpoint trained by `prm-distill
train` (the Qwen2.5 students' architecture, q/k/v biases non-zero) gives the engine's per-step scores
(fp32: within 1e-5), a long trajectory scored in several windows included.

vLLM lives in its own venv (scripts/setup_vllm.sh), so it runs in a subprocess; skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from prm_distill.serve import PRMEngine

pytestmark = pytest.mark.slow

VLLM_VENV = Path(__file__).resolve().parents[2] / ".venv-vllm"
ITEMS = [
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("Compute 6 * 7.", ["6 * 7 = 42."]),
    ("Mia starts with 3 apples and gets more each hour. How many after 40 hours?",
     [f"Step {i + 1}: in hour {i + 1} she gets {i + 2} apples, so she has {3 + sum(range(2, i + 3))}." for i in range(40)]),
]


def test_offline_vllm_encode_on_a_qwen2_checkpoint_matches_the_engine(qwen2_checkpoint, tmp_path):
    if not (VLLM_VENV / "bin" / "python").is_file():
        pytest.skip(f"vLLM is not installed in {VLLM_VENV} (run scripts/setup_vllm.sh)")
    engine = PRMEngine.from_checkpoint(qwen2_checkpoint, device="cpu", dtype="float32")
    assert len(engine.encode(*ITEMS[-1]).windows) > 1  # the long item really is scored in windows
    expected = [engine.score([item])[0] for item in ITEMS]
    out = tmp_path / "scores.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(
        [str(VLLM_VENV / "bin" / "python"), "-m", "prm_distill.serve.vllm_backend", "--model", str(qwen2_checkpoint),
         "--output", str(out)],
        input=json.dumps({"items": [{"question": q, "steps": s} for q, s in ITEMS]}), text=True,
        capture_output=True, env=env, cwd=tmp_path, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())["scores"]
    assert [len(s) for s in got] == [len(s) for _, s in ITEMS]
    assert max(abs(a - b) for g, w in zip(got, expected) for a, b in zip(g, w)) <= 1e-5
