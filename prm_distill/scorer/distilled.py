"""The distilled PRM as a dense per-token process reward for the AReaL-compatible runner.

A turn's output tokens are decoded with the policy tokenizer, split into steps by the same
splitter the labels were made with, scored by the PRM in one pass (all steps of a turn, or of a
whole branch for the trajectory variant), and each step's score is placed back on the policy's
tokens of that step (see `alignment.py` for the exact token-to-step rule).

Options (YAML `kwargs`), with the defaults each shaping mode needs (`for_shaping_mode`):

| for_shaping_mode   | transform   | placement  | why                                                      |
|--------------------|-------------|------------|----------------------------------------------------------|
| process_weighted   | `prob`      | `spread`   | P in [0, 1] on every token weights that token's advantage |
| gvpo               | `fail_only` | `step_end` | a negative P marks the token that closes a failed step   |
| additive           | `signed`    | `step_end` | a +-1 bonus once per step, not once per token            |
| min_form           | `signed`    | `spread`   | every token holds its step's 2P-1, so the minimum over the rest of the row is over steps |

`for_shaping_mode` defaults to process_weighted; `PRMRunner.create` refuses a transform the
configured mode would misread (signed or fail_only under process_weighted, prob under gvpo).

- `transform`: `prob` = P(good); `signed` = 2 P - 1; `fail_only` = -1 where P < threshold, else 0.
- `placement`: `spread` puts a step's value on all its tokens; `step_end` on its last token only
  (the one that closes the step: the separator after it, or EOS for the last step).
- `threshold`: on the calibrated P(good). Default: the checkpoint's threshold (chosen on
  uncalibrated dev scores) passed through the same calibration, so its decisions do not change;
  else 0.5.
- Calibration: the checkpoint's current calibration (temperature, platt or isotonic, `prm_distill.calibration`),
  re-read when `recalibrate --adopt` changes it, so a running trainer picks it up without a restart
  (in-process: from the sidecar file; over HTTP: from the server). A malformed calibration is
  refused at start-up; `calibrate: false` uses raw p.
- `context`: `question` = the last user message of the turn's prompt; `conversation` = the turn's
  whole prompt (`interaction.messages`: the earlier turns, never the later ones the branch's
  `ctx["messages"]` also holds) rendered as "role: text" blocks, system messages left out.
- `empty_response`: a turn whose output decodes to no text (e.g. a tool call only) is rejected
  (`reject`, default) or gets a deliberate 0.0 (`zero`). Every other failure rejects: model
  unavailable, timeout (`timeout_s`), a malformed answer. Nothing fails into a silent zero.
- Observations per turn: `mean_step_score` (float, mean of calibrated P) and
  `first_failing_step_found` (boolean, count/rate: some step has P < threshold).
- `splitter`: `SplitConfig` fields; they must match the ones used at labeling (`split` is the old name).
- In-process only: `device`, `dtype`, `max_batch_tokens`, `max_wait_ms`, `max_queue` (see `ScoreBatcher`).

The model sits behind a backend seam: anything with `async score(question, steps) -> list[float]`
(optionally `sidecar` for threshold and calibration) passed as `engine` is used and left open
(borrowed); `model: <checkpoint dir>` builds an in-process `PRMEngine` behind a `ScoreBatcher`,
both owned and released by `aclose()`. The in-process engine needs no retries; a remote backend
brings its own.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from prm_distill import calibration
from prm_distill.checkpoint import Sidecar
from prm_distill.protocol import AsyncStepScorer
from prm_distill.scorer.alignment import assign_tokens_to_steps, decode_with_offsets
from prm_distill.scorer.contract import BaseScorer, BaseTrajectoryScorer, PRMMetricObservation, PRMScorerResult
from prm_distill.serve import PRMEngine
from prm_distill.serve.batcher import ScoreBatcher
from prm_distill.serve.prompts import last_user_text, message_text
from prm_distill.steps import split_step_spans, splitter_config

# for_shaping_mode -> (transform, placement)
SHAPING_DEFAULTS: dict[str, tuple[str, str]] = {
    "process_weighted": ("prob", "spread"),
    "gvpo": ("fail_only", "step_end"),
    "additive": ("signed", "step_end"),
    "min_form": ("signed", "spread"),
}
TRANSFORMS = ("prob", "signed", "fail_only")
PLACEMENTS = ("spread", "step_end")
CONTEXTS = ("question", "conversation")
EMPTY_RESPONSE_RULES = ("reject", "zero")


# The seam to the model: the package's one scoring protocol in its async form (batcher, HTTP
# client, vLLM client); `sidecar` and `calibration()` give the threshold and calibration.
ScoringBackend = AsyncStepScorer


@dataclass(frozen=True)
class _PreparedTurn:
    """One turn's steps and, for every output token, the index of its step."""

    steps: list[str]
    token_steps: list[int]


