"""`PRMRewardManager` / `PRMRewardLoopManager` on verl's batch layout.

verl itself is far too heavy for the test dependencies (ray, vLLM-era pins; it also pins an older
transformers), so most checks feed the managers a TEST DOUBLE of verl's `DataProto` (`DataProtoDouble`:
`.batch` tensors, `.non_tensor_batch` object arrays, `len()`), built exactly as verl lays out a rollout:
left-padded `prompts`, right-padded `responses`, one `attention_mask` over both. The checks at the end
use the real verl (`DataProto`, both registries) and run only where verl is installed."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from prm_distill.integrations.common import PRMBackend
from prm_distill.integrations.verl import PRMRewardLoopManager, PRMRewardManager, process_token_rewards
from prm_distill.scorer.alignment import assign_tokens_to_steps, decode_with_offsets
from prm_distill.steps import split_step_spans

QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."
BAD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 8.\n\nThe answer is 8."


class DataProtoDouble:
    """TEST DOUBLE of verl's DataProto: the fields a reward manager reads, nothing else."""

    def __init__(self, batch: dict[str, torch.Tensor], non_tensor_batch: dict[str, np.ndarray]):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

    def __len__(self) -> int:
        return self.batch["responses"].shape[0]


def make_batch(tokenizer, responses: list[str], *, pad_prompt: int = 24, pad_response: int = 48):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts, resp, masks = [], [], []
    for text in responses:
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        p = [pad] * (pad_prompt - len(prompt_ids)) + prompt_ids
        r = ids + [pad] * (pad_response - len(ids))
        prompts.append(p)
        resp.append(r)
        masks.append([0] * (pad_prompt - len(prompt_ids)) + [1] * (len(prompt_ids) + len(ids)) + [0] * (pad_response - len(ids)))
    batch = {"prompts": torch.tensor(prompts), "responses": torch.tensor(resp), "attention_mask": torch.tensor(masks)}
    non_tensor = {
        "data_source": np.array(["gsm8k"] * len(responses), dtype=object),
        "reward_model": np.array([{"ground_truth": "7"} for _ in responses], dtype=object),
        "extra_info": np.array([{"question": QUESTION} for _ in responses], dtype=object),
    }
    return DataProtoDouble(batch, non_tensor)


def correctness(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.strip().endswith(f"is {ground_truth}.") else 0.0


@pytest.fixture(scope="module")
def backend(tiny_checkpoint):
    return PRMBackend(model=str(tiny_checkpoint), device="cpu")


def _step_ends(tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    decoded, ends = decode_with_offsets(tokenizer, ids)
    steps = assign_tokens_to_steps(ends, split_step_spans(decoded))
    return [max(i for i, s in enumerate(steps) if s == k) for k in sorted(set(steps))]


def test_min_form_rows_hold_the_outcome_plus_rewards_that_sum_to_the_weakest_step(smol_tokenizer, backend, step_scores):
    data = make_batch(smol_tokenizer, [GOOD, BAD])
    manager = PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)
    out = manager(data, return_dict=True)
    rewards = out["reward_tensor"]
    assert rewards.shape == data.batch["responses"].shape and rewards.dtype == torch.float32
    for row, text, outcome in ((0, GOOD, 1.0), (1, BAD, 0.0)):
        signed = [2 * p - 1 for p in step_scores(QUESTION, text)]
        # min-form: the PRM's rewards of a row sum to its weakest step's 2P-1; the outcome is added once.
        assert rewards[row].sum().item() == pytest.approx(outcome + min(signed), abs=1e-5)
        # they sit on the policy's tokens that close each step (the last one also carries the outcome).
        nonzero = set(torch.nonzero(rewards[row]).reshape(-1).tolist())
        assert nonzero <= set(_step_ends(smol_tokenizer, text))
        n = int(data.batch["attention_mask"][row, 24:].sum())
        assert rewards[row, n:].abs().sum() == 0  # nothing on padding
    assert out["reward_extra_info"]["score"] == [1.0, 0.0]
    assert out["reward_extra_info"]["prm_fallback"] == [0.0, 0.0]
    assert out["reward_extra_info"]["prm_min_step_score"] == pytest.approx(
        [min(step_scores(QUESTION, GOOD)), min(step_scores(QUESTION, BAD))])


def test_dense_credit_puts_each_steps_value_on_its_last_token(smol_tokenizer, backend, step_scores):
    data = make_batch(smol_tokenizer, [GOOD])
    manager = PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend, credit="dense", process_value="prob",
                               outcome_weight=0.5, process_weight=2.0)
    row = manager(data)[0]
    ends = _step_ends(smol_tokenizer, GOOD)
    probs = step_scores(QUESTION, GOOD)
    expected = [2.0 * p for p in probs]
    expected[-1] += 0.5 * 1.0  # the outcome, weighted, at the last token (EOS belongs to the last step)
    assert [row[j].item() for j in ends] == pytest.approx(expected, abs=1e-5)
    assert row.sum().item() == pytest.approx(sum(expected), abs=1e-5)


