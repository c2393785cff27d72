"""Code written against AReaL's PRM stack runs against ours: the patch point, AReaL's config objects, its wording."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
import torch

from prm_distill.scorer import BaseScorer, PRMConfig, PRMRunner, PRMScorerConfig, fold_turn_rewards, runner as prm_runner, shape_advantages


class Recorder(BaseScorer):
    """An importable scorer that gives a fixed reward and records its closing."""

    name = "recorder"
    closed: list[str] = []

    def __init__(self, label: str = "x", value: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.label, self.value = label, value

    async def evaluate(self, interaction, ctx):
        return self.value

    async def aclose(self):
        Recorder.closed.append(self.label)


@dataclass
class ArealScorerConfig:
    """A STAND-IN for AReaL's own typed `PRMScorerConfig` (areal.api.cli_args): same fields, another class."""

    path: str = ""
    weight: float = 1.0
    enabled: bool = True
    kwargs: dict = field(default_factory=dict)


@dataclass
class ArealShaping:
    mode: str = "additive"


@dataclass
class ArealPRMConfig:
    """A STAND-IN for AReaL's own `PRMConfig`: no commit_scope, no actor mirrors."""

    enabled: bool = True
    advantage_shaping: ArealShaping = field(default_factory=ArealShaping)
    scorers: list = field(default_factory=list)
    error_policy: str = "reject"


SPEC = f"{__name__}.Recorder"


def test_the_runner_resolves_paths_through_the_patchable_import_from_string(monkeypatch, make_turn):
    original = ValueError("resolution failed")
    real = prm_runner.import_from_string

    def failing(path):
        if path == "missing.Scorer":
            raise original
        return real(path)

    monkeypatch.setattr(prm_runner, "import_from_string", failing)
    Recorder.closed.clear()
    config = PRMConfig(scorers=[PRMScorerConfig(path=SPEC, kwargs={"label": "first"}), PRMScorerConfig(path="missing.Scorer")])
    with pytest.raises(ValueError) as caught:
        asyncio.run(PRMRunner.create(config))
    assert caught.value is original  # the patched function's own error, unwrapped
    assert Recorder.closed == ["first"]  # the scorer built before the failure was rolled back
    assert prm_runner.import_object is real  # the earlier name still resolves


def test_arealss_own_config_objects_build_and_run(make_turn):
    config = ArealPRMConfig(scorers=[ArealScorerConfig(path=SPEC, weight=0.5, kwargs={"value": -1.0})])
    runner = PRMRunner(config)  # typed entries of another class are accepted
    turn = make_turn("t", n_tokens=2)
    asyncio.run(runner.run([turn]))
    assert turn.token_rewards.tolist() == [-0.5, -0.5]  # 0.5 * -1.0 on each token; commit rule "scorer"
    assert runner.config is config


def test_a_typed_entry_is_checked_like_a_mapping():
    with pytest.raises(ValueError, match=r"scorers\[0\]\.weight"):
        PRMConfig(scorers=[ArealScorerConfig(path=SPEC, weight=float("nan"))])


def test_errors_keep_arealss_wording():
    with pytest.raises(RuntimeError, match=r"token_rewards_as_adv=False requires uniform token rewards within each turn"):
        fold_turn_rewards(torch.tensor([[0.0, 0.3, 0.2]]), torch.tensor([[1, 1, 0]]))
    with pytest.raises(RuntimeError, match=r"Process-weighted advantage shaping requires process rewards in \[0, 1\]"):
        shape_advantages(torch.ones(1, 2), torch.tensor([[0.0, 1.5]]), torch.tensor([[1, 0]]), mode="process_weighted")
    with pytest.raises(ValueError, match="GVPO negative_scale must be finite and non-negative"):
        shape_advantages(torch.ones(1, 2), torch.zeros(1, 2), torch.ones(1, 2), mode="gvpo", negative_scale=-1.0)
