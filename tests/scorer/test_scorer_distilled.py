"""DistilledPRMScorer: exact token alignment, transforms, calibration, failures, lifecycle, and the
trainer YAML end to end (runner -> token rewards -> shaped advantages), checked against PRM scores
computed independently with `PRMEngine.score`."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

import prm_distill.scorer.distilled as distilled_module
from prm_distill.checkpoint import CheckpointError, Sidecar
from prm_distill.scorer import (
    DistilledPRMScorer,
    DistilledPRMTrajectoryScorer,
    Interaction,
    ModelResponse,
    PRMMetricObservation,
    PRMRunner,
    load_prm_config,
    score_branches,
    shape_advantages,
)
from prm_distill.serve import PRMEngine
from prm_distill.serve.batcher import BatcherClosedError, ScoreBatcher
from prm_distill.steps import split_steps

TRAINER_YAML = Path(__file__).resolve().parents[2] / "configs" / "trainer_prm.yaml"

# Three marker steps; the blank lines between them are whitespace-only tokens, and "✓" is three
# byte-level tokens that each hold part of the character.
MARKER_CHUNKS = ["Step 1: 2 + 2 = 4.\n\n", "Step 2: 4 × 3 = 12 ✓.\n\n", "Step 3: The answer is 12."]


class FakeBackend:
    """The scorer's backend seam: fixed scores per call, records the questions and steps it saw.

    Without fixed scores, step k (from 0) scores (k + 1) / 10, so a token's reward names its step.
    """

    def __init__(self, scores: list[float] | None = None, *, sidecar: Sidecar | None = None, delay: float = 0.0):
        self.scores, self.sidecar, self.delay = scores, sidecar, delay
        self.calls: list[tuple[str, list[str]]] = []
        self.closed = 0

    async def score(self, question, steps):
        self.calls.append((question, list(steps)))
        await asyncio.sleep(self.delay)
        return list(self.scores) if self.scores is not None else [(k + 1) / 10 for k in range(len(steps))]

    async def aclose(self):
        self.closed += 1


@dataclass
class Turn:
    interaction: Interaction
    chunk_of_token: list[int]  # which chunk (= step) each output token was encoded from

    def last_token_of(self, chunk: int) -> int:
        return max(i for i, c in enumerate(self.chunk_of_token) if c == chunk)


def make_turn(tok, turn_id, chunks, *, question="What is 2 + 2, times 3?", parent=None, history=(), reward=1.0) -> Turn:
    """A turn whose output tokens are the chunks encoded one by one, then EOS: the token-to-step map
    is known by construction (EOS belongs to the last step, by the documented rule)."""
    encoded = [tok.encode(chunk, add_special_tokens=False) for chunk in chunks]
    output = [i for ids in encoded for i in ids] + [tok.eos_token_id]
    chunk_of_token = [k for k, ids in enumerate(encoded) for _ in ids] + [len(chunks) - 1]
    messages = [*history, {"role": "user", "content": question}]
    interaction = Interaction(
        interaction_id=turn_id,
        parent=parent,
        messages=messages,
        output_message_list=[{"role": "assistant", "content": "".join(chunks)}],
        model_response=ModelResponse(input_tokens=tok.encode(question, add_special_tokens=False), output_tokens=output),
        reward=reward,
    )
    return Turn(interaction, chunk_of_token)


def scorer_with(tok, scores, **kwargs) -> DistilledPRMScorer:
    backend = FakeBackend(scores, sidecar=kwargs.pop("sidecar", None))
    return DistilledPRMScorer(engine=backend, policy_tokenizer=tok, **kwargs)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> PRMEngine:
    return PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")


# -- token alignment -------------------------------------------------------------------------


def steps_of_tokens(tok, text, splitter=None) -> tuple[list[int], list[int]]:
    """The policy's own tokenization of `text` + EOS, and the step each token's reward came from."""
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    turn = Interaction(
        interaction_id="t", messages=[{"role": "user", "content": "q"}], model_response=ModelResponse(output_tokens=ids)
    )
    scorer = DistilledPRMScorer(engine=FakeBackend(), policy_tokenizer=tok, splitter=splitter)  # prob, spread
    reward = asyncio.run(scorer.evaluate(turn, {}))
    return ids, [round(float(r) * 10) - 1 for r in reward]


def tokens_by_step(tok, ids, token_steps) -> list[str]:
    assert token_steps == sorted(token_steps), "a step's tokens must be contiguous"
    return [tok.decode([i for i, s in zip(ids, token_steps) if s == k]) for k in range(max(token_steps) + 1)]


def test_every_token_falls_in_its_step_whitespace_between_steps_goes_to_the_preceding_one(smol_tokenizer):
    ids, token_steps = steps_of_tokens(smol_tokenizer, "".join(MARKER_CHUNKS))
    assert smol_tokenizer.decode([198]) == "\n" and ids.count(198) == 4  # blank lines are "\n" tokens
    # Decoding each step's tokens gives back its text plus the gap after it: no partial "✓" byte
    # strayed into another step, and the final EOS belongs to the last step.
    assert tokens_by_step(smol_tokenizer, ids, token_steps) == [
        "Step 1: 2 + 2 = 4.\n\n",
        "Step 2: 4 × 3 = 12 ✓.\n\n",
        "Step 3: The answer is 12.<|im_end|>",
    ]


def test_a_token_straddling_a_step_boundary_belongs_to_the_step_of_its_last_character(smol_tokenizer):
    text = "First we add 2 and 2 to get 4. Then 4 ✓ times 3 gives 12. So the answer is 12."
    ids, token_steps = steps_of_tokens(smol_tokenizer, text, splitter={"sentences_per_step": 1})
    pieces = [smol_tokenizer.decode([i]) for i in ids]
    then = pieces.index(" Then")  # the gap's space and the first word of step 2 in one token
    assert token_steps[then - 1 : then + 1] == [0, 1]
    assert tokens_by_step(smol_tokenizer, ids, token_steps) == [
        "First we add 2 and 2 to get 4.",
        " Then 4 ✓ times 3 gives 12.",
        " So the answer is 12.<|im_end|>",
    ]


# -- transforms, placement, calibration, observations ------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected_by_chunk", "at_step_end"),
    [
        ("process_weighted", [0.9, 0.2, 0.6], False),  # prob, spread
        ("additive", [0.8, -0.6, 0.2], True),  # signed = 2p - 1, step end
        ("gvpo", [0.0, -1.0, 0.0], True),  # fail_only: -1 below 0.5, step end
    ],
)
def test_defaults_per_shaping_mode_place_each_step_score_on_its_tokens(
    smol_tokenizer, mode, expected_by_chunk, at_step_end
):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    scorer = scorer_with(smol_tokenizer, [0.9, 0.2, 0.6], for_shaping_mode=mode)
    reward = asyncio.run(scorer.evaluate(turn.interaction, {}))
    assert reward.dtype == torch.float32 and reward.shape == (turn.interaction.model_response.output_len,)
    expected = torch.zeros_like(reward)
    for chunk, value in enumerate(expected_by_chunk):
        if at_step_end:
            expected[turn.last_token_of(chunk)] = value
        else:
            expected[[i for i, c in enumerate(turn.chunk_of_token) if c == chunk]] = value
    torch.testing.assert_close(reward, expected)


def test_explicit_transform_and_placement_override_the_mode_defaults(smol_tokenizer):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    scorer = scorer_with(
        smol_tokenizer, [0.9, 0.2, 0.6], for_shaping_mode="gvpo", transform="signed", placement="spread"
    )
    reward = asyncio.run(scorer.evaluate(turn.interaction, {}))
    expected = torch.tensor([[0.8, -0.6, 0.2][c] for c in turn.chunk_of_token])
    torch.testing.assert_close(reward, expected)


def test_temperature_calibration_and_the_sidecar_threshold(smol_tokenizer):
    # T = 2: sigmoid(logit(p) / 2). logit(0.9) = ln 9 -> ln 3 -> 3/4; logit(0.2) = -ln 4 -> -ln 2 -> 1/3;
    # the sidecar threshold 0.8 (ln 4 -> ln 2) becomes 2/3, so step 2 fails and step 1 does not.
    sidecar = Sidecar(
        step_tag="<|step|>",
        step_tag_id=1,
        max_length=64,
        threshold=0.8,
        calibration={"method": "temperature", "params": {"temperature": 2.0}},
    )
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS[1:])
    scorer = scorer_with(smol_tokenizer, [0.9, 0.2], sidecar=sidecar)
    assert scorer.threshold == pytest.approx(2 / 3)
    result = asyncio.run(scorer.evaluate_result(turn.interaction, {}))
    torch.testing.assert_close(result.reward, torch.tensor([[0.75, 1 / 3][c] for c in turn.chunk_of_token]))
    assert result.observations[0].value == pytest.approx((0.75 + 1 / 3) / 2)
    assert result.observations[1].value is True
    raw = scorer_with(smol_tokenizer, [0.9, 0.2], sidecar=sidecar, calibrate=False)
    torch.testing.assert_close(
        asyncio.run(raw.evaluate(turn.interaction, {})), torch.tensor([[0.9, 0.2][c] for c in turn.chunk_of_token])
    )


@pytest.mark.parametrize(
    ("calibration", "message"),
    [
        ({"method": "beta", "params": {}}, "method 'beta' is not one of temperature|platt|isotonic"),
        ({"method": "isotonic", "params": {}}, "isotonic params need lists x and y"),
        ({"method": "temperature", "params": {"temperature": 0}}, "temperature must be a finite number > 0"),
    ],
)
def test_a_malformed_calibration_is_refused_at_start_up(smol_tokenizer, calibration, message):
    sidecar = Sidecar(step_tag="<|step|>", step_tag_id=1, max_length=64, calibration=calibration)
    with pytest.raises(ValueError, match=message):
        scorer_with(smol_tokenizer, [0.5], sidecar=sidecar)


def test_isotonic_calibration_maps_scores_and_threshold_by_linear_interpolation(smol_tokenizer):
    # Breakpoints (0, 0) (0.5, 0.2) (1, 1): 0.9 -> 0.2 + 0.4/0.5 * 0.8 = 0.84; 0.2 -> 0.2 * 0.2/0.5 = 0.08;
    # the sidecar threshold 0.6 -> 0.2 + 0.1/0.5 * 0.8 = 0.36.
    sidecar = Sidecar(
        step_tag="<|step|>",
        step_tag_id=1,
        max_length=64,
        threshold=0.6,
        calibration={"method": "isotonic", "params": {"x": [0.0, 0.5, 1.0], "y": [0.0, 0.2, 1.0]}},
    )
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS[1:])
    scorer = scorer_with(smol_tokenizer, [0.9, 0.2], sidecar=sidecar)
    assert scorer.threshold == pytest.approx(0.36)
    reward = asyncio.run(scorer.evaluate(turn.interaction, {}))
    torch.testing.assert_close(reward, torch.tensor([[0.84, 0.08][c] for c in turn.chunk_of_token]))


def test_a_new_calibration_in_the_checkpoint_is_used_without_a_restart(smol_tokenizer, tiny_checkpoint, tmp_path):
    import shutil

    from prm_distill.checkpoint import write_calibration

    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS[1:])
    engine = PRMEngine.from_checkpoint(model, device="cpu", dtype="float32")

    async def run() -> tuple[list[float], torch.Tensor, torch.Tensor, float]:
        scorer = DistilledPRMScorer(model=model, policy_tokenizer=smol_tokenizer, device="cpu", dtype="float32")
        try:
            [raw] = engine.score([(scorer._question(turn.interaction), scorer._prepare(turn.interaction).steps)])
            before = await scorer.evaluate(turn.interaction, {})
            write_calibration(model, {"method": "temperature", "params": {"temperature": 2.0}})
            after = await scorer.evaluate(turn.interaction, {})
            return raw, before, after, scorer.threshold
        finally:
            await scorer.aclose()

    raw, before, after, threshold = asyncio.run(run())
    by_token = lambda values: torch.tensor([values[c] for c in turn.chunk_of_token], dtype=torch.float32)  # noqa: E731
    torch.testing.assert_close(before, by_token(raw))
    halved = [1 / (1 + math.exp(-math.log(p / (1 - p)) / 2)) for p in raw]
    torch.testing.assert_close(after, by_token(halved))
    t = Sidecar.from_dict(__import__("json").loads((model / "prm_distill.json").read_text())).threshold or 0.5
    assert threshold == pytest.approx(1 / (1 + math.exp(-math.log(t / (1 - t)) / 2)))


@pytest.mark.parametrize(("scores", "failing"), [([0.9, 0.2, 0.7], True), ([0.9, 0.8, 0.7], False)])
def test_observations_report_the_mean_step_score_and_whether_a_step_fails(smol_tokenizer, scores, failing):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    result = asyncio.run(scorer_with(smol_tokenizer, scores, threshold=0.5).evaluate_result(turn.interaction, {}))
    mean, found = result.observations
    assert mean == PRMMetricObservation(
        metric_id="mean_step_score",
        scope="turn",
        target_id="t",
        value=mean.value,
        value_type="float",
        aggregations=("mean",),
    )
    assert mean.value == pytest.approx(sum(scores) / 3)
    assert found == PRMMetricObservation(
        metric_id="first_failing_step_found",
        scope="turn",
        target_id="t",
        value=failing,
        value_type="boolean",
        aggregations=("count", "rate"),
    )


def test_the_question_is_the_last_user_message_or_the_rendered_conversation(smol_tokenizer):
    history = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Add 2 and 2."},
        {"role": "assistant", "content": "4"},
    ]
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS, question="Now times 3?", history=history)
    turn.interaction.messages[-1]["content"] = [{"type": "text", "text": "Now times 3?"}]  # OpenAI content parts
    for context, question in [
        ("question", "Now times 3?"),
        ("conversation", "user: Add 2 and 2.\n\nassistant: 4\n\nuser: Now times 3?"),
    ]:
        backend = FakeBackend()
        scorer = DistilledPRMScorer(engine=backend, policy_tokenizer=smol_tokenizer, context=context)
        asyncio.run(scorer.evaluate(turn.interaction, {}))
        assert backend.calls == [(question, split_steps("".join(MARKER_CHUNKS)))]


# -- failures reject, never a silent zero ------------------------------------------------------


class BrokenBackend(FakeBackend):
    async def score(self, question, steps):
        raise ConnectionError("PRM server unreachable")


def test_an_unavailable_model_rejects_the_trajectory_and_leaves_rewards_untouched(smol_tokenizer):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    scorer = DistilledPRMScorer(engine=BrokenBackend(), policy_tokenizer=smol_tokenizer)
    runner = PRMRunner(load_prm_config({"rollout": {"agent": {"prm": {"scorers": [scorer]}}}}))
    with pytest.raises(ConnectionError, match="unreachable"):
        asyncio.run(runner.run([turn.interaction]))
    assert turn.interaction.token_rewards is None


def test_a_slow_model_times_out(smol_tokenizer):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    scorer = DistilledPRMScorer(engine=FakeBackend(delay=5), policy_tokenizer=smol_tokenizer, timeout_s=0.05)
    with pytest.raises(TimeoutError, match="timeout_s=0.05"):
        asyncio.run(scorer.evaluate(turn.interaction, {}))


def test_a_malformed_model_answer_is_an_error(smol_tokenizer):
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)
    for scores in ([0.5, 0.5], [0.5, math.nan, 0.5], [0.5, 1.5, 0.5]):
        with pytest.raises(ValueError, match="returned"):
            asyncio.run(scorer_with(smol_tokenizer, scores).evaluate(turn.interaction, {}))


def test_a_response_without_text_is_rejected_unless_configured_to_score_zero(smol_tokenizer):
    tool_call_only = Interaction(
        interaction_id="tool",
        messages=[{"role": "user", "content": "q"}],
        model_response=ModelResponse(output_tokens=[smol_tokenizer.eos_token_id] * 2),
    )
    with pytest.raises(ValueError, match="no text to score"):
        asyncio.run(scorer_with(smol_tokenizer, [0.9]).evaluate(tool_call_only, {}))
    backend = FakeBackend()
    zero = DistilledPRMScorer(engine=backend, policy_tokenizer=smol_tokenizer, empty_response="zero")
    runner = PRMRunner(load_prm_config({"rollout": {"agent": {"prm": {"scorers": [zero]}}}}))
    asyncio.run(runner.run([tool_call_only]))
    assert tool_call_only.token_rewards.tolist() == [0.0, 0.0] and backend.calls == []


def test_start_up_errors_name_the_problem(smol_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="exactly one of model"):
        DistilledPRMScorer(policy_tokenizer=smol_tokenizer)
    with pytest.raises(ValueError, match="policy_tokenizer is required"):
        DistilledPRMScorer(engine=FakeBackend())
    with pytest.raises(TypeError, match="ScoreBatcher"):  # a synchronous engine needs the batcher in front
        DistilledPRMScorer(engine=PRMEngine.__new__(PRMEngine), policy_tokenizer=smol_tokenizer)
    with pytest.raises(ValueError, match="placement must be one of"):
        DistilledPRMScorer(engine=FakeBackend(), policy_tokenizer=smol_tokenizer, placement="everywhere")
    with pytest.raises(CheckpointError, match="not found"):
        DistilledPRMScorer(model=tmp_path / "missing", policy_tokenizer=smol_tokenizer)


def test_a_transform_that_does_not_fit_the_shaping_mode_fails_runner_creation(smol_tokenizer):
    scorer = DistilledPRMScorer(engine=FakeBackend(), policy_tokenizer=smol_tokenizer)  # process_weighted defaults
    prm = {"advantage_shaping": {"mode": "gvpo"}, "scorers": [scorer]}
    config = load_prm_config({"rollout": {"agent": {"prm": prm}}})
    with pytest.raises(ValueError, match="for_shaping_mode: gvpo"):
        asyncio.run(PRMRunner.create(config))


# -- lifecycle and concurrency with the real in-process engine ---------------------------------


def test_aclose_releases_the_owned_batcher_but_never_a_borrowed_backend(smol_tokenizer, tiny_checkpoint, monkeypatch):
    built: list[ScoreBatcher] = []

    class RecordingBatcher(ScoreBatcher):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(distilled_module, "ScoreBatcher", RecordingBatcher)
    turn = make_turn(smol_tokenizer, "t", MARKER_CHUNKS)

    async def main():
        owned = DistilledPRMScorer(model=tiny_checkpoint, policy_tokenizer=smol_tokenizer, device="cpu")
        await owned.evaluate(turn.interaction, {})
        await owned.aclose()
        with pytest.raises(BatcherClosedError):
            await built[0].score("q", ["a step"])
        with pytest.raises(RuntimeError, match="closed"):
            await owned.evaluate(turn.interaction, {})
        backend = FakeBackend()
        borrowed = DistilledPRMScorer(engine=backend, policy_tokenizer=smol_tokenizer)
        await borrowed.aclose()
        return backend.closed

    assert asyncio.run(main()) == 0


def test_32_concurrent_sessions_get_the_same_rewards_as_sequential_scoring(smol_tokenizer, tiny_checkpoint):
    turns = []
    for i in range(32):  # different lengths, so batches need padding
        m = i % 5 + 1
        chunks = [f"Step 1: {i} + {i} = {2 * i}.\n\n", f"Step 2: times {m} gives {2 * i * m}." + " Done." * (i % 4)]
        turns.append(make_turn(smol_tokenizer, f"t{i}", chunks, question=f"What is ({i} + {i}) * {m}?"))

    async def main():
        scorer = DistilledPRMScorer(
            model=tiny_checkpoint, policy_tokenizer=smol_tokenizer, device="cpu", max_wait_ms=20
        )
        try:
            sequential = [await scorer.evaluate(t.interaction, {}) for t in turns]
            concurrent = await asyncio.gather(*(scorer.evaluate(t.interaction, {}) for t in turns))
        finally:
            await scorer.aclose()
        return sequential, concurrent

    sequential, concurrent = asyncio.run(main())
    for one, other in zip(sequential, concurrent, strict=True):
        torch.testing.assert_close(one, other, rtol=0, atol=1e-6)


def test_the_trajectory_scorer_scores_a_branch_in_one_call_and_maps_back_per_turn(smol_tokenizer, engine):
    first = make_turn(smol_tokenizer, "a", MARKER_CHUNKS[:2])
    second = make_turn(
        smol_tokenizer,
        "b",
        ["Step 3: 12 - 2 = 10.\n\n", "Step 4: So 10 is left."],
        parent=first.interaction,
        question="Now subtract 2.",
    )
    steps_a = split_steps("".join(MARKER_CHUNKS[:2]))
    steps_b = split_steps("Step 3: 12 - 2 = 10.\n\nStep 4: So 10 is left.")
    expected = engine.score([("What is 2 + 2, times 3?", steps_a + steps_b)])[0]

    class Counting(ScoreBatcher):
        calls = 0

        async def score(self, question, steps):
            Counting.calls += 1
            return await super().score(question, steps)

    async def main():
        batcher = Counting(engine)
        scorer = DistilledPRMTrajectoryScorer(engine=batcher, policy_tokenizer=smol_tokenizer)
        try:
            return await scorer.evaluate_trajectory([first.interaction, second.interaction], {})
        finally:
            await batcher.aclose()

    rewards = asyncio.run(main())
    assert Counting.calls == 1 and set(rewards) == {"a", "b"}
    torch.testing.assert_close(rewards["a"], torch.tensor([expected[c] for c in first.chunk_of_token]))
    torch.testing.assert_close(rewards["b"], torch.tensor([expected[2 + c] for c in second.chunk_of_token]))


# -- the trainer YAML end to end ----------------------------------------------------------------

SHAPING = {"negative_scale": 0.2, "zero_penalty": 0.4, "zero_eps": 1e-6}


def trainer_config(mode: str, tiny_checkpoint: Path, threshold: float) -> dict:
    data = yaml.safe_load(TRAINER_YAML.read_text())
    prm = data["rollout"]["agent"]["prm"]
    prm["advantage_shaping"]["mode"] = mode
    distilled, length_budget = prm["scorers"]
    assert distilled["path"] == "prm_distill.scorer.DistilledPRMScorer"
    assert length_budget["path"] == "prm_distill.scorer.LengthBudgetScorer"
    distilled["kwargs"].update(
        model=str(tiny_checkpoint),
        policy_tokenizer=str(tiny_checkpoint),
        device="cpu",
        for_shaping_mode=mode,
        threshold=threshold,
    )
    length_budget["kwargs"]["max_output_tokens"] = 20
    return data


def expected_token_rewards(mode: str, turn: Turn, probs: list[float], threshold: float) -> torch.Tensor:
    """By hand: 0.8 x the distilled value (spread or at each step's last token) + 0.2 x within-budget."""
    within = 1.0 if turn.interaction.model_response.output_len <= 20 else 0.0
    rewards = torch.full((len(turn.chunk_of_token),), 0.2 * within, dtype=torch.float64)
    for step, p in enumerate(probs):
        if mode == "process_weighted":
            rewards[[i for i, c in enumerate(turn.chunk_of_token) if c == step]] += 0.8 * p
        elif mode == "gvpo":
            rewards[turn.last_token_of(step)] += 0.8 * (-1.0 if p < threshold else 0.0)
        else:
            rewards[turn.last_token_of(step)] += 0.8 * (2 * p - 1)
    return rewards.float()


def shaped_by_hand(mode: str, a: float, p: float) -> float:
    if mode == "additive":
        return a + p
    if mode == "gvpo":
        if p >= 0:
            return a
        if a < -SHAPING["zero_eps"]:
            return a * (1 + SHAPING["negative_scale"])
        return -SHAPING["zero_penalty"] if abs(a) <= SHAPING["zero_eps"] else 0.0
    return a * p if a >= 0 else (p if p > 0 else a)


@pytest.mark.parametrize("mode", ["process_weighted", "gvpo", "additive"])
def test_trainer_yaml_scores_multi_turn_branches_and_shapes_advantages(mode, smol_tokenizer, tiny_checkpoint, engine):
    tok = smol_tokenizer
    # One conversation with a shared first turn and two follow-ups: two branches, three turns.
    root = make_turn(tok, "root", MARKER_CHUNKS, question="What is (2 + 2) * 3?")
    history = [*root.interaction.messages, *root.interaction.output_message_list]
    left = make_turn(
        tok,
        "left",
        ["Step 1: 12 / 4 = 3.\n\n", "Step 2: The quarter is 3."],
        parent=root.interaction,
        question="What is a quarter of it?",
        history=history,
    )
    right = make_turn(
        tok, "right", ["Step 1: 12 + 1 = 13."], parent=root.interaction, question="And plus one?", history=history
    )
    turns = {t.interaction.interaction_id: t for t in (root, left, right)}

    # Independent PRM scores: the shared splitter on each turn's text, the engine on (question, steps).
    probs = {}
    for turn_id, turn in turns.items():
        text = turn.interaction.output_message_list[0]["content"]
        steps = split_steps(text)
        assert len(steps) == max(turn.chunk_of_token) + 1  # one step per encoded chunk
        probs[turn_id] = engine.score([(turn.interaction.messages[-1]["content"], steps)])[0]
    ordered = sorted(p for ps in probs.values() for p in ps)
    threshold = (ordered[2] + ordered[3]) / 2  # three steps fail, the others pass

    async def main():
        runner = await PRMRunner.create(load_prm_config(trainer_config(mode, tiny_checkpoint, threshold)))
        try:
            return await score_branches([t.interaction for t in turns.values()], runner)
        finally:
            await runner.aclose()

    branches = asyncio.run(main())
    assert set(branches) == {"left", "right"}
    assert all(t.interaction.token_rewards is None for t in turns.values())  # inputs untouched
    scored = [branches["left"][0], branches["left"][1], branches["right"][1]]  # root, left, right
    for clone in scored:
        expected = expected_token_rewards(mode, turns[clone.interaction_id], probs[clone.interaction_id], threshold)
        torch.testing.assert_close(clone.token_rewards, expected, atol=1e-6, rtol=0)

    # The actor's view: one row per turn = prompt + output; advantages and the loss mask sit on the
    # position predicting each token; token rewards on the tokens themselves.
    outcome_advantage = {"root": 1.0, "left": -0.5, "right": 0.0}
    rows = [(clone, clone.model_response.input_tokens + clone.model_response.output_tokens) for clone in scored]
    width = max(len(ids) for _, ids in rows)
    advantages = torch.zeros(len(rows), width)
    token_rewards = torch.zeros(len(rows), width)
    loss_mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, (clone, ids) in enumerate(rows):
        n_prompt, n_out = len(clone.model_response.input_tokens), clone.model_response.output_len
        advantages[r] = outcome_advantage[clone.interaction_id]
        token_rewards[r, n_prompt : n_prompt + n_out] = clone.token_rewards
        loss_mask[r, n_prompt - 1 : n_prompt + n_out - 1] = True
    shaped = shape_advantages(advantages, token_rewards, loss_mask, mode=mode, **SHAPING)

    for r, (clone, _) in enumerate(rows):
        a = outcome_advantage[clone.interaction_id]
        n_prompt = len(clone.model_response.input_tokens)
        for j in range(width):
            if loss_mask[r, j]:
                p = float(clone.token_rewards[j + 1 - n_prompt])
                want = shaped_by_hand(mode, a, p)
                assert float(shaped[r, j]) == pytest.approx(want, abs=1e-6), (clone.interaction_id, j)
            else:
                assert float(shaped[r, j]) == a
    if mode == "gvpo":  # the failing steps really reached the advantages
        assert (shaped[loss_mask] != advantages[loss_mask]).any()
