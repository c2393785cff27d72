"""`prm-distill serve` under load: throughput and p50/p99 latency at 1, 16 and 64 concurrent clients,
dynamic batching on versus off (ratio), and the p50 of a 10-step trajectory at 1 client.
"on" = the defaults: `PRMClient` coalesces concurrent calls into shared requests and the server
micro-batches; "server" = only the server batches; "off" = one request and one engine call per
trajectory.

Each mode runs the real CLI server in a subprocess (so the load generator does not share its
interpreter) and drives it with `PRMClient` coroutines that each send one 10-step trajectory after
another for `--seconds`. Targets (issue 4): batching on >= 3x the throughput of off at 16 clients,
and p50 < 50 ms at 1 client with the default backbone.

Fairness (issue 27): small requests beside a large one. One client sends a `--big-items` x
`--big-steps` request after another while `--small-clients` clients each send 1-step requests back
to back; the p50/p99 latency of the small requests sent while a large one is in flight, with the
server's per-request cap off (`--max-request-tokens 0`) and on (`--cap`, default the server's
default), side by side, with the ratios and the large request's own time (what the cap costs it).
The load average is printed before and after: latencies measured on a busy machine are not figures.

    python benchmarks/serve_latency.py                       # default backbone, untrained head (scores are not the point)
    python benchmarks/serve_latency.py --model runs/demo/iter-1/train/model
    python benchmarks/serve_latency.py --only fairness       # only the small-beside-large comparison
    python benchmarks/serve_latency.py --smoke               # a few seconds: tiny model, small sizes
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
from prm_distill.serve.config import ServerConfig


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


async def small_beside_large(url: str, seconds: float, big: list[tuple[str, list[str]]], small: tuple[str, list[str]],
                             small_clients: int) -> tuple[list[float], list[float]]:
    """(latencies of the small requests sent while a large one was in flight, latencies of the large
    ones), with large requests sent one after another for at least `seconds` (at least one)."""
    small_latencies: list[float] = []
    big_latencies: list[float] = []
    in_flight = asyncio.Event()
    done = asyncio.Event()
    config = ClientConfig(max_connections=max(1, small_clients), timeout_s=600, coalesce=False)
    async with PRMClient(url, config=config) as small_client, PRMClient(url, config=ClientConfig(timeout_s=600)) as big_client:
        await small_client.score(*small)  # warm-up, connections open
        await big_client.score_batch(big[:1])

        async def large() -> None:
            end = time.perf_counter() + seconds
            while not big_latencies or time.perf_counter() < end:
                t = time.perf_counter()
                in_flight.set()
                await big_client.score_batch(big)
                in_flight.clear()
                big_latencies.append(time.perf_counter() - t)
            done.set()

        async def small_worker() -> None:
            while not done.is_set():
                await in_flight.wait()
                t = time.perf_counter()
                await small_client.score(*small)
                small_latencies.append(time.perf_counter() - t)

        workers = [asyncio.create_task(small_worker()) for _ in range(small_clients)]
        await large()
        in_flight.set()  # release the workers waiting for the next large request
        await asyncio.gather(*workers)
    return small_latencies, big_latencies


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} CPUs)"


def fairness(model: Path, args: argparse.Namespace) -> None:
    """Small requests' p50/p99 beside a large request, per-request cap off vs on, in one run."""
    question, steps = trajectory(args.big_steps)
    big = [(f"{question} (copy {i})", steps) for i in range(args.big_items)]
    small = trajectory(1)
    caps = {"off": "0", "on": str(args.cap)}
    print(f"\nfairness: {args.big_items} x {args.big_steps}-step requests one after another, {args.small_clients} clients "
          f"sending 1-step requests beside them, >= {args.seconds:g} s per setting; load average {load_average()}")
    print(f"{'cap':>10}{'small n':>9}{'p50 ms':>10}{'p99 ms':>10}{'large s':>9}")
    results: dict[str, tuple[list[float], list[float]]] = {}
    for name, cap in caps.items():
        port = free_port()
        proc = start_server(model, port, ["--max-request-tokens", cap, "--max-items", str(max(256, args.big_items)), *args.server_arg])
        url = f"http://127.0.0.1:{port}"
        try:
            asyncio.run(wait_ready(url, proc))
            results[name] = smalls, bigs = asyncio.run(small_beside_large(url, args.seconds, big, small, args.small_clients))
            label = f"{name} ({cap})" if name == "on" else name
            print(f"{label:>10}{len(smalls):>9}{percentile(smalls, 50) * 1000:>10.1f}{percentile(smalls, 99) * 1000:>10.1f}"
                  f"{statistics.median(bigs):>9.2f}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    (off_small, off_big), (on_small, on_big) = results["off"], results["on"]
    print(f"small requests beside a large one, cap off / on: p99 {percentile(off_small, 99) / percentile(on_small, 99):.2f}x, "
          f"p50 {percentile(off_small, 50) / percentile(on_small, 50):.2f}x; the large request's time, on / off: "
          f"{statistics.median(on_big) / statistics.median(off_big):.2f}x")
    print(f"load average after: {load_average()}")


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
    ap.add_argument("--only", choices=("all", "throughput", "fairness"), default="all", help="which part to run")
    ap.add_argument("--big-items", type=int, default=100, help="fairness: trajectories in the large request")
    ap.add_argument("--big-steps", type=int, default=20, help="fairness: steps per trajectory of the large request")
    ap.add_argument("--small-clients", type=int, default=4, help="fairness: clients sending 1-step requests beside it")
    ap.add_argument("--cap", type=int, default=ServerConfig.__dataclass_fields__["max_request_tokens"].default,
                    help="fairness: the 'on' setting of --max-request-tokens (default: the server's)")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: --tiny, 1 s per point, 1 client, a 20 x 20-step large request")
    args = ap.parse_args()
    if args.smoke:
        args.tiny, args.seconds, args.clients, args.big_items, args.small_clients = True, 1.0, [1], 20, 2

    model = bench_checkpoint(args.model, args.tiny)
    if args.only != "throughput":
        fairness(model, args)
    if args.only == "fairness":
        return
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