def test_the_hand_computed_min_form_rewrite_on_known_step_scores():
    from prm_distill.integrations.common import ScoredSteps

    scored = ScoredSteps(steps=["a", "b", "c"], spans=[(0, 1), (2, 3), (4, 5)], scores=[0.9, 0.25, 0.6])
    # signed values 0.8, -0.5, 0.2; suffix minima -0.5, -0.5, 0.2; rewrites 0.0, -0.7, 0.2 on tokens 1, 3, 4.
    row = process_token_rewards(scored, [0, 0, 1, 1, 2])
    assert row.tolist() == pytest.approx([0.0, 0.0, 0.0, -0.7, 0.2])


def test_an_unscorable_response_keeps_the_outcome_reward_alone(smol_tokenizer, backend):
    data = make_batch(smol_tokenizer, ["", GOOD])  # the first response is EOS only
    manager = PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)
    out = manager(data, return_dict=True)
    assert out["reward_tensor"][0].tolist() == [0.0] * 48  # outcome 0 (no answer), no PRM reward
    assert out["reward_extra_info"]["prm_fallback"] == [1.0, 0.0]
    assert manager.fallbacks.summary()["prm/fallback/empty_response"] == 1.0


def test_precomputed_rm_scores_pass_through(smol_tokenizer, backend):
    data = make_batch(smol_tokenizer, [GOOD])
    data.batch["rm_scores"] = torch.ones(1, 48)
    assert PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)(data) is data.batch["rm_scores"]


def test_the_reward_loop_manager_scores_one_sample_and_assembles_dense_rows(smol_tokenizer, backend):
    batch_manager = PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)
    loop = PRMRewardLoopManager(None, smol_tokenizer, correctness, prm_backend=backend, dense_rows=True)
    data = make_batch(smol_tokenizer, [GOOD, BAD])
    expected = batch_manager(data)
    outputs = []
    for i in range(2):
        one = DataProtoDouble({k: v[i : i + 1] for k, v in data.batch.items()}, {k: v[i : i + 1] for k, v in data.non_tensor_batch.items()})
        outputs.append(asyncio.run(loop.run_single(one)))
    assert set(outputs[0]["reward_extra_info"]) == set(outputs[1]["reward_extra_info"])  # verl stacks them by key
    assembled = PRMRewardLoopManager.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    assert torch.allclose(assembled, expected)


def test_reward_loop_options_come_from_verls_reward_kwargs(smol_tokenizer, backend):
    config = {"reward": {"reward_kwargs": {"credit": "dense", "outcome_weight": 0.0, "process_value": "prob"},
                         "prm_distill": {"outcome_weight": 0.5}}}  # the earlier section, over reward_kwargs
    loop = PRMRewardLoopManager(config, smol_tokenizer, correctness, prm_backend=backend)
    assert (loop.credit, loop.process_value, loop.outcome_weight) == ("dense", "prob", 0.5)


