"""The pipeline's serve check: the loaded engine behind the HTTP server on 127.0.0.1, a few held-out
trajectories scored over HTTP by the async client, latency printed, server stopped."""

from __future__ import annotations

import asyncio
import statistics
import time

from ..protocol import StepScorer
from ..records import Trajectory


async def _score_over_http(url: str, records: list[Trajectory]) -> tuple[list[float], list[list[float]]]:
    from ..serve.client import PRMClient, wait_until_ready

    if not await wait_until_ready(url, timeout_s=120):  # the model "loads" after the socket opens
        raise RuntimeError(f"the serve check's server at {url} did not become ready in 120 s")
    client = await PRMClient.connect(url)
    try:
        latencies, scores = [], []
        for r in records:  # one client, one request at a time: the latency a single session sees
            t = time.perf_counter()
            scores.append(await client.score(r.question, r.steps))
            latencies.append((time.perf_counter() - t) * 1000)
        return latencies, scores
    finally:
        await client.aclose()


def serve_and_score(model_dir: str, engine: StepScorer, records: list[Trajectory]) -> str:
    """Serve `engine` (already loaded from `model_dir`) and score `records` over HTTP."""
    from ..serve.config import ServerConfig
    from ..serve.runner import BackgroundServer

    with BackgroundServer(ServerConfig(model=str(model_dir), port=0), lambda: engine) as server:
        latencies, scores = asyncio.run(_score_over_http(server.url, records))
    lines = [f"served at {server.url} (stopped); {len(records)} trajectories scored over HTTP"]
    for r, s in zip(records, scores):
        lines.append(f"  {r.id:10} labels {[None if x is None else int(x) for x in r.labels or []]}  scores {[round(x, 2) for x in s]}")
    lines.append(f"  latency per request: p50 {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms "
                 f"({sum(len(r.steps) for r in records) / (sum(latencies) / 1000):.0f} steps/s)")
    return "\n".join(lines)
