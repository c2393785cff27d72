"""One protocol for "scores (question, steps)": the engine, the batcher, the HTTP client and the vLLM
clients implement it, and evaluation and recalibration run on any implementation."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from prm_distill.checkpoint import write_calibration
from prm_distill.evaluate import evaluate_files
from prm_distill.protocol import AsyncStepScorer, Calibrated, StepScorer, current_calibration
from prm_distill.records import read_jsonl
from prm_distill.serve import PRMEngine
from prm_distill.serve.batcher import ScoreBatcher
from prm_distill.serve.client import PRMClient


@pytest.fixture(scope="module")
def model(tiny_checkpoint, tmp_path_factory):
    return shutil.copytree(tiny_checkpoint, tmp_path_factory.mktemp("protocol") / "model")


def test_every_backend_implements_the_protocol(model):
    engine = PRMEngine.from_checkpoint(model, device="cpu")
    assert isinstance(engine, StepScorer)
    batcher, client = ScoreBatcher(engine), PRMClient()
    assert isinstance(batcher, AsyncStepScorer) and isinstance(client, AsyncStepScorer)
    assert batcher.sidecar is engine.sidecar and batcher.model_id == engine.model_id
    asyncio.run(client.aclose())


def test_the_batcher_scores_items_and_follows_the_engines_calibration(model):
    engine = PRMEngine.from_checkpoint(model, device="cpu")
    items = [("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]), ("Compute 6 * 7.", ["6 * 7 = 42."])]

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=0)
        try:
            return await batcher.score_batch(items)
        finally:
            await batcher.aclose()

    assert asyncio.run(main()) == [pytest.approx(s, abs=1e-6) for s in engine.score(items)]
    batcher = ScoreBatcher(engine)
    assert batcher.calibration() is None
    write_calibration(model, {"method": "temperature", "params": {"temperature": 2.0}})
    assert batcher.calibration()["version"] == current_calibration(engine)["version"] == 1


def test_evaluation_runs_on_any_step_scorer_and_calibrated_scores_are_final(tiny_checkpoint, synthetic_files):
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")
    halved = Calibrated(engine, {"method": "temperature", "params": {"temperature": 2.0}})
    assert isinstance(halved, StepScorer) and halved.calibration() is None  # nothing maps them twice
    item = ("What is 2 + 3?", ["2 + 3 = 5."])
    [[p]], [[q]] = engine.score([item]), halved.score([item])
    assert (q - 0.5) * (p - 0.5) >= 0 and abs(q - 0.5) <= abs(p - 0.5)  # T = 2 pulls towards 0.5
    raw = evaluate_files(engine, [str(synthetic_files["test"])], threshold=0.5)
    cal = evaluate_files(halved, [str(synthetic_files["test"])], threshold=0.5)
    assert cal["n_items"] == raw["n_items"] == len(read_jsonl(synthetic_files["test"]))
    assert cal["auroc"] == pytest.approx(raw["auroc"])  # a monotone map leaves the ranking alone
