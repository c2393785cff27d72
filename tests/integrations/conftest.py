"""Fixtures for the trainer adapters: the exported tiny checkpoint, its engine, and a served copy."""

from __future__ import annotations

import asyncio

import pytest

from prm_distill import calibration
from prm_distill.serve import BackgroundServer, PRMEngine, ServerConfig
from prm_distill.serve.client import wait_until_ready
from prm_distill.steps import split_steps


@pytest.fixture(scope="session")
def prm_engine(tiny_checkpoint) -> PRMEngine:
    return PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="session")
def step_scores(prm_engine):
    """Calibrated per-step scores of (question, response) as every consumer should see them."""

    def score(question: str, response: str) -> list[float]:
        raw = prm_engine.score([(question, split_steps(response))])[0]
        return calibration.apply(raw, prm_engine.calibration()).tolist()

    return score


@pytest.fixture(scope="module")
def prm_server(tiny_checkpoint, prm_engine):
    """`prm-distill serve` on 127.0.0.1 (uvicorn in a thread) over the same engine, aggregating with min."""
    with BackgroundServer(ServerConfig(model=str(tiny_checkpoint), port=0, max_wait_ms=5), lambda: prm_engine) as server:
        if not asyncio.run(wait_until_ready(server.url, 60.0, interval_s=0.05)):
            raise TimeoutError(f"{server.url} did not become ready")
        yield server
