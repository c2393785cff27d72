"""A vLLM-backed scorer follows the calibration adopted into the checkpoint's sidecar (vLLM itself
serves raw scores): no vLLM is needed to check that, the client only reads the tokenizer and sidecar."""

from __future__ import annotations

import asyncio
import math
import shutil

import pytest

from prm_distill.checkpoint import read_sidecar, write_calibration
from prm_distill.protocol import AsyncStepScorer
from prm_distill.scorer import DistilledPRMScorer
from prm_distill.serve.vllm_backend import VLLMPoolingClient


def sigmoid_of_logit_over(p: float, t: float) -> float:
    return 1 / (1 + math.exp(-math.log(p / (1 - p)) / t))


def test_the_pooling_client_and_the_rl_scorer_follow_an_adopted_calibration(tiny_checkpoint, tmp_path):
    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    client = VLLMPoolingClient("http://127.0.0.1:9", model)  # never contacted: no scoring here
    assert isinstance(client, AsyncStepScorer)
    scorer = DistilledPRMScorer(engine=client, policy_tokenizer=str(model))
    raw_threshold = read_sidecar(model).threshold
    assert client.calibration() is None and scorer.threshold == pytest.approx(raw_threshold)

    write_calibration(model, {"method": "temperature", "params": {"temperature": 2.0}})
    assert client.calibration()["version"] == 1  # re-read from the sidecar, no restart
    assert scorer.threshold == pytest.approx(sigmoid_of_logit_over(raw_threshold, 2.0))
    asyncio.run(client.aclose())
