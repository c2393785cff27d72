"""The vLLM offline backend (vllm.LLM batch generation), run in the .venv-vllm environment, since
vLLM pins its own torch; skipped when that environment is absent."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .conftest import ROOT, VLLM_PY

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
from prm_distill.labeling import LabelJobConfig, label_records
from prm_distill.labeling.config import JudgeConfig
from prm_distill.synthetic import SyntheticConfig, generate

if __name__ == "__main__":
    recs = generate(SyntheticConfig(n=2, seed=3, min_events=1, max_events=2))
    cfg = LabelJobConfig(mode="trajectory", votes=2, max_invalid_retries=1, progress=False,
                         judge=JudgeConfig(backend="vllm", model="smollm2", max_tokens=40))
    out = label_records(recs, cfg)
    print("RESULT " + json.dumps([r.to_dict() for r in out]))
"""


def test_vllm_offline_backend_labels_records(tmp_path):
    if not VLLM_PY.is_file():
        pytest.skip(f"needs the vLLM venv {VLLM_PY.parent.parent} (scripts/setup_vllm.sh)")
    script = tmp_path / "run_vllm_offline.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    r = subprocess.run([str(VLLM_PY), str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    recs = json.loads(line.removeprefix("RESULT "))
    assert [x["id"] for x in recs] == ["syn-0", "syn-1"]
    for x in recs:
        assert x["judge"]["prompt_version"] == "trajectory.v1" and x["judge"]["answers"] >= 2  # 2 votes, retries on top
        for lab, votes in zip(x["labels"], x["votes"]):
            assert set(votes) <= {0.0, 0.5, 1.0}
            assert lab is None if len(votes) < 2 else lab == pytest.approx(sum(votes) / len(votes))
