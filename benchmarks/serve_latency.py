"""`prm-distill serve` under load: throughput and p50/p99 latency at 1, 16 and 64 concurrent clients,
dynamic batching on versus off (ratio), and the p50 of a 10-step trajectory at 1 client.
"on" = the defaults: `PRMClient` coalesces concurrent calls into shared requests and the server
micro-batches; "server" = only the server batches; "off" = one request and one engine call per
trajectory.

Each mode runs the real CLI server in a subprocess (so the load generator does not share its
interpreter) and drives it with `PRMClient` coroutines that each send one 10-step trajectory after
another for `--seconds`. Targets (issue 4): batching on >= 3x the throughput of off at 16 clients,
and p50 < 50 ms at 1 client with the default backbone.

    python benchmarks/serve_latency.py                       # default backbone, untrained head (scores are not the point)
    python benchmarks/serve_latency.py --model runs/demo/iter-1/train/model
    python benchmarks/serve_latency.py --tiny --seconds 2    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scorer_overhead import export_checkpoint  # untrained head on a backbone, in the checkpoint format
from scoring_throughput import tiny_backbone, trajectory

from prm_distill.backbones import cache_dir, resolve_backbone
from prm_distill.serve.client import ClientConfig, PRMClient, wait_until_ready


def bench_checkpoint(model: str | None, tiny: bool) -> Path:
    """`--model` as given, else an exported checkpoint of the tiny or the default backbone (cached)."""
    if model:
        return Path(model)
    out = cache_dir() / "bench" / ("tiny-prm" if tiny else "smollm2-prm")
    if not (out / "prm_distill.json").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            export_checkpoint(tiny_backbone(Path(tmp)) if tiny else resolve_backbone("smollm2"), out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    if not await wait_until_ready(url, timeout_s, interval_s=0.2, alive=lambda: proc.poll() is None):
        raise RuntimeError(f"the server at {url} did not become ready")


def start_server(model: Path, port: int, extra: list[str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "prm_distill.cli", "serve", "--model", str(model), "--port", str(port), *extra]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})


async def drive(url: str, clients: int, seconds: float, question: str, steps: list[str], coalesce: bool = True) -> tuple[float, list[float]]:
    """(trajectories/s, latencies in s) with `clients` coroutines scoring back to back for `seconds`
    through one PRMClient (as the RL scorer's sessions share one)."""
    async with PRMClient(url, config=ClientConfig(max_connections=clients, timeout_s=120, coalesce=coalesce)) as client:
        return await drive_client(client, clients, seconds, question, steps)


async def drive_client(client, clients: int, seconds: float, question: str, steps: list[str]) -> tuple[float, list[float]]:
    """`drive` through any scorer client with `async score(question, steps)` (PRMClient,
    VLLMPoolingClient): the same load for every server (benchmarks/gpu_recipe.py)."""
    latencies: list[float] = []
    await asyncio.gather(*(client.score(question, steps) for _ in range(clients)))  # warm-up, connections open
    end = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < end:
            t = time.perf_counter()
            await client.score(question, steps)
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, latencies


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="exported checkpoint (default: the default backbone with an untrained head)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of the default backbone (smoke run)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--seconds", type=float, default=10.0, help="measured time per point")
    ap.add_argument("--steps", type=int, default=10, help="steps per trajectory")
    ap.add_argument("--max-wait-ms", default="2", help="batching window of the 'on' mode")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `prm-distill serve` option, repeatable (e.g. --server-arg=--threads=2)")
    args = ap.parse_args()

    model = bench_checkpoint(args.model, args.tiny)
    question, steps = trajectory(args.steps)
    # (server options, client coalescing): "on" = both batch (the defaults); "server" = only the
    # server batches (one HTTP request per trajectory); "off" = one request and one engine call each.
    modes = {"on": (["--max-wait-ms", args.max_wait_ms, *args.server_arg], True),
             "server": (["--max-wait-ms", args.max_wait_ms, *args.server_arg], False),
             "off": (["--no-batching", *args.server_arg], False)}
    results: dict[tuple[str, int], tuple[float, list[float]]] = {}
    print(f"model {model}, {args.steps}-step trajectories, {args.seconds:g} s per point, {os.cpu_count()} CPUs, server options {args.server_arg}")
    print(f"{'batching':>9}{'clients':>8}{'traj/s':>9}{'steps/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
    for mode, (extra, coalesce) in modes.items():
        port = free_port()
        proc = start_server(model, port, extra)
        url = f"http://127.0.0.1:{port}"
        try:
            asyncio.run(wait_ready(url, proc))
            for clients in args.clients:
                rate, latencies = asyncio.run(drive(url, clients, args.seconds, question, steps, coalesce))
                results[mode, clients] = rate, latencies
                print(f"{mode:>9}{clients:>8}{rate:>9.1f}{rate * args.steps:>9.0f}"
                      f"{percentile(latencies, 50) * 1000:>9.1f}{percentile(latencies, 99) * 1000:>9.1f}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    for clients in args.clients:
        print(f"throughput at {clients:>2} clients: batching on / off {results['on', clients][0] / results['off', clients][0]:.2f}x, "
              f"server-only / off {results['server', clients][0] / results['off', clients][0]:.2f}x")
    if 1 in args.clients:
        print(f"p50 latency of a {args.steps}-step trajectory at 1 client (batching on): "
              f"{percentile(results['on', 1][1], 50) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
