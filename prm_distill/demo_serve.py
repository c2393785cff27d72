"""The serving step of the main job: the exported checkpoint behind the HTTP server on 127.0.0.1,
a few held-out trajectories scored over HTTP by the async client, latency printed, server stopped."""

from __future__ import annotations

import asyncio
import statistics
import time

from .records import Trajectory


async def _score_over_http(url: str, records: list[Trajectory]) -> tuple[list[float], list[list[float]]]:
    from .serve import PRMClient

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


def serve_and_score(model_dir: str, records: list[Trajectory]) -> str:
    from .serve.server import BackgroundServer, ServerConfig

    with BackgroundServer(ServerConfig(model=model_dir, port=0)) as server:
        deadline = time.monotonic() + 120
        import httpx

        while httpx.get(server.url + "/health").status_code != 200:  # the model loads after the socket opens
            if time.monotonic() > deadline:
                raise RuntimeError("the demo server did not become ready in 120 s")
            time.sleep(0.2)
        latencies, scores = asyncio.run(_score_over_http(server.url, records))
    lines = [f"served at {server.url} (stopped); {len(records)} trajectories scored over HTTP"]
    for r, s in zip(records, scores):
        lines.append(f"  {r.id:10} labels {[None if x is None else int(x) for x in r.labels]}  scores {[round(x, 2) for x in s]}")
    lines.append(f"  latency per request: p50 {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms "
                 f"({sum(len(r.steps) for r in records) / (sum(latencies) / 1000):.0f} steps/s)")
    return "\n".join(lines)
