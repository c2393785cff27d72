"""The pipeline's RL stage: the distilled PRM as a dense per-token scorer in the runner built from the
trainer-style YAML (shipped in this package; configs/trainer_prm.yaml links to it), scoring
multi-turn rollouts and shaping advantages in every mode. The scorer borrows the iteration's loaded
engine (behind a `ScoreBatcher`): no model is loaded here.

Rollouts are held-out synthetic problems answered in two turns (a solution, then a check asked by
the user), one correct and one going wrong at a known step, tokenised with the policy tokenizer
(here the student's own, as SmolLM2 would be both policy and PRM in a small setup).
"""

from __future__ import annotations

import asyncio
import copy
from importlib.resources import files
from typing import Any

import torch
import yaml

from ..protocol import StepScorer
from ..records import Trajectory
from ..scorer import Interaction, ModelResponse, PRMRunner, load_prm_config, score_branches, shape_advantages
from ..serve.batcher import ScoreBatcher

TRAINER_PRM_CONFIG = "trainer_prm.yaml"  # package data (configs/trainer_prm.yaml is a link to it)

MODES = ("process_weighted", "gvpo", "additive")


def _turn(tok, turn_id: str, question: str, answer: str, parent=None, history=(), reward: float = 0.0) -> Interaction:
    messages = [*history, {"role": "user", "content": question}]
    return Interaction(
        interaction_id=turn_id,
        parent=parent,
        messages=messages,
        output_message_list=[{"role": "assistant", "content": answer}],
        model_response=ModelResponse(
            input_tokens=tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            if tok.chat_template else tok.encode(question, add_special_tokens=False),
            output_tokens=tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id],
        ),
        reward=reward,
    )


def build_rollouts(tok, records: list[Trajectory]) -> list[Interaction]:
    """Two-turn conversations: turn 1 answers step by step (blank lines between steps, as the
    splitter reads them), turn 2 repeats the last two steps when asked to double-check."""
    out = []
    for r in records:
        answer = "\n\n".join(r.steps)
        first = _turn(tok, f"{r.id}/t1", r.question, answer, reward=float(r.outcome or 0.0))
        history = [*first.messages, *first.output_message_list]
        check = "\n\n".join(r.steps[-2:])
        out += [first, _turn(tok, f"{r.id}/t2", f"Please double-check the end of your solution. {r.question}", check, parent=first, history=history,
                             reward=float(r.outcome or 0.0))]
    return out


def trainer_config() -> dict[str, Any]:
    """The trainer-style YAML shipped with the package."""
    return yaml.safe_load(files(__package__).joinpath(TRAINER_PRM_CONFIG).read_text(encoding="utf-8"))


def _config(data: dict[str, Any], mode: str, backend: ScoreBatcher, tokenizer: Any) -> dict[str, Any]:
    """The YAML for one shaping mode, its distilled scorer pointed at the loaded engine."""
    cfg = copy.deepcopy(data)
    prm = cfg["rollout"]["agent"]["prm"]
    prm["advantage_shaping"]["mode"] = mode
    for s in prm["scorers"]:
        if s["path"].endswith("DistilledPRMScorer"):
            kwargs = s.setdefault("kwargs", {})
            for in_process_only in ("model", "device", "max_batch_tokens", "max_wait_ms"):
                kwargs.pop(in_process_only, None)
            kwargs.update(engine=backend, policy_tokenizer=tokenizer, for_shaping_mode=mode)
    return cfg


async def _score(cfg: dict, rollouts: list[Interaction]) -> dict[str, list[Interaction]]:
    runner = await PRMRunner.create(load_prm_config(cfg))
    try:
        return await score_branches(rollouts, runner)
    finally:
        await runner.aclose()


def shaped_table(engine: StepScorer, tok: Any, records: list[Trajectory]) -> str:
    """Score the rollouts under each shaping mode and tabulate mean outcome vs shaped advantage.

    `tok` is the policy tokenizer (here the student's own, as SmolLM2 would be both policy and PRM)."""
    rollouts = build_rollouts(tok, records)
    data = trainer_config()
    backend = ScoreBatcher(engine)
    lines = [f"{'mode':18}{'trajectory':14}{'outcome adv':>12}{'mean token reward':>19}{'min token reward':>18}{'mean shaped adv':>17}"]
    for mode in MODES:
        branches = asyncio.run(_score(_config(data, mode, backend, tok), rollouts))
        for leaf, chain in branches.items():
            ids = [i for turn in chain if turn.model_response is not None for i in turn.model_response.output_tokens]
            rewards = torch.cat([turn.token_rewards for turn in chain if turn.token_rewards is not None])
            adv = 1.0 if (chain[0].reward or 0.0) > 0 else -1.0
            advantages = torch.full((1, len(ids) + 1), adv)
            token_rewards = torch.cat([torch.zeros(1), rewards]).unsqueeze(0)  # one prompt token in front
            loss_mask = torch.zeros(1, len(ids) + 1, dtype=torch.bool)
            loss_mask[0, : len(ids)] = True  # position j predicts token j + 1
            shaped = shape_advantages(advantages, token_rewards, loss_mask, mode=mode)
            lines.append(f"{mode:18}{leaf.split('/')[0]:14}{adv:>12.1f}{float(rewards.mean()):>19.3f}"
                         f"{float(rewards.min()):>18.3f}{float(shaped[loss_mask].mean()):>17.3f}")
    asyncio.run(backend.aclose())
    return "\n".join(lines)