def _choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {'|'.join(allowed)}, got {value!r}")
    return value


def _load_tokenizer(policy_tokenizer: Any) -> Any:
    if policy_tokenizer is None:
        raise ValueError("policy_tokenizer is required: the tokenizer (path or object) of the policy being scored")
    if isinstance(policy_tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(os.fspath(policy_tokenizer))
    if not callable(getattr(policy_tokenizer, "decode", None)):
        raise TypeError(f"policy_tokenizer must be a path or a tokenizer with decode(), got {policy_tokenizer!r}")
    return policy_tokenizer


class _DistilledPRM:
    """Construction, alignment, calibration and placement shared by the turn and branch scorers."""

    name: str

    def __init__(
        self,
        *,
        model: str | os.PathLike[str] | None = None,
        engine: ScoringBackend | None = None,
        policy_tokenizer: Any = None,
        context: str = "question",
        for_shaping_mode: str = "process_weighted",
        transform: str | None = None,
        placement: str | None = None,
        threshold: float | None = None,
        calibrate: bool = True,
        empty_response: str = "reject",
        timeout_s: float = 60.0,
        splitter: Mapping[str, Any] | None = None,
        split: Mapping[str, Any] | None = None,
        device: str = "auto",
        dtype: str | None = None,
        max_batch_tokens: int = 16384,
        max_wait_ms: float = 5.0,
        max_queue: int = 4096,
        weight: float = 1.0,
        enabled: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(weight=weight, enabled=enabled, **kwargs)  # type: ignore[call-arg]
        # Options are checked before the model loads, so a typo costs no model load.
        if (model is None) == (engine is None):
            raise ValueError("give exactly one of model (a checkpoint folder) or engine (a scoring backend)")
        if engine is not None and not inspect.iscoroutinefunction(getattr(engine, "score", None)):
            raise TypeError(
                f"engine must have an async score(question, steps) method, got {engine!r} "
                "(wrap an in-process PRMEngine as ScoreBatcher(engine))"
            )
        self.context = _choice("context", context, CONTEXTS)
        default_transform, default_placement = SHAPING_DEFAULTS[
            _choice("for_shaping_mode", for_shaping_mode, tuple(SHAPING_DEFAULTS))
        ]
        self.transform = _choice("transform", transform or default_transform, TRANSFORMS)
        self.placement = _choice("placement", placement or default_placement, PLACEMENTS)
        self.empty_response = _choice("empty_response", empty_response, EMPTY_RESPONSE_RULES)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
            raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        if threshold is not None and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
            raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold!r}")
        self.splitter = splitter_config(splitter, split)
        self.tokenizer = _load_tokenizer(policy_tokenizer)

        self._closed = False
        self._owned: ScoreBatcher | None = None
        if model is not None:
            prm = PRMEngine.from_checkpoint(model, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens)
            self._owned = ScoreBatcher(
                prm, max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms, max_queue=max_queue
            )
            self._backend: ScoringBackend = self._owned
            sidecar: Sidecar | None = prm.sidecar
            source = getattr(prm, "calibration", None)
        else:
            self._backend = engine  # type: ignore[assignment]
            sidecar = getattr(engine, "sidecar", None)
            source = getattr(engine, "calibration", None)
        fixed = sidecar.calibration if sidecar else None
        self._calibration_source: Callable[[], Mapping[str, Any] | None] = (
            (lambda: None) if not calibrate else source if callable(source) else (lambda: fixed)
        )
        calibration.validate(self._calibration_source(), f"{self.name}: checkpoint calibration")
        self._given_threshold = None if threshold is None else float(threshold)
        self._checkpoint_threshold = sidecar.threshold if sidecar else None

    @property
    def threshold(self) -> float:
        """The failing-step threshold on calibrated P(good), under the calibration in force now."""
        return self._threshold_under(self._calibration_source())

    def _threshold_under(self, cal: Mapping[str, Any] | None) -> float:
        # The checkpoint's threshold was chosen on raw dev scores: mapped like the scores (the one rule).
        if self._given_threshold is not None:
            return self._given_threshold
        return calibration.decision_threshold(self._checkpoint_threshold, cal)

    def validate_prm_config(self, config: Any, *, training_enabled: bool) -> None:
        """Refuse a transform whose values the configured shaping mode would misread."""
        if not training_enabled:
            return
        mode = config.advantage_shaping.mode
        if mode == "process_weighted" and self.transform != "prob":
            problem = "process_weighted needs rewards in [0, 1]"
        elif mode == "gvpo" and self.transform == "prob":
            problem = "gvpo acts only on negative rewards, which prob never gives"
        elif mode == "min_form" and self.placement != "spread":
            problem = "min_form takes a minimum over tokens, so the zeros between step ends would count as rewards"
        else:
            return
        raise ValueError(
            f"{self.name}: transform {self.transform!r} does not fit advantage_shaping.mode {mode!r} ({problem}); "
            f"set kwargs.for_shaping_mode: {mode} (and no transform of its own)"
        )

    async def aclose(self) -> None:
        """Release the owned batcher and engine; a borrowed backend is left to its owner."""
        self._closed = True
        owned, self._owned = self._owned, None
        self._backend = None  # type: ignore[assignment]
        if owned is not None:
            await owned.aclose()

    # -- per request (all state stays in the calling coroutine) --------------------------------

    def _question(self, interaction: Any) -> str:
        messages = list(interaction.messages or [])
        if self.context == "question":
            text = last_user_text(messages)
            if text is not None:
                return text
            raise ValueError(f"interaction {interaction.interaction_id!r} has no user message to use as the question")
        blocks = [
            f"{message.get('role')}: {text}"
            for message in messages
            if message.get("role") != "system" and (text := message_text(message).strip())
        ]
        if not blocks:
            raise ValueError(f"interaction {interaction.interaction_id!r} has no conversation to use as the question")
        return "\n\n".join(blocks)

    def _prepare(self, interaction: Any) -> _PreparedTurn | None:
        """Steps and token-to-step map of a turn; None when its output has no text."""
        response = interaction.model_response
        if response is None:
            raise ValueError(f"interaction {interaction.interaction_id!r} has no model_response")
        text, ends = decode_with_offsets(self.tokenizer, response.output_tokens)
        if not text.strip():
            if self.empty_response == "reject":
                raise ValueError(
                    f"interaction {interaction.interaction_id!r}: the response has no text to score "
                    "(set empty_response: zero to give such turns a deliberate 0.0)"
                )
            return None
        spans = split_step_spans(text, self.splitter)
        return _PreparedTurn([text[start:end] for start, end in spans], assign_tokens_to_steps(ends, spans))

    async def _prepare_all(self, interactions: Sequence[Any]) -> list[_PreparedTurn | None]:
        # Decoding is CPU work proportional to the response: keep it off the event loop.
        return await asyncio.to_thread(lambda: [self._prepare(interaction) for interaction in interactions])

    async def _score_steps(self, question: str, steps: list[str]) -> tuple[torch.Tensor, float]:
        """Calibrated P(good) per step (float64) and the threshold under the same calibration, or
        an error: never a made-up score."""
        if self._closed:
            raise RuntimeError(f"{self.name} is closed")
        try:
            scores = await asyncio.wait_for(self._backend.score(question, steps), self.timeout_s)
        except TimeoutError:
            raise TimeoutError(f"{self.name}: the PRM did not answer within timeout_s={self.timeout_s}") from None
        probs = torch.tensor(list(scores), dtype=torch.float64)
        if probs.shape != (len(steps),) or not ((probs >= 0) & (probs <= 1)).all():
            raise ValueError(f"{self.name}: the PRM returned {list(scores)!r} for {len(steps)} steps")
        cal = self._calibration_source()
        return torch.from_numpy(calibration.apply(probs.numpy(), cal)), self._threshold_under(cal)

    def _place(self, turn: _PreparedTurn, probs: torch.Tensor, threshold: float) -> torch.Tensor:
        """Per-token float32 rewards from per-step probabilities."""
        if self.transform == "prob":
            values = probs
        elif self.transform == "signed":
            values = 2.0 * probs - 1.0
        else:
            values = torch.where(probs < threshold, -1.0, 0.0).to(torch.float64)
        token_steps = torch.tensor(turn.token_steps, dtype=torch.long)
        if self.placement == "spread":
            return values[token_steps].to(torch.float32)
        rewards = torch.zeros(len(turn.token_steps), dtype=torch.float32)
        last_token = {step: i for i, step in enumerate(turn.token_steps)}
        for step, i in last_token.items():
            rewards[i] = float(values[step])
        return rewards

    def _observations(
        self, interaction: Any, probs: torch.Tensor, threshold: float
    ) -> tuple[PRMMetricObservation, ...]:
        target = interaction.interaction_id
        return (
            PRMMetricObservation(
                metric_id="mean_step_score", scope="turn", target_id=target, value=float(probs.mean()),
                value_type="float", aggregations=("mean",),
            ),
            PRMMetricObservation(
                metric_id="first_failing_step_found", scope="turn", target_id=target,
                value=bool((probs < threshold).any()), value_type="boolean", aggregations=("count", "rate"),
            ),
        )


class DistilledPRMScorer(_DistilledPRM, BaseScorer):
    """Dense per-token process reward of one turn from the distilled PRM (see the module docstring)."""

    name = "distilled_prm"

    async def evaluate(self, interaction: Any, ctx: Mapping[str, Any]) -> float | torch.Tensor:
        return (await self.evaluate_result(interaction, ctx)).reward

    async def evaluate_result(self, interaction: Any, ctx: Mapping[str, Any]) -> PRMScorerResult:
        """Reward and observations from one PRM call, so nothing is kept between calls."""
        [turn] = await self._prepare_all([interaction])
        if turn is None:
            return PRMScorerResult(reward=0.0)
        probs, threshold = await self._score_steps(self._question(interaction), turn.steps)
        return PRMScorerResult(reward=self._place(turn, probs, threshold),
                               observations=self._observations(interaction, probs, threshold))


class DistilledPRMTrajectoryScorer(_DistilledPRM, BaseTrajectoryScorer):
    """One PRM pass over a whole branch: every assistant turn's steps, in order, after one question.

    Step k of a later turn is judged with all earlier turns' steps as context. The question comes
    from the first turn's prompt (per `context`); messages between turns (tool results, follow-up
    user messages) have no place in the PRM's (question, steps) input and are not seen: use
    `DistilledPRMScorer` with `context: conversation` when they matter. No observations.
    """

    name = "distilled_prm_trajectory"

    async def evaluate_trajectory(
        self, interactions: Sequence[Any], ctx: Mapping[str, Any]
    ) -> dict[str, float | torch.Tensor]:
        turns = list(interactions)
        if not turns:
            return {}
        parents = [id(turn.parent) for turn in turns if turn.parent is not None]
        if len(set(parents)) != len(parents):
            raise ValueError(f"{self.name} scores one branch at a time; these turns fork")
        prepared = await self._prepare_all(turns)
        steps = [step for turn in prepared if turn is not None for step in turn.steps]
        probs, threshold = await self._score_steps(self._question(turns[0]), steps) if steps else (None, 0.5)
        rewards: dict[str, float | torch.Tensor] = {}
        offset = 0
        for interaction, turn in zip(turns, prepared, strict=True):
            if turn is None:
                rewards[interaction.interaction_id] = 0.0
                continue
            assert probs is not None
            rewards[interaction.interaction_id] = self._place(turn, probs[offset : offset + len(turn.steps)], threshold)
            offset += len(turn.steps)
        return rewards
