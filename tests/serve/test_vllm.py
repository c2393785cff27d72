"""vLLM's pooling runner with the STEP pooler, serving the exported tiny checkpoint offline
(`LLM.encode`) and over HTTP (`vllm serve`, POST /pooling), gives the same per-step scores as
`PRMEngine` (fp32: within 1e-5), long trajectories (several windows) included.

vLLM lives in its own venv (scripts/setup_vllm.sh), so it runs in subprocesses here; the tests
skip when that venv is absent. The HTTP server starts once per session, and boots while the
offline test runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from prm_distill.checkpoint import read_sidecar
from prm_distill.serve import PRMEngine
from prm_distill.serve.client import wait_until_ready
from prm_distill.serve.vllm_backend import VLLMPoolingClient, serve_command

pytestmark = pytest.mark.slow

VLLM_VENV = Path(__file__).resolve().parents[2] / ".venv-vllm"
ITEMS = [
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("Compute 6 * 7.", ["6 * 7 = 42."]),
    ("Mia starts with 3 apples and gets more each hour. How many after 40 hours?",
     [f"Step {i + 1}: in hour {i + 1} she gets {i + 2} apples, so she has {3 + sum(range(2, i + 3))}." for i in range(40)]),
]


def vllm_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **extra}


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    if not (VLLM_VENV / "bin" / "python").is_file():
        pytest.skip(f"vLLM is not installed in {VLLM_VENV} (run scripts/setup_vllm.sh)")
    return VLLM_VENV


@pytest.fixture(scope="module")
def expected(tiny_checkpoint) -> list[list[float]]:
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")
    assert len(engine.encode(*ITEMS[-1]).windows) > 1  # the long item really is scored in windows
    return [engine.score([item])[0] for item in ITEMS]


@pytest.fixture(scope="session")
def vllm_server_process(vllm_venv, tiny_checkpoint, tmp_path_factory):
    """`vllm serve` (the command `serve_command` gives users) for the tiny checkpoint, started once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = serve_command(tiny_checkpoint, port=port)
    argv[0] = str(vllm_venv / "bin" / "vllm")
    log_path = tmp_path_factory.mktemp("vllm_serve") / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=vllm_env(), cwd=log_path.parent)
    yield proc, f"http://127.0.0.1:{port}", log_path
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def vllm_url(vllm_server_process) -> str:
    proc, url, log_path = vllm_server_process
    if asyncio.run(wait_until_ready(url, timeout_s=300, interval_s=0.5, alive=lambda: proc.poll() is None)):
        return url
    if proc.poll() is not None:
        pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
    pytest.fail(f"vllm serve was not ready after 300 s:\n{log_path.read_text()[-3000:]}")


def max_difference(got: list[list[float]], want: list[list[float]]) -> float:
    assert [len(s) for s in got] == [len(s) for s in want]
    return max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))


def test_offline_vllm_encode_matches_the_engine(vllm_venv, vllm_server_process, tiny_checkpoint, expected, tmp_path):
    out = tmp_path / "scores.json"
    done = subprocess.run(
        [str(vllm_venv / "bin" / "python"), "-m", "prm_distill.serve.vllm_backend", "--model", str(tiny_checkpoint),
         "--output", str(out)],
        input=json.dumps({"items": [{"question": q, "steps": s} for q, s in ITEMS]}), text=True,
        capture_output=True, env=vllm_env(VLLM_ENABLE_V1_MULTIPROCESSING="0"), cwd=tmp_path, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(out.read_text())
    assert answer["model"] == tiny_checkpoint.name
    assert max_difference(answer["scores"], expected) <= 1e-5


def test_vllm_serve_pooling_over_http_matches_the_engine(vllm_url, tiny_checkpoint, expected):
    async def main():
        client = VLLMPoolingClient(vllm_url, tiny_checkpoint, served_model_name=tiny_checkpoint.name)
        try:
            return client, await client.score_batch(ITEMS), await client.score(*ITEMS[0])
        finally:
            await client.aclose()

    client, batch, one = asyncio.run(main())
    assert max_difference(batch, expected) <= 1e-5
    assert max_difference([one], expected[:1]) <= 1e-5
    assert client.sidecar == read_sidecar(tiny_checkpoint)  # what DistilledPRMScorer reads for threshold and calibration
