"""The vLLM offline policy backend (`LLM.generate`), run in the .venv-vllm environment (vLLM pins
its own torch); skipped when that environment is absent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import VLLM_PY

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json
from prm_distill.generate import GenRequest, PolicyConfig, load_policy, problem_messages

if __name__ == "__main__":
    p = load_policy(PolicyConfig(policy="smollm2", backend="vllm"))
    q = "Tom has 3 apples and buys 4 more. How many apples does he have?"
    reqs = [GenRequest(problem_messages(q), 1, 0.8, 24), GenRequest(problem_messages(q), 1, 0.8, 24),
            GenRequest(problem_messages(q), 2, 0.8, 24), GenRequest(problem_messages(q, prefix_steps=["Tom starts with 3 apples."]), 1, 0.8, 8)]
    out = p.generate(reqs)
    # many seeded requests with long prompts at once: more prompt tokens than one engine step takes
    # (on CPU this crashed vLLM 0.32 with chunked prefill on: "CPU Generator does not use offset")
    long_q = q + " " + " ".join(f"On day {d} he counts them again and writes the number down." for d in range(1, 15))
    many = p.generate([GenRequest(problem_messages(long_q), 100 + i, 0.8, 4) for i in range(64)])
    again = p.generate([GenRequest(problem_messages(long_q), 100, 0.8, 4)])
    print("RESULT " + json.dumps({"name": p.name, "gens": [[g.text, g.tokens_in, g.tokens_out, g.finish_reason] for g in out],
                                  "many": [g.text for g in many], "many_tokens_in": many[0].tokens_in, "again": again[0].text}))
"""


def test_vllm_policy_samples_are_seeded_and_continue_prefixes(tmp_path):
    if not VLLM_PY.is_file():
        pytest.skip(f"needs the vLLM venv {VLLM_PY.parent.parent} (scripts/setup_vllm.sh)")
    script = tmp_path / "run_vllm_policy.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    r = subprocess.run([str(VLLM_PY), str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    res = json.loads(line.removeprefix("RESULT "))
    a, b, c, cont = res["gens"]
    assert res["name"] == "vllm:smollm2"
    assert a[0] == b[0] and a[0] != c[0]  # a request's seed fixes its sample
    assert all(0 < g[2] <= 24 for g in (a, b, c)) and 0 < cont[2] <= 8
    assert cont[1] > a[1] and not cont[0].startswith("Tom starts with 3 apples")  # the prefix is prompt, not output
    assert len(res["many"]) == 64 and all(res["many"]) and res["many_tokens_in"] * 64 > 8192  # well over one step's token budget
    assert res["again"] == res["many"][0]  # a request's seed still fixes its sample when it ran among 63 others
