"""`prm-distill serve` over real HTTP: a uvicorn server on 127.0.0.1 (in a thread, or the CLI in a
subprocess) scoring the exported tiny checkpoint; every expected score comes from `PRMEngine.score`
on one trajectory at a time (no batching, no HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from prm_distill.cli import build_parser
from prm_distill.serve import BackgroundServer, PRMEngine, ServerConfig
from prm_distill.serve.client import wait_until_ready
from prm_distill.steps import SplitConfig, split_steps

ITEMS = [
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("Tom has 4 apples and buys 3 more. How many now?", ["4 + 3 = 7.", "He has 7 apples.", "Answer: 7."]),
    ("Compute 6 * 7.", ["6 * 7 = 42."]),
    ("A train goes 60 km in 1.5 hours. Speed?", ["60 / 1.5 = 40.", "Speed is 40 km/h.", "Check: 40 * 1.5 = 60.", "Answer: 40."]),
]
LIMITS = dict(max_items=4, max_steps=8, max_step_chars=200, max_question_chars=300, max_response_chars=2000, max_body_bytes=6000)


def config(checkpoint, **overrides) -> ServerConfig:
    return ServerConfig(model=str(checkpoint), port=0, **{**LIMITS, "max_wait_ms": 20, **overrides})


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> PRMEngine:
    return PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def expected(engine) -> dict[tuple, list[float]]:
    """Unbatched reference scores of ITEMS, keyed by (question, steps)."""
    return {(q, tuple(s)): engine.score([(q, s)])[0] for q, s in ITEMS}


@pytest.fixture(scope="module")
def server(tiny_checkpoint, engine):
    with BackgroundServer(config(tiny_checkpoint), lambda: engine) as srv:
        wait_ready(srv.url)
        yield srv


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    if not asyncio.run(wait_until_ready(url, timeout_s, interval_s=0.05)):
        raise TimeoutError(f"{url} did not become ready")


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of the server's /metrics text (0 when absent), read with Prometheus' own parser."""
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def metric_total(url: str, name: str) -> float:
    """The sum of a metric over all its label values."""
    text = httpx.get(f"{url}/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


def post(url: str, body, headers: dict[str, str] | None = None, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/v1/score", content=content, headers={"content-type": "application/json", **(headers or {})}, **kwargs)


def test_scores_come_back_in_item_order_and_equal_unbatched_scoring(server, engine, expected, tiny_checkpoint):
    response_text = "Step 1: 2 + 2 = 4.\nStep 2: 4 * 3 = 12.\nStep 3: The answer is 12."
    split = {"min_chars": 5, "max_chars": 100}
    body = {"items": [
        {"question": ITEMS[1][0], "steps": ITEMS[1][1]},
        {"question": "What is (2 + 2) * 3?", "response": response_text, "split": split},
        {"question": ITEMS[0][0], "steps": ITEMS[0][1]},
    ]}
    r = post(server.url, body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == tiny_checkpoint.name and answer["timing_ms"] > 0
    first, split_item, last = answer["results"]
    assert first["steps"] == ITEMS[1][1] and last["steps"] == ITEMS[0][1]
    assert first["step_scores"] == pytest.approx(expected[(ITEMS[1][0], tuple(ITEMS[1][1]))], abs=1e-5)
    assert last["step_scores"] == pytest.approx(expected[(ITEMS[0][0], tuple(ITEMS[0][1]))], abs=1e-5)
    steps = split_steps(response_text, SplitConfig(**split))
    assert split_item["steps"] == steps == ["Step 1: 2 + 2 = 4.", "Step 2: 4 * 3 = 12.", "Step 3: The answer is 12."]
    assert split_item["step_scores"] == pytest.approx(engine.score([("What is (2 + 2) * 3?", steps)])[0], abs=1e-5)
    assert all(0.0 < p < 1.0 for p in split_item["step_scores"])


def test_concurrent_requests_share_engine_calls_without_changing_scores(server, expected):
    calls_before = metric(server.url, "prm_batch_items_count")
    items_before = metric(server.url, "prm_batch_items_sum")
    n = 16

    async def main():
        async with httpx.AsyncClient(base_url=server.url) as client:
            return await asyncio.gather(*(
                client.post("/v1/score", json={"items": [{"question": q, "steps": s}]}) for q, s in (ITEMS * 4)[:n]
            ))

    responses = asyncio.run(main())
    for (q, s), r in zip((ITEMS * 4)[:n], responses, strict=True):
        assert r.status_code == 200
        assert r.json()["results"][0]["step_scores"] == pytest.approx(expected[(q, tuple(s))], abs=1e-5)
    calls = metric(server.url, "prm_batch_items_count") - calls_before
    assert metric(server.url, "prm_batch_items_sum") - items_before == n
    assert calls < n  # dynamic batching gathered concurrent requests into fewer engine calls


def test_no_batching_scores_one_trajectory_per_engine_call(tiny_checkpoint, engine, expected):
    with BackgroundServer(config(tiny_checkpoint, batching=False), lambda: engine) as srv:
        wait_ready(srv.url)

        async def main():
            async with httpx.AsyncClient(base_url=srv.url) as client:
                return await asyncio.gather(*(client.post("/v1/score", json={"items": [{"question": q, "steps": s}]}) for q, s in ITEMS))

        responses = asyncio.run(main())
        assert [r.json()["results"][0]["step_scores"] for r in responses] == [
            pytest.approx(expected[(q, tuple(s))], abs=1e-5) for q, s in ITEMS
        ]
        assert metric(srv.url, "prm_batch_items_count") == len(ITEMS) == metric(srv.url, "prm_batch_items_sum")


GOOD = {"question": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "The answer is 5."]}
BAD_REQUESTS = [
    (b'{"items": [', 422, "body: not valid JSON"),
    (b"\xff\xfe", 422, "body: not valid JSON"),
    ([GOOD], 422, "body: expected a JSON object"),
    ({"items": GOOD}, 422, "items: expected a non-empty list"),
    ({"items": []}, 422, "items: expected a non-empty list"),
    ({"items": [GOOD], "extra": 1}, 422, "extra: unknown field"),
    ({"items": [GOOD] * 5}, 422, "items: 5 items, more than max_items=4"),
    ({"items": ["What is 2 + 3?"]}, 422, "items[0]: expected an object"),
    ({"items": [GOOD, {"question": 7, "steps": ["a"]}]}, 422, "items[1].question: expected a string, got int"),
    ({"items": [{"question": " ", "steps": ["a"]}]}, 422, "items[0].question: must not be empty"),
    ({"items": [{"question": "q" * 301, "steps": ["a"]}]}, 422, "items[0].question: 301 characters, more than max_question_chars=300"),
    ({"items": [{"question": "q"}]}, 422, "items[0]: give exactly one of steps"),
    ({"items": [{"question": "q", "steps": ["a"], "response": "a"}]}, 422, "items[0]: give exactly one of steps"),
    ({"items": [{"question": "q", "step": ["a"]}]}, 422, "items[0].step: unknown field"),
    ({"items": [{"question": "q", "steps": "2 + 3 = 5."}]}, 422, "items[0].steps: expected a list of strings, got str"),
    ({"items": [{"question": "q", "steps": []}]}, 422, "items[0].steps: needs at least one step"),
    ({"items": [{"question": "q", "steps": ["a", "  "]}]}, 422, "items[0].steps[1]: must not be empty"),
    ({"items": [{"question": "q", "steps": [3]}]}, 422, "items[0].steps[0]: expected a string, got int"),
    ({"items": [{"question": "q", "steps": ["a"] * 9}]}, 422, "items[0].steps: 9 steps, more than max_steps=8"),
    ({"items": [{"question": "q", "steps": ["x" * 201]}]}, 422, "items[0].steps[0]: 201 characters, more than max_step_chars=200"),
    ({"items": [{"question": "q", "steps": ["a"], "split": {}}]}, 422, "items[0].split: only applies to a response"),
    ({"items": [{"question": "q", "response": ""}]}, 422, "items[0].response: must not be empty"),
    ({"items": [{"question": "q", "response": "Step 1: a.\n" * 9, "split": {"min_chars": 1}}]}, 422,
     "items[0].response: 9 steps after splitting, more than max_steps=8"),
    ({"items": [{"question": "q", "response": "a b", "split": {"min_chars": 9, "max_chars": 9}}]}, 422, "items[0].split: SplitConfig"),
    ({"items": [{"question": "q", "response": "a b", "split": {"min_chars": "5"}}]}, 422, "items[0].split.min_chars: expected an integer"),
    ({"items": [{"question": "q", "response": "a b", "split": {"min": 5}}]}, 422, "items[0].split.min: unknown option"),
    ({"items": [{"question": "q", "steps": ["x" * 199] * 8}] * 4}, 413, "max_body_bytes=6000"),
]


@pytest.mark.parametrize("body,status,message", BAD_REQUESTS, ids=[m for _, _, m in BAD_REQUESTS])
def test_bad_requests_get_a_4xx_json_error_naming_the_field(server, body, status, message):
    errors_before = metric_total(server.url, "prm_errors_total")
    r = post(server.url, body)
    assert r.status_code == status
    assert message in r.json()["error"]
    assert metric(server.url, "prm_errors_total", kind=r.json()["kind"]) >= 1
    assert metric_total(server.url, "prm_errors_total") == errors_before + 1


def test_the_server_keeps_serving_when_bad_requests_are_interleaved_with_good_ones(server, expected):
    bad = [b for b, _, _ in BAD_REQUESTS]
    plan = [(True, ITEMS[i % len(ITEMS)]) if i % 2 == 0 else (False, bad[i % len(bad)]) for i in range(40)]

    async def send(client, good, payload):
        if good:
            return await client.post("/v1/score", json={"items": [{"question": payload[0], "steps": payload[1]}]})
        content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return await client.post("/v1/score", content=content, headers={"content-type": "application/json"})

    async def main():
        async with httpx.AsyncClient(base_url=server.url) as client:
            return await asyncio.gather(*(send(client, good, payload) for good, payload in plan))

    for (good, payload), r in zip(plan, asyncio.run(main()), strict=True):
        if good:
            assert r.status_code == 200
            assert r.json()["results"][0]["step_scores"] == pytest.approx(expected[(payload[0], tuple(payload[1]))], abs=1e-5)
        else:
            assert r.status_code in (413, 422) and r.json()["error"]
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert metric(server.url, "prm_queue_depth") == 0


def test_health_is_503_until_the_model_has_loaded_and_scoring_waits_with_retry_after(tiny_checkpoint, engine):
    loaded = threading.Event()

    def slow_load():
        loaded.wait(30)
        return engine

    with BackgroundServer(config(tiny_checkpoint), slow_load) as srv:
        health = httpx.get(f"{srv.url}/health")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        early = post(srv.url, {"items": [GOOD]})
        assert early.status_code == 503 and early.headers["retry-after"] == "1" and "loading" in early.json()["error"]
        assert metric(srv.url, "prm_model_ready") == 0
        loaded.set()
        wait_ready(srv.url, timeout_s=10)
        assert metric(srv.url, "prm_model_ready") == 1
        assert post(srv.url, {"items": [GOOD]}).status_code == 200


def test_a_failed_model_load_keeps_health_503_with_the_reason(tiny_checkpoint):
    def broken():
        raise FileNotFoundError("no weights here")

    with BackgroundServer(config(tiny_checkpoint), broken) as srv:
        deadline = time.monotonic() + 10
        while (health := httpx.get(f"{srv.url}/health")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "no weights here" in health.json()["error"]


class GatedEngine:
    """The real engine, held at the gate so requests pile up in the queue."""

    def __init__(self, engine: PRMEngine):
        self.engine, self.model_id, self.sidecar = engine, engine.model_id, engine.sidecar
        self.entered, self.gate = threading.Event(), threading.Event()

    def score(self, items):
        self.entered.set()
        self.gate.wait(30)
        return self.engine.score(items)


def test_a_full_queue_answers_503_with_retry_after_and_queued_requests_still_finish(tiny_checkpoint, engine, expected):
    gated = GatedEngine(engine)
    with BackgroundServer(config(tiny_checkpoint, max_queue=2, max_wait_ms=0), lambda: gated) as srv:
        wait_ready(srv.url)
        results: dict[int, httpx.Response] = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, post(srv.url, {"items": [GOOD]}))) for i in range(3)]
        threads[0].start()
        assert gated.entered.wait(10)  # the first request is being scored, the queue is empty
        for t in threads[1:]:
            t.start()
        deadline = time.monotonic() + 10
        while metric(srv.url, "prm_queue_depth") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = post(srv.url, {"items": [GOOD]})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["kind"] == "queue_full" and "queue is full" in refused.json()["error"]
        gated.gate.set()
        for t in threads:
            t.join(30)
        want = expected[(GOOD["question"], tuple(GOOD["steps"]))]
        assert [results[i].status_code for i in range(3)] == [200, 200, 200]
        assert all(results[i].json()["results"][0]["step_scores"] == pytest.approx(want, abs=1e-5) for i in range(3))
        assert post(srv.url, {"items": [GOOD]}).status_code == 200