def test_the_agent_loop_route_gets_one_float_the_sum_of_the_dense_row(smol_tokenizer, backend, step_scores):
    """verl's agent loop (no verl reward model) takes `AgentLoopOutput.reward_score: Optional[float]`."""
    data = make_batch(smol_tokenizer, [GOOD, BAD])
    agent_route = {"reward": {"reward_model": {"enable": False}}}
    rm_route = {"reward": {"reward_model": {"enable": True, "enable_resource_pool": False}}}
    assert PRMRewardLoopManager(rm_route, smol_tokenizer, correctness, prm_backend=backend).dense_rows is True
    assert PRMRewardLoopManager({"reward": {"reward_model": {"enable": True, "enable_resource_pool": True}}},
                                smol_tokenizer, correctness, prm_backend=backend).dense_rows is False
    loop = PRMRewardLoopManager(agent_route, smol_tokenizer, correctness, prm_backend=backend)
    for i, (text, outcome) in enumerate(((GOOD, 1.0), (BAD, 0.0))):
        one = DataProtoDouble({k: v[i : i + 1] for k, v in data.batch.items()}, {k: v[i : i + 1] for k, v in data.non_tensor_batch.items()})
        out = asyncio.run(loop.run_single(one))
        assert isinstance(out["reward_score"], float)
        assert out["reward_score"] == pytest.approx(outcome + min(2 * p - 1 for p in step_scores(QUESTION, text)), abs=1e-5)
        assert out["reward_extra_info"]["prm_num_steps"] == 3.0
    # and assemble_rm_scores puts a float at the last valid token, as verl's agent loop does
    rows = PRMRewardLoopManager.assemble_rm_scores(data, [1.5, -0.25])
    n = data.batch["attention_mask"][:, data.batch["prompts"].size(1):].sum(dim=1).tolist()
    assert rows[0, n[0] - 1] == 1.5 and rows[1, n[1] - 1] == -0.25 and rows.abs().sum() == 1.75


def test_a_fallback_row_logs_zero_not_nan_so_verls_batch_mean_stays_finite(smol_tokenizer, backend, step_scores):
    out = PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)(make_batch(smol_tokenizer, ["", GOOD]), return_dict=True)
    info = out["reward_extra_info"]
    assert info["prm_min_step_score"] == pytest.approx([0.0, min(step_scores(QUESTION, GOOD))])
    assert info["prm_fallback"] == [1.0, 0.0] and info["prm_num_steps"] == [0.0, 3.0]
    # the documented mean over scored rows: mean(prm_min_step_score) / (1 - mean(prm_fallback))
    mean = sum(info["prm_min_step_score"]) / 2 / (1 - sum(info["prm_fallback"]) / 2)
    assert mean == pytest.approx(min(step_scores(QUESTION, GOOD)))


@pytest.mark.parametrize(("options", "match"), [
    ({"credit": "sum"}, "credit must be one of"),
    ({"process_value": "logit"}, "process_value must be one of"),
    ({"min_form_temperature": 0}, "min_form_temperature"),
    ({"outcome_weight": float("nan")}, "outcome_weight must be a finite number"),
])
def test_bad_options_are_refused_by_name(smol_tokenizer, backend, options, match):
    with pytest.raises(ValueError, match=match):
        PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend, **options)


def test_the_module_imports_without_verl():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['verl'] = None\n"
         "import prm_distill.integrations.verl as v; assert not v.VERL_AVAILABLE; print('ok')"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_with_the_real_verl_both_registries_hold_prm_distill(smol_tokenizer, backend):
    pytest.importorskip("verl")
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls as loop_cls
    from verl.workers.reward_manager import get_reward_manager_cls

    module = importlib.import_module("prm_distill.integrations.verl")
    assert get_reward_manager_cls("prm_distill") is module.PRMRewardManager
    assert loop_cls("prm_distill") is module.PRMRewardLoopManager
    double = make_batch(smol_tokenizer, [GOOD, BAD])
    data = DataProto.from_dict(tensors=double.batch, non_tensors=double.non_tensor_batch)
    manager = module.PRMRewardManager(tokenizer=smol_tokenizer, num_examine=0, compute_score=correctness, prm_backend=backend)
    assert torch.allclose(manager(data), PRMRewardManager(smol_tokenizer, 0, correctness, prm_backend=backend)(double))
    loop = module.PRMRewardLoopManager(config=None, tokenizer=smol_tokenizer, compute_score=correctness, prm_backend=backend,
                                       dense_rows=True)
    outputs = [asyncio.run(loop.run_single(data[i : i + 1])) for i in range(len(data))]
    assert torch.allclose(module.PRMRewardLoopManager.assemble_rm_scores(data, [o["reward_score"] for o in outputs]), manager(data))
