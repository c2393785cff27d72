"""With AReaL's `areal.reward.prm` importable, our scorers subclass AReaL's own classes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import prm_distill.scorer as scorer_package

REPO_ROOT = Path(scorer_package.__file__).resolve().parents[2]

# A stand-in for AReaL's module: the contract's classes, and no aclose hook (older AReaL bases).
FAKE_PRM = textwrap.dedent(
    """
    from dataclasses import dataclass

    class BaseScorer:
        name = ""

        def __init__(self, weight=1.0, enabled=True):
            if not self.name:
                raise ValueError("name")
            self.weight, self.enabled = float(weight), bool(enabled)

        async def evaluate(self, interaction, ctx):
            raise NotImplementedError

        def prepare_result(self, interaction, result, ctx):
            return PRMScorerResult(reward=result)

        async def evaluate_result(self, interaction, ctx):
            result = await self.evaluate(interaction, ctx)
            return None if result is None else self.prepare_result(interaction, result, ctx)

    class BaseTrajectoryScorer(BaseScorer):
        pass

    @dataclass(frozen=True)
    class PRMMetricObservation:
        metric_id: str
        scope: str
        target_id: str
        value: object
        value_type: str
        aggregations: tuple

    @dataclass(frozen=True)
    class PRMScorerResult:
        reward: object
        observations: tuple = ()

    @dataclass(frozen=True)
    class PRMTurnResult:
        scorer_name: str
        reward: float
        observations: tuple = ()
    """
)

CHECK = textwrap.dedent(
    """
    import asyncio
    import areal.reward.prm as areal_prm
    import prm_distill.scorer as ours

    assert ours.USING_AREAL
    assert ours.BaseScorer is areal_prm.BaseScorer
    assert issubclass(ours.LengthBudgetScorer, areal_prm.BaseScorer)

    async def main():
        config = ours.PRMConfig(scorers=[{"path": "prm_distill.scorer.LengthBudgetScorer", "kwargs": {"max_output_tokens": 2}}])
        runner = await ours.PRMRunner.create(config)
        turn = ours.Interaction(interaction_id="t", model_response=ours.ModelResponse(output_tokens=[1, 2]))
        (result,) = await runner.run([turn])
        assert isinstance(result, areal_prm.PRMTurnResult)
        assert isinstance(result.observations[0], areal_prm.PRMMetricObservation)
        assert turn.token_rewards.tolist() == [1.0, 1.0]
        await runner.aclose()  # AReaL's base has no aclose: nothing to call

    asyncio.run(main())
    print("ok")
    """
)


def _run_with(fake_root: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_root), str(REPO_ROOT)])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_areal_classes_are_used_when_importable(tmp_path):
    package = tmp_path / "areal" / "reward"
    package.mkdir(parents=True)
    (tmp_path / "areal" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "prm.py").write_text(FAKE_PRM)
    done = _run_with(tmp_path, CHECK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_an_areal_without_prm_falls_back_to_ours(tmp_path):
    # e.g. areal 1.0.4 from PyPI: the package exists, `areal.reward.prm` does not.
    (tmp_path / "areal" / "reward").mkdir(parents=True)
    (tmp_path / "areal" / "__init__.py").write_text("")
    (tmp_path / "areal" / "reward" / "__init__.py").write_text("")
    done = _run_with(
        tmp_path,
        "import prm_distill.scorer as s\n"
        "assert not s.USING_AREAL and s.BaseScorer.__module__ == 'prm_distill.scorer.base'\n"
        "print('ok')",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