def test_an_api_key_is_required_when_configured(tiny_checkpoint, engine, monkeypatch):
    monkeypatch.setenv("PRM_TEST_KEY", "s3cret-key")
    with BackgroundServer(config(tiny_checkpoint, api_key_env="PRM_TEST_KEY"), lambda: engine) as srv:
        wait_ready(srv.url)  # /health stays open for load balancers
        for headers in ({}, {"authorization": "Bearer wrong-key"}, {"authorization": "s3cret-key"}):
            r = post(srv.url, {"items": [GOOD]}, headers=headers)
            assert r.status_code == 401 and "authorization" in r.json()["error"]
        assert post(srv.url, {"items": [GOOD]}, headers={"authorization": "Bearer s3cret-key"}).status_code == 200
    monkeypatch.setenv("PRM_TEST_KEY", "")
    with pytest.raises(ValueError, match="PRM_TEST_KEY"):
        BackgroundServer(config(tiny_checkpoint, api_key_env="PRM_TEST_KEY"), lambda: engine)


def test_metrics_count_requests_errors_and_latency(server):
    watched = [
        ("prm_requests_total", {"endpoint": "/v1/score", "code": "200"}),
        ("prm_requests_total", {"endpoint": "/v1/score", "code": "422"}),
        ("prm_errors_total", {"kind": "malformed_json"}),
        ("prm_score_latency_seconds_count", {}),
        ("prm_steps_scored_total", {}),
    ]
    before = [metric(server.url, name, **labels) for name, labels in watched]
    for _ in range(3):
        post(server.url, {"items": [GOOD, GOOD]})  # 2 trajectories of 2 steps each
    post(server.url, b"not json")
    after = [metric(server.url, name, **labels) for name, labels in watched]
    assert [a - b for a, b in zip(after, before)] == [3, 1, 1, 4, 12]
    r = httpx.get(f"{server.url}/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    assert "prm_queue_depth" in r.text and "prm_batch_steps_bucket" in r.text


@pytest.mark.slow  # a second process loads the model
def test_cli_serve_binds_localhost_by_default_and_finishes_in_flight_requests_on_sigterm(tiny_checkpoint, engine, expected):
    assert build_parser().parse_args(["serve", "--model", "m"]).host == "127.0.0.1"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "prm_distill.cli", "serve", "--model", str(tiny_checkpoint), "--port", str(port),
         "--device", "cpu", "--dtype", "float32", "--max-wait-ms", "1500"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout_s=120)
        result: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: result.append(post(url, {"items": [GOOD]}, timeout=30)))
        sender.start()
        deadline = time.monotonic() + 10
        while metric(url, "prm_queue_depth") < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)  # the request is still waiting for batch mates (1.5 s)
        sender.join(30)
        # uvicorn re-raises the signal once it has shut down gracefully: the status says SIGTERM.
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.stdout.read()
    assert result and result[0].status_code == 200, output
    assert result[0].json()["results"][0]["step_scores"] == pytest.approx(expected[(GOOD["question"], tuple(GOOD["steps"]))], abs=1e-5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def test_a_small_request_is_answered_before_a_large_one_in_flight_with_the_same_scores(tiny_checkpoint, engine):
    """Fairness over HTTP: one request of 24 trajectories x 20 steps, then a 1-step request while the
    first is being scored. With the per-request cap the small one is answered first (completion
    order, not timing), and every score equals scoring that trajectory alone."""
    big = [{"question": f"Problem {i}: what is {i} + {i}?", "steps": [f"Step {j}: {i} + {j} = {i + j}." for j in range(20)]} for i in range(24)]
    small = {"question": "What is 2 + 3?", "steps": ["2 + 3 = 5."]}
    alone = [engine.score([(x["question"], x["steps"])])[0] for x in [*big, small]]
    started = threading.Event()

    class Watched:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def score(self, items):
            started.set()
            return self.inner.score(items)

    from prm_distill.serve.batcher import estimate_tokens

    cap = 3 * estimate_tokens(big[0]["question"], big[0]["steps"])  # three of the large request's trajectories per engine call
    cfg = config(tiny_checkpoint, max_items=32, max_steps=32, max_body_bytes=1 << 20, max_request_tokens=cap, max_wait_ms=0)

    async def main(url: str):
        finished: list[str] = []
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            async def send(name: str, items: list[dict]) -> list[list[float]]:
                r = await client.post("/v1/score", json={"items": items})
                finished.append(name)
                assert r.status_code == 200, r.text
                return [x["step_scores"] for x in r.json()["results"]]

            large = asyncio.ensure_future(send("big", big))
            await asyncio.to_thread(started.wait, 60)  # the large request's first engine call is running
            got = await asyncio.gather(large, send("small", [small]))
        return finished, got

    with BackgroundServer(cfg, lambda: Watched(engine)) as srv:
        wait_ready(srv.url)
        started.clear()  # readiness probes score nothing, but be sure the event is the large request's
        finished, (big_scores, small_scores) = asyncio.run(main(srv.url))
    assert finished == ["small", "big"]
    for got, want in zip([*big_scores, *small_scores], alone, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
