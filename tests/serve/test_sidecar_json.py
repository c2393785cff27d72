"""A checkpoint whose training summary holds NaN (written by an older version, e.g. a dev split with
one class: AUROC undefined) is served: /v1/model answers strict JSON and PRMClient connects."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx

from prm_distill.serve import BackgroundServer, PRMEngine, ServerConfig
from prm_distill.serve.client import ClientConfig, PRMClient, wait_until_ready


def test_a_sidecar_holding_nan_is_served_as_null_and_the_client_connects(tiny_checkpoint, tmp_path):
    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    path = model / "prm_distill.json"
    sidecar = json.loads(path.read_text())
    sidecar["training"]["dev"] = {"auroc": float("nan"), "processbench_f1": float("nan")}
    path.write_text(json.dumps(sidecar))  # bare NaN, as older versions wrote it
    assert "NaN" in path.read_text()
    engine = PRMEngine.from_checkpoint(model, device="cpu")

    async def connect():
        async with await PRMClient.connect(srv.url, config=ClientConfig(timeout_s=30)) as client:
            return client.sidecar, await client.score("What is 2 + 3?", ["2 + 3 = 5."])

    with BackgroundServer(ServerConfig(model=str(model), port=0), lambda: engine) as srv:
        assert asyncio.run(wait_until_ready(srv.url, timeout_s=60))
        answer = httpx.get(f"{srv.url}/v1/model")
        assert answer.status_code == 200
        json.loads(answer.text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # strict JSON
        served, scores = asyncio.run(connect())
    assert served.training["dev"] == {"auroc": None, "processbench_f1": None}
    assert len(scores) == 1 and 0 < scores[0] < 1
