"""PRMClient against a real `prm-distill serve` app on 127.0.0.1 (uvicorn in a thread): scores equal
`PRMEngine.score` on one trajectory at a time, connections are reused, 503s and refused connections
are retried a bounded number of times, and DistilledPRMScorer scores through it as through the
in-process engine."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import torch

from prm_distill.checkpoint import read_sidecar
from prm_distill.scorer import DistilledPRMScorer, Interaction, ModelResponse
from prm_distill.serve import BackgroundServer, PRMEngine, ServerConfig
from prm_distill.serve.client import ClientConfig, PRMClient, PRMServerError
from prm_distill.steps import SplitConfig, split_steps

QUESTION = "Tom has 4 apples and buys 3 more. How many now?"
STEPS = ["4 + 3 = 7.", "He has 7 apples.", "Answer: 7."]
FAST_RETRIES = ClientConfig(max_retries=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=30)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> PRMEngine:
    return PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")


def config(checkpoint, **overrides) -> ServerConfig:
    return ServerConfig(model=str(checkpoint), **{"port": 0, "max_wait_ms": 5, **overrides})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recorded(srv: BackgroundServer) -> list[tuple[tuple[str, int], str, int]]:
    """(client address, path, status) of every request the (not yet started) server answers."""
    log: list[tuple[tuple[str, int], str, int]] = []

    @srv.app.middleware("http")
    async def record(request, call_next):
        response = await call_next(request)
        log.append((tuple(request.client), request.url.path, response.status_code))
        return response

    return log


def test_client_scores_equal_the_engine_over_one_reused_connection(tiny_checkpoint, engine):
    srv = BackgroundServer(config(tiny_checkpoint), lambda: engine)
    log = recorded(srv)

    response = "Step 1: 2 + 2 = 4.\nStep 2: 4 * 3 = 12.\nStep 3: The answer is 12."
    items = [(QUESTION, STEPS), ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."])]

    async def main():
        async with await PRMClient.connect(srv.url, config=ClientConfig(timeout_s=30)) as client:
            one = await client.score(QUESTION, STEPS)
            batch = await client.score_batch(items)
            split = await client.score_response("What is (2 + 2) * 3?", response, SplitConfig(min_chars=5))
            return client, one, batch, split

    with srv:
        client, one, batch, (steps, split_scores) = asyncio.run(main())
    assert client.model_id == tiny_checkpoint.name and client.sidecar == read_sidecar(tiny_checkpoint)
    assert one == pytest.approx(engine.score([(QUESTION, STEPS)])[0], abs=1e-5)
    assert batch == [pytest.approx(engine.score([item])[0], abs=1e-5) for item in items]
    assert steps == split_steps(response, SplitConfig(min_chars=5)) and len(steps) == 3
    assert split_scores == pytest.approx(engine.score([("What is (2 + 2) * 3?", steps)])[0], abs=1e-5)
    assert [path for _, path, _ in log] == ["/v1/model"] + ["/v1/score"] * 3
    assert len({peer for peer, _, _ in log}) == 1  # one TCP connection for all four requests


def test_client_retries_503_while_the_model_loads(tiny_checkpoint, engine):
    loaded = threading.Event()

    def slow_load():
        loaded.wait(30)
        return engine

    patient = ClientConfig(max_retries=20, backoff_s=0.02, max_backoff_s=0.1, timeout_s=30)
    srv = BackgroundServer(config(tiny_checkpoint), slow_load)
    log = recorded(srv)

    async def main():
        async with PRMClient(srv.url, config=patient) as client:
            return await client.score(QUESTION, STEPS)

    with srv:
        def release():  # load once two requests were refused (not after a fixed delay: the server may start late on a busy CPU)
            deadline = time.monotonic() + 30
            while sum(status == 503 for *_, status in log) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            loaded.set()

        threading.Thread(target=release, daemon=True).start()
        scores = asyncio.run(main())
    assert scores == pytest.approx(engine.score([(QUESTION, STEPS)])[0], abs=1e-5)
    statuses = [status for _, _, status in log]
    assert statuses[-1] == 200 and len(statuses) >= 3 and set(statuses[:-1]) == {503}  # refused while loading, retried


def test_client_gives_up_after_the_bounded_retries(tiny_checkpoint, engine):
    never = threading.Event()
    srv = BackgroundServer(config(tiny_checkpoint), lambda: never.wait(30) and engine)
    log = recorded(srv)

    async def main():
        async with PRMClient(srv.url, config=FAST_RETRIES) as client:
            await client.score(QUESTION, STEPS)

    with srv:
        try:
            with pytest.raises(PRMServerError, match="loading") as error:
                asyncio.run(main())
        finally:
            never.set()  # lets the loader thread end, so the server can stop
    assert error.value.status == 503
    assert [status for _, _, status in log] == [503] * (1 + FAST_RETRIES.max_retries)


def test_client_retries_refused_connections_until_the_server_is_up(tiny_checkpoint, engine):
    port = free_port()

    async def main():
        async with PRMClient(f"http://127.0.0.1:{port}", config=ClientConfig(max_retries=30, backoff_s=0.05, max_backoff_s=0.1)) as client:
            return await client.score(QUESTION, STEPS)

    srv = BackgroundServer(config(tiny_checkpoint, port=port), lambda: engine)  # the port refuses until start()
    starter = threading.Timer(0.3, srv.start)
    starter.start()
    start = time.monotonic()
    try:
        scores = asyncio.run(main())
    finally:
        starter.join()
        srv.stop()
    assert time.monotonic() - start >= 0.3  # it kept retrying until the server came up
    assert scores == pytest.approx(engine.score([(QUESTION, STEPS)])[0], abs=1e-5)

    async def nobody_there():
        async with PRMClient(f"http://127.0.0.1:{free_port()}", config=FAST_RETRIES) as client:
            await client.score(QUESTION, STEPS)

    with pytest.raises(PRMServerError, match="after 3 attempts") as error:
        asyncio.run(nobody_there())
    assert error.value.status is None  # and it gave up after 3 attempts (max_retries=2), not later


def test_client_raises_the_servers_message_on_4xx_without_retrying(tiny_checkpoint, engine, monkeypatch):
    monkeypatch.setenv("PRM_TEST_KEY", "k3y")
    srv = BackgroundServer(config(tiny_checkpoint, api_key_env="PRM_TEST_KEY"), lambda: engine)
    log = recorded(srv)

    async def main(api_key, steps):
        async with PRMClient(srv.url, api_key=api_key, config=FAST_RETRIES) as client:
            return await client.score(QUESTION, steps)

    with srv:
        with pytest.raises(PRMServerError, match="authorization") as denied:
            asyncio.run(main("wrong", STEPS))
        with pytest.raises(PRMServerError, match=r"items\[0\]\.steps\[1\]: must not be empty") as invalid:
            asyncio.run(main("k3y", ["4 + 3 = 7.", " "]))
        scores = asyncio.run(main("k3y", STEPS))
    assert (denied.value.status, invalid.value.status) == (401, 422)
    assert [status for _, _, status in log] == [401, 422, 200]  # errors are not retried
    assert scores == pytest.approx(engine.score([(QUESTION, STEPS)])[0], abs=1e-5)


def test_the_distilled_scorer_gives_the_same_rewards_through_the_http_client(tiny_checkpoint, engine, smol_tokenizer):
    tok = smol_tokenizer
    output = tok.encode("Step 1: 4 + 3 = 7.\n\nStep 2: He has 7 apples.\n\nStep 3: Answer: 7.", add_special_tokens=False)
    turn = Interaction(
        interaction_id="t0", parent=None, messages=[{"role": "user", "content": QUESTION}],
        output_message_list=[{"role": "assistant", "content": tok.decode(output)}],
        model_response=ModelResponse(input_tokens=tok.encode(QUESTION, add_special_tokens=False), output_tokens=output),
        reward=1.0,
    )

    async def main():
        local = DistilledPRMScorer(model=str(tiny_checkpoint), device="cpu", policy_tokenizer=tok)  # in-process
        try:
            with BackgroundServer(config(tiny_checkpoint), lambda: engine) as srv:
                async with await PRMClient.connect(srv.url) as client:
                    remote = DistilledPRMScorer(engine=client, policy_tokenizer=tok)
                    return await local.evaluate_result(turn, {}), await remote.evaluate_result(turn, {}), local, remote
        finally:
            await local.aclose()

    local_result, remote_result, local, remote = asyncio.run(main())
    # The sidecar came over HTTP: the same threshold (the checkpoint's, not the 0.5 fallback).
    assert remote.threshold == local.threshold == read_sidecar(tiny_checkpoint).threshold != 0.5
    assert isinstance(remote_result.reward, torch.Tensor) and remote_result.reward.shape == (len(output),)
    torch.testing.assert_close(remote_result.reward, local_result.reward, atol=1e-5, rtol=0)
    assert [o.value for o in remote_result.observations] == pytest.approx([o.value for o in local_result.observations], abs=1e-5)



def test_a_calibration_adopted_while_serving_reaches_the_server_and_the_client(tiny_checkpoint, tmp_path):
    import math
    import shutil

    import httpx

    from prm_distill.checkpoint import write_calibration

    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    srv = BackgroundServer(config(model), lambda: PRMEngine.from_checkpoint(model, device="cpu", dtype="float32"))
    log = recorded(srv)

    async def main():
        async with await PRMClient.connect(srv.url, config=ClientConfig(timeout_s=30)) as client:
            before = await client.score(QUESTION, STEPS), client.calibration()
            write_calibration(model, {"method": "temperature", "params": {"temperature": 2.0}})
            after = await client.score(QUESTION, STEPS), client.calibration()
            return before, after

    with srv:
        (raw, cal_before), (raw_after, cal_after) = asyncio.run(main())
        answer = httpx.post(f"{srv.url}/v1/score", json={"items": [{"question": QUESTION, "steps": STEPS}]}).json()
    assert cal_before is None and raw_after == pytest.approx(raw, abs=1e-7)  # step_scores stay raw
    assert cal_after["method"] == "temperature" and cal_after["version"] == 1  # learnt without a reconnect
    assert answer["calibration_version"] == 1
    halved = [1 / (1 + math.exp(-math.log(p / (1 - p)) / 2)) for p in raw]
    assert answer["results"][0]["calibrated_scores"] == pytest.approx(halved, abs=1e-6)
    # /v1/model is fetched again only after the version changed: connect, score, score -> refetch.
    assert [path for _, path, status in log if status == 200] == ["/v1/model", "/v1/score", "/v1/score", "/v1/model", "/v1/score"]


def test_concurrent_scores_share_requests_and_a_bad_item_fails_alone(tiny_checkpoint, engine):
    srv = BackgroundServer(config(tiny_checkpoint, max_wait_ms=0), lambda: engine)
    log = recorded(srv)
    items = [(f"({i}) {QUESTION}", STEPS) for i in range(24)]

    async def main():
        async with await PRMClient.connect(srv.url, config=ClientConfig(timeout_s=30, max_items_per_request=8)) as client:
            calls = [client.score(q, s) for q, s in items] + [client.score(QUESTION, ["4 + 3 = 7.", "   "])]
            return await asyncio.gather(*calls, return_exceptions=True)

    with srv:
        *good, bad = asyncio.run(main())
    assert good == [pytest.approx(engine.score([item])[0], abs=1e-5) for item in items]
    assert isinstance(bad, PRMServerError) and bad.status == 422 and "steps[1]" in str(bad)
    scored = [status for _, path, status in log if path == "/v1/score"]
    # 25 calls in at most 8 items per request: 4 requests, one refused (422) and retried item by item.
    assert 4 <= len(scored) < 25 and scored.count(422) >= 1
