"""Fixtures for the labeling tests: a scriptable OpenAI-compatible HTTP server (a test double), a
counting proxy in front of a real vLLM judge server, and small rollout files."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

from prm_distill.synthetic import SyntheticConfig, generate

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_answer(body: dict) -> str:
    """A well-formed verdict in the format the prompt asks for: every step good (score 1)."""
    user = body["messages"][-1]["content"]
    if "JSON list" in user:
        n = int(re.search(r"split into (\d+) steps", user).group(1))
        return json.dumps([{"step": k, "reason": "fine", "score": 1} for k in range(1, n + 1)])
    if "First error" in user:
        return "All steps check out.\nFirst error: none"
    return "The step follows from the previous ones.\nScore: 1"


class OpenAIDouble:
    """TEST DOUBLE of an OpenAI-compatible chat server (not a model): a real HTTP server on
    127.0.0.1 that answers POST /v1/chat/completions. `script` is consumed one entry per request:
    "ok", "429", "500", "garbage" (200 with a non-JSON body), "invalid" (a reply without a score),
    "offscale" (Score: 7), "sleep:S" (answer after S seconds); when it is empty every request is
    "ok". GET /v1/models lists `models`. With `upstream`, requests are forwarded there instead (a counting proxy in front of a
    real server). Every request body is recorded in `bodies`."""

    def __init__(self, script: list[str] | None = None, answer: Callable[[dict], str] = default_answer,
                 delay_s: float = 0.0, upstream: str | None = None, models: list[str] | None = None):
        self.script, self.answer, self.delay_s, self.upstream = list(script or []), answer, delay_s, upstream
        self.models = list(models or [])  # listed by GET /v1/models (the health check of policy clients)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    data = [{"id": m, "object": "model", "root": f"/weights/{m}"} for m in double.models]
                    return double._send(self, 200, json.dumps({"object": "list", "data": data}).encode())
                double._send(self, 404, b'{"error": "not found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with double.lock:
                    double.bodies.append(body)
                    double.headers.append(dict(self.headers))
                    action = double.script.pop(0) if double.script else "ok"
                double.respond(self, body, action)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def respond(self, h: BaseHTTPRequestHandler, body: dict, action: str) -> None:
        if action.startswith("sleep:"):
            time.sleep(float(action.split(":")[1]))
            action = "ok"
        if self.delay_s:
            time.sleep(self.delay_s)
        if action in ("429", "500"):
            return self._send(h, int(action), b'{"error": "try later"}')
        if action == "garbage":
            return self._send(h, 200, b"<html>not json</html>")
        if self.upstream:
            import httpx

            r = httpx.post(self.upstream + "/chat/completions", json=body, timeout=600)
            return self._send(h, r.status_code, r.content)
        text = {"invalid": "I am not sure about this one.", "offscale": "Looks good.\nScore: 7"}.get(action) or self.answer(body)
        payload = {"id": "x", "object": "chat.completion", "model": body["model"],
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": len(json.dumps(body["messages"])) // 4, "completion_tokens": len(text) // 4}}
        self._send(h, 200, json.dumps(payload).encode())

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, data: bytes) -> None:
        try:
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out first: that is the test
            pass

    def duplicates(self) -> int:
        """Requests whose exact body (prompt + sampling params) was sent before."""
        counts = Counter(json.dumps(b, sort_keys=True) for b in self.bodies)
        return sum(c - 1 for c in counts.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def openai_double():
    made: list[OpenAIDouble] = []

    def make(**kw) -> OpenAIDouble:
        made.append(OpenAIDouble(**kw))
        return made[-1]

    yield make
    for d in made:
        d.close()


@pytest.fixture
def rollouts(tmp_path) -> Callable[..., Path]:
    """rollouts(n, seed) -> a JSONL of embedded arithmetic rollouts (with answers and reference labels)."""

    def make(n: int = 4, seed: int = 3, name: str = "rollouts.jsonl", **kw) -> Path:
        recs = generate(SyntheticConfig(n=n, seed=seed, **kw))
        path = tmp_path / name
        with open(path, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps({"id": r.id, "question": r.question, "steps": r.steps, "labels": r.labels,
                                    "answer": r.metadata["answer"], "outcome": r.outcome}) + "\n")
        return path

    return make


@pytest.fixture(scope="session")
def vllm_judge_server():
    """A real vLLM OpenAI-compatible server with the SmolLM2 weights, once per session (about a minute
    to start); skipped when the .venv-vllm environment (scripts/setup_vllm.sh) is absent."""
    if not VLLM_PY.is_file():
        pytest.skip(f"needs the vLLM venv {VLLM_PY.parent.parent} (scripts/setup_vllm.sh)")
    if subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode != 0:
        pytest.skip(f"{VLLM_PY} cannot import vllm (run scripts/setup_vllm.sh)")
    from prm_distill.backbones import resolve_backbone

    model = resolve_backbone("smollm2")
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-judge-{port}.log", "w")
    proc = subprocess.Popen(
        [str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", "smollm2",
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    import asyncio

    from prm_distill.health import wait_until_ready

    try:
        if not asyncio.run(wait_until_ready(f"http://127.0.0.1:{port}", timeout_s=600, interval_s=2, alive=lambda: proc.poll() is None)):
            pytest.fail(f"vLLM judge server not ready after 600 s (exit code {proc.poll()}); see {log.name}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_cli(*args: str, timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prm_distill.cli", "label", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, **popen)
