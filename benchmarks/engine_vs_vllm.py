"""Our engine versus vLLM's pooling runner (STEP pooler) on the same exported checkpoint, side by side:
steps/s of each, their ratio, and the largest per-step score difference.

In-process (default): `PRMEngine.score` here against `LLM.encode` in vLLM's venv (a subprocess
running `python -m prm_distill.serve.vllm_backend`), the same token ids, the same thread count,
the best of `--repeat` timed runs each (start-up excluded), over `--rounds` rounds that run every
side in turn. Each side's process CPU time is reported beside its wall time: on a shared, busy
machine the CPU-time ratio is the steadier one.

Over HTTP (`--prm-url` and `--vllm-url`, servers already running, as benchmarks/gpu_check.sh starts
them): `PRMClient` against `prm-distill serve` and `VLLMPoolingClient` against `vllm serve`, with
`--concurrency` requests in flight.

    python benchmarks/engine_vs_vllm.py                        # default backbone, untrained head
    python benchmarks/engine_vs_vllm.py --dtype bfloat16 --rounds 3 --also-kernels fused torch
    python benchmarks/engine_vs_vllm.py --tiny --trajectories 4 --repeat 1    # smoke run
    python benchmarks/engine_vs_vllm.py --model DIR --prm-url http://127.0.0.1:8102 --vllm-url http://127.0.0.1:8101
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from scoring_throughput import trajectory
from serve_latency import bench_checkpoint

from prm_distill.serve import PRMEngine
from prm_distill.serve.client import PRMClient
from prm_distill.serve.engine import auto_cpu_kernels
from prm_distill.serve.vllm_backend import VLLMPoolingClient

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def workload(n: int, steps: int) -> list[tuple[str, list[str]]]:
    """n distinct trajectories of `steps` steps (distinct questions: nothing is cached or shared)."""
    question, lines = trajectory(steps)
    return [(f"({i + 1}) {question}", lines) for i in range(n)]


def engine_run(model: Path, items, repeat: int, dtype: str = "float32", cpu_kernels: str = "auto") -> tuple[float, float, list[list[float]]]:
    """Best wall seconds, best process CPU seconds (steadier on a shared machine), the scores."""
    engine = PRMEngine.from_checkpoint(model, device="cpu", dtype=dtype, cpu_kernels=cpu_kernels)
    engine.score(items[:1])  # warm-up
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        scores = engine.score(items)
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - start_cpu)
    return best, best_cpu, scores


def vllm_run(model: Path, items, repeat: int, threads: int, python: Path, dtype: str = "float32") -> tuple[float, float, list[list[float]]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "OMP_NUM_THREADS": str(threads),
           # vLLM binds its OpenMP threads to every core of the node unless told which ones.
           "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}" if threads > 1 else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        done = subprocess.run(
            [str(python), "-m", "prm_distill.serve.vllm_backend", "--model", str(model), "--repeat", str(repeat), "--output", str(out),
             "--dtype", dtype],
            input=json.dumps({"items": [{"question": q, "steps": s} for q, s in items]}), text=True,
            capture_output=True, env=env, cwd=tmp,
        )
        if done.returncode != 0:
            raise RuntimeError(f"vLLM failed:\n{done.stderr[-3000:]}")
        answer = json.loads(out.read_text())
    return answer["seconds"], answer["cpu_seconds"], answer["scores"]


async def http_run(client, items, concurrency: int) -> tuple[float, None, list[list[float]]]:
    """Seconds to score all items with `concurrency` requests in flight (after a warm-up), and the scores
    (the servers' CPU time is not seen from here: None)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item):
        async with gate:
            return await client.score(*item)

    await asyncio.gather(*(one(item) for item in items[:concurrency]))
    start = time.perf_counter()
    scores = await asyncio.gather(*(one(item) for item in items))
    return time.perf_counter() - start, None, list(scores)


async def both_over_http(args, model: Path, items) -> dict[str, tuple[float, float | None, list[list[float]]]]:
    ours = PRMClient(args.prm_url)
    theirs = VLLMPoolingClient(args.vllm_url, model)
    try:
        return {"prm-distill serve": await http_run(ours, items, args.concurrency),
                "vllm serve (pooling)": await http_run(theirs, items, args.concurrency)}
    finally:
        await ours.aclose()
        await theirs.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="exported checkpoint (default: the default backbone with an untrained head)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of the default backbone (smoke run)")
    ap.add_argument("--trajectories", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="in-process: timed runs per round, the best counts")
    ap.add_argument("--rounds", type=int, default=1, help="in-process: rounds that run every side in turn (the best counts)")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="in-process: torch/OpenMP threads for both")
    ap.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON, help="python of the venv that has vLLM")
    ap.add_argument("--prm-url", help="with --vllm-url: compare two running servers over HTTP")
    ap.add_argument("--vllm-url")
    ap.add_argument("--concurrency", type=int, default=16, help="over HTTP: requests in flight")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="in-process: both sides' dtype")
    ap.add_argument("--also-kernels", nargs="*", default=[], choices=["fused", "onednn", "torch"],
                    help="in-process: also time our engine with these cpu_kernels (the default is auto: per dtype)")
    args = ap.parse_args()

    model = bench_checkpoint(args.model, args.tiny)
    items = workload(args.trajectories, args.steps)
    n_steps = sum(len(steps) for _, steps in items)
    if args.prm_url and args.vllm_url:
        runs = asyncio.run(both_over_http(args, model, items))
        setting = f"over HTTP, {args.concurrency} in flight"
    else:
        torch.set_num_threads(args.threads)
        default = f"PRMEngine (auto: {auto_cpu_kernels(getattr(torch, args.dtype))})"
        runners = {default: lambda: engine_run(model, items, args.repeat, args.dtype),
                   "vLLM LLM.encode (pooling)": lambda: vllm_run(model, items, args.repeat, args.threads, args.vllm_python, args.dtype)}
        for kernels in args.also_kernels:
            runners[f"PRMEngine, {kernels} kernels"] = lambda k=kernels: engine_run(model, items, args.repeat, args.dtype, k)
        runs = {}
        for _ in range(args.rounds):  # interleaved, so a busy spell on a shared machine hits every side
            for name, runner in runners.items():
                seconds, cpu, scores = runner()
                if name in runs:
                    seconds, cpu = min(seconds, runs[name][0]), min(cpu, runs[name][1])
                runs[name] = (seconds, cpu, scores)
        setting = f"in-process, {args.dtype}, {args.threads} thread(s), best of {args.rounds} x {args.repeat}"
    print(f"model {model}: {len(items)} trajectories x {args.steps} steps ({setting})")
    for name, (seconds, cpu, _) in runs.items():
        on_cpu = f", {n_steps / cpu:.1f} steps per CPU-second" if cpu else ""
        print(f"{name:>28}: {n_steps / seconds:9.1f} steps/s  ({seconds * 1000:.0f} ms{on_cpu})")
    (ours, ours_cpu, our_scores), (theirs, theirs_cpu, their_scores) = list(runs.values())[:2]
    for kernels in args.also_kernels:
        seconds, cpu, _ = runs[f"PRMEngine, {kernels} kernels"]
        per_cpu = f" ({theirs_cpu / cpu:.2f}x per CPU-second)" if cpu and theirs_cpu else ""
        print(f"{kernels + ' / vLLM':>28}: {theirs / seconds:9.2f}x steps/s{per_cpu}")
    diff = max(abs(a - b) for x, y in zip(our_scores, their_scores, strict=True) for a, b in zip(x, y, strict=True))
    print(f"{'ratio (ours / vLLM)':>28}: {theirs / ours:9.2f}x steps/s")
    if ours_cpu and theirs_cpu:  # CPU time of each process: what a busy, shared machine disturbs least
        print(f"{'ratio per CPU-second':>28}: {theirs_cpu / ours_cpu:9.2f}x")
    print(f"{'max |score difference|':>28}: {diff:.2e}")


if __name__ == "__main__":
    main()
