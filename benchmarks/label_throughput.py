"""Labeling throughput against a real OpenAI-compatible judge server (vLLM with SmolLM2-135M-Instruct
on this CPU unless --base-url points elsewhere): step-votes judged per second at concurrency 1, 4
and 16 in prefix mode, then requests and judge tokens per judged step in prefix versus trajectory
mode and their ratio. Every run starts from an empty cache, so each request really reaches the server.

    python benchmarks/label_throughput.py [--base-url http://127.0.0.1:8000/v1] [--records 6] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prm_distill.config import load_config
from prm_distill.labeling import LabelJobConfig, run_label_job
from prm_distill.synthetic import SyntheticConfig, generate

ROOT = Path(__file__).resolve().parents[1]


def start_vllm() -> tuple[subprocess.Popen, str]:
    from prm_distill.backbones import resolve_backbone
    from prm_distill.serve.client import wait_until_ready

    py = ROOT / ".venv-vllm" / "bin" / "python"
    if not py.is_file():
        sys.exit(f"no --base-url and no {py} (scripts/setup_vllm.sh)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_backbone("smollm2"), "--served-model-name", "smollm2",
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    t0 = time.time()
    if asyncio.run(wait_until_ready(f"http://127.0.0.1:{port}", timeout_s=240, interval_s=2, alive=lambda: proc.poll() is None)):
        print(f"vLLM judge server ready in {time.time() - t0:.0f}s", flush=True)
        return proc, f"http://127.0.0.1:{port}/v1"
    proc.kill()
    sys.exit("vLLM server not ready after 240 s")


def run(base_url: str, rollouts: Path, mode: str, concurrency: int, args) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(LabelJobConfig, None, [
            f"input={rollouts}", f"output={out}", f"mode={mode}", f"votes={args.votes}", "max_invalid_retries=0", "progress=false",
            f"judge.base_url={base_url}", f"judge.model={args.model}", f"judge.concurrency={concurrency}", f"judge.max_tokens={args.max_tokens}",
        ])
        t0 = time.perf_counter()
        s = run_label_job(cfg)
        dt = time.perf_counter() - t0
    judged = s["steps"] * args.votes
    r = s["this_run"]
    return {"mode": mode, "concurrency": concurrency, "seconds": round(dt, 1), "step_votes_per_s": round(judged / dt, 2),
            "requests_per_step_vote": round(r["requests_sent"] / judged, 3), "tokens_in_per_step_vote": round(r["tokens_in"] / judged, 1),
            "tokens_out_per_step_vote": round(r["tokens_out"] / judged, 1), "invalid_vote_rate": s["invalid_vote_rate"],
            "labelled_steps": s["labelled_steps"], "steps": s["steps"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", help="OpenAI-compatible /v1 base (default: start vLLM from .venv-vllm)")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--records", type=int, default=6)
    p.add_argument("--votes", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = p.parse_args()
    proc, base_url = (None, args.base_url) if args.base_url else start_vllm()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rollouts = Path(tmp) / "rollouts.jsonl"
            rollouts.write_text("".join(json.dumps({"id": r.id, "question": r.question, "steps": r.steps}) + "\n"
                                        for r in generate(SyntheticConfig(n=args.records, seed=9, max_events=3))))
            rows = [run(base_url, rollouts, "prefix", c, args) for c in args.concurrency]
            rows.append(run(base_url, rollouts, "trajectory", max(args.concurrency), args))
        for row in rows:
            print(json.dumps(row))
        pre, traj = rows[-2], rows[-1]
        pre_tokens = pre['tokens_in_per_step_vote'] + pre['tokens_out_per_step_vote']
        traj_tokens = traj['tokens_in_per_step_vote'] + traj['tokens_out_per_step_vote']
        print(f"prefix vs trajectory at concurrency {max(args.concurrency)}: requests per step-vote "
              f"{pre['requests_per_step_vote']} vs {traj['requests_per_step_vote']}; judge tokens (in+out) per step-vote "
              f"{pre_tokens:.1f} vs {traj_tokens:.1f} (ratio {pre_tokens / max(traj_tokens, 1e-9):.2f}x)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
