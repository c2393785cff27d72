"""PRM configuration: fields, validation naming the bad key, loading the trainer-style YAML."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch

from prm_distill.config import ConfigError
from prm_distill.scorer import (
    LengthBudgetScorer,
    PRMAdvantageShapingConfig,
    PRMConfig,
    PRMConfigError,
    PRMRunner,
    PRMScorerConfig,
    load_prm_config,
    shape_advantages,
)

TRAINER_YAML = """\
rollout:
  _version: v1
  agent:
    chat_template_type: concat
    export_style: concat
    prm:
      enabled: true
      error_policy: reject
      advantage_shaping: {mode: process_weighted, negative_scale: 0.2, zero_penalty: 0.4, zero_eps: 1.0e-6}
      scorers:
        - path: prm_distill.scorer.LengthBudgetScorer
          weight: 1.0
          kwargs: {max_output_tokens: 4}
actor:
  token_rewards_as_adv: true
"""


def _trainer(prm: dict, actor: dict | None = None) -> dict:
    data: dict = {"rollout": {"agent": {"prm": prm}}}
    if actor is not None:
        data["actor"] = actor
    return data


def test_defaults_match_the_contract():
    config = PRMConfig()
    assert (config.enabled, config.error_policy, config.scorers) == (True, "reject", [])
    shaping = config.advantage_shaping
    assert (shaping.mode, shaping.negative_scale, shaping.zero_penalty, shaping.zero_eps) == (
        "additive",
        0.2,
        0.4,
        1e-6,
    )
    assert config.token_rewards_as_adv is True and config.mask_no_eos_with_zero is False
    assert PRMScorerConfig(path="a.B") == PRMScorerConfig(path="a.B", weight=1.0, enabled=True, kwargs={})


@pytest.mark.parametrize("cls", [PRMConfig, PRMScorerConfig, PRMAdvantageShapingConfig])
def test_every_field_documents_itself(cls):
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help", "").strip(), f"{cls.__name__}.{f.name} has no help"


def test_scorer_entries_may_be_mappings_configs_or_instances():
    instance = LengthBudgetScorer(max_output_tokens=8)
    config = PRMConfig(
        scorers=[{"path": "pkg.mod.Scorer", "weight": 0.5}, PRMScorerConfig(path="pkg.Other"), instance],
        advantage_shaping={"mode": "gvpo"},
    )
    assert config.scorers[0] == PRMScorerConfig(path="pkg.mod.Scorer", weight=0.5)
    assert config.scorers[2] is instance
    assert config.advantage_shaping == PRMAdvantageShapingConfig(mode="gvpo")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"advantage_shaping": {"mode": "foo"}},
            "advantage_shaping.mode: unknown mode 'foo' (expected additive|gvpo|process_weighted|min_form)",
        ),
        ({"advantage_shaping": {"negative_scale": -1}}, "advantage_shaping.negative_scale: must be >= 0"),
        ({"advantage_shaping": {"zero_eps": float("nan")}}, "advantage_shaping.zero_eps: expected a finite number"),
        ({"advantage_shaping": {"moed": "gvpo"}}, "advantage_shaping.moed: unknown key"),
        ({"error_policy": "ignore"}, "error_policy: unknown policy 'ignore' (expected reject|keep_original)"),
        ({"enabled": "maybe"}, "enabled: expected true or false"),
        ({"scorers": [{"path": ""}]}, "scorers[0].path: must be a non-empty dotted import path"),
        (
            {"scorers": [{"path": "a.B"}, {"path": "a.C", "weight": "high"}]},
            "scorers[1].weight: expected a finite number",
        ),
        ({"scorers": [{"path": "a.B", "kwargs": [1]}]}, "scorers[0].kwargs: expected a mapping"),
        ({"scorers": [{"path": "a.B", "enabled": 2}]}, "scorers[0].enabled: expected true or false"),
        ({"scorers": [{"path": "a.B", "kwarg": {}}]}, "scorers[0].kwarg: unknown key"),
        ({"scorers": ["a.B"]}, "scorers[0]: expected a {path, weight, enabled, kwargs} mapping"),
        ({"scorers": {"path": "a.B"}}, "scorers: expected a list"),
    ],
)
def test_bad_values_are_reported_by_key(kwargs, message):
    with pytest.raises(PRMConfigError) as caught:
        PRMConfig(**kwargs)
    assert str(caught.value).startswith(message)


def test_config_errors_are_the_package_config_errors():
    # One `except ConfigError` catches bad PRM settings as well as any other bad setting.
    with pytest.raises(ConfigError):
        PRMAdvantageShapingConfig(mode="bogus")
    assert issubclass(PRMConfigError, ValueError)


@pytest.mark.parametrize("mode", ["gvpo", "process_weighted"])
def test_piecewise_modes_need_direct_process_advantages(mode):
    with pytest.raises(PRMConfigError, match=r"advantage_shaping\.mode: .*token_rewards_as_adv"):
        PRMConfig(advantage_shaping={"mode": mode}, token_rewards_as_adv=False)


def test_process_weighted_refuses_mask_no_eos_with_zero():
    with pytest.raises(PRMConfigError, match="mask_no_eos_with_zero"):
        PRMConfig(advantage_shaping={"mode": "process_weighted"}, mask_no_eos_with_zero=True)
    # The other modes keep working with the actor's truncation mask.
    assert PRMConfig(advantage_shaping={"mode": "gvpo"}, mask_no_eos_with_zero=True).mask_no_eos_with_zero


def test_configured_scorers_refuse_folded_process_rewards():
    scorers = [{"path": "a.B"}]
    with pytest.raises(PRMConfigError, match="token_rewards_as_adv: configured scorers need true"):
        PRMConfig(scorers=scorers, token_rewards_as_adv=False)
    # Without active scoring there is nothing to fold.
    assert PRMConfig(scorers=scorers, enabled=False, token_rewards_as_adv=False).scorers
    assert PRMConfig(token_rewards_as_adv=False).scorers == []


def test_load_trainer_yaml_file(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(TRAINER_YAML)
    config = load_prm_config(path)
    assert config.enabled and config.error_policy == "reject"
    assert config.advantage_shaping == PRMAdvantageShapingConfig(mode="process_weighted")
    assert config.scorers == [
        PRMScorerConfig(path="prm_distill.scorer.LengthBudgetScorer", weight=1.0, kwargs={"max_output_tokens": 4})
    ]
    assert config.token_rewards_as_adv is True
    assert load_prm_config(str(path)) == config


def test_trainer_yaml_drives_scoring_and_shaping(tmp_path, make_turn):
    path = tmp_path / "trainer.yaml"
    path.write_text(TRAINER_YAML)
    config = load_prm_config(path)

    async def score():
        runner = await PRMRunner.create(config)
        short, long = make_turn("short", n_tokens=2), make_turn("long", n_tokens=5)
        await runner.run([short], {"messages": short.messages})
        await runner.run([long], {"messages": long.messages})
        await runner.aclose()
        return short, long

    short, long = asyncio.run(score())
    assert short.token_rewards.tolist() == [1.0, 1.0]  # 2 <= 4 tokens
    assert long.token_rewards.tolist() == [0.0] * 5  # 5 > 4 tokens

    # One padded row: 2 prompt tokens, then the short turn's 2 tokens. The actor holds the loss
    # mask rolled to predicting positions: [0, 1, 1, 0]. A positive advantage 0.6 is weighted by
    # P = 1 (kept), a negative one -0.3 is replaced by P = 1.
    token_rewards = torch.tensor([[0.0, 0.0, *short.token_rewards.tolist()]])
    loss_mask = torch.tensor([[0, 1, 1, 0]])
    advantages = torch.tensor([[0.0, 0.6, -0.3, 0.0]])
    shaped = shape_advantages(advantages, token_rewards, loss_mask, mode=config.advantage_shaping.mode)
    assert shaped.tolist() == [[0.0, pytest.approx(0.6), 1.0, 0.0]]


def test_load_from_a_mapping_reads_actor_settings():
    config = load_prm_config(
        _trainer(
            {"advantage_shaping": {"mode": "gvpo"}},
            {"token_rewards_as_adv": True, "mask_no_eos_with_zero": True, "lr": 1e-6},
        )
    )
    assert config.mask_no_eos_with_zero is True
    assert load_prm_config(_trainer({})).token_rewards_as_adv is True  # the actor's default


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _trainer({"advantage_shaping": {"mode": "foo"}}),
            "rollout.agent.prm.advantage_shaping.mode: unknown mode 'foo' (expected additive|gvpo|process_weighted|min_form)",
        ),
        (
            _trainer({"scorers": [{"path": "a.B", "weight": None}]}),
            "rollout.agent.prm.scorers[0].weight: expected a finite number",
        ),
        (_trainer({"scorer": []}), "rollout.agent.prm.scorer: unknown key"),
        (_trainer({"token_rewards_as_adv": True}), "rollout.agent.prm.token_rewards_as_adv: belongs under actor"),
        (
            _trainer({"scorers": [{"path": "a.B"}]}, {"token_rewards_as_adv": False}),
            "actor.token_rewards_as_adv: configured scorers need true",
        ),
        (_trainer({}, {"mask_no_eos_with_zero": "no"}), "actor.mask_no_eos_with_zero: expected true or false"),
        ({"rollout": {"agents": {}}}, "rollout.agent: missing"),
        ({"rollout": {"agent": {"prm": None}}}, "rollout.agent.prm: missing"),
        ({"rollout": {"agent": {"prm": [1]}}}, "rollout.agent.prm: expected a mapping"),
    ],
)
def test_load_errors_name_the_trainer_key(data, message):
    with pytest.raises(PRMConfigError) as caught:
        load_prm_config(data)
    assert str(caught.value).startswith(message)


def test_scorer_config_coerces_as_areal_does():
    # YAML or CLI overrides arrive as strings and 0/1; AReaL reads them with float() and bool().
    config = PRMScorerConfig(path="a.B", weight="0.25", enabled=0)
    assert (config.weight, config.enabled) == (0.25, False)
    assert PRMScorerConfig(path="a.B", enabled="true").enabled is True
    with pytest.raises(PRMConfigError, match="weight: expected a finite number, got the bool True"):
        PRMScorerConfig(path="a.B", weight=True)
    with pytest.raises(PRMConfigError, match="weight: expected a finite number, got 'nan'"):
        PRMScorerConfig(path="a.B", weight="nan")


def test_scorer_entries_set_after_construction_are_resolved_by_the_runner(make_turn):
    # AReaL's hosts assign `config.scorers` later, with dicts, ready scorers or configs.
    config = PRMConfig()
    config.scorers = [
        {"path": "prm_distill.scorer.LengthBudgetScorer", "weight": "2", "kwargs": {"max_output_tokens": 4}}
    ]
    runner = PRMRunner(config)
    turn = make_turn("t", n_tokens=1)
    asyncio.run(runner.run([turn]))
    assert turn.token_rewards.tolist() == [2.0]
    config.scorers = ["prm_distill.scorer.LengthBudgetScorer"]
    with pytest.raises(PRMConfigError, match=r"scorers\[0\]: expected a \{path, weight, enabled, kwargs\} mapping"):
        PRMRunner(config)


def test_commit_scope_is_checked():
    assert PRMConfig().commit_scope == "scorer"  # AReaL's rule by default
    with pytest.raises(PRMConfigError, match="commit_scope: unknown scope 'branch'"):
        PRMConfig(commit_scope="branch")
