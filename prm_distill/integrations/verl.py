"""The distilled PRM as a verl reward manager: dense step rewards on the policy's own response tokens.

verl calls a reward manager with a `DataProto` batch (`prompts` left-padded, `responses`
right-padded, `attention_mask` over both; `non_tensor_batch` with `data_source`, `reward_model`
(`ground_truth`) and `extra_info`) and takes the `[batch, response_len]` tensor it returns as
`token_level_scores`. `PRMRewardManager`, per response:

1. decodes the response tokens with the policy tokenizer, keeping each token's character offsets,
   splits the text with the package's one splitter and scores the steps (in-process engine with
   `prm_model=`, or `prm-distill serve` with `prm_url=`);
2. maps every step onto the tokens that produced it (`prm_distill.scorer.alignment`: the rule the
   AReaL scorer uses) and writes the step's process reward on the step's last token;
3. adds verl's outcome reward (`compute_score(data_source, solution_str, ground_truth, extra_info)`)
   times `outcome_weight` at the last response token, as verl's own managers do.

`credit` says what the process rewards are. `min_form` (default): the step rewards are rewritten so
that the sum from any step to the end is the *minimum* of the remaining steps' values (PURE's
min-form credit, `prm_distill.scorer.min_form_step_rewards`): estimators that sum a response's
rewards into one scalar (GRPO, RLOO, REINFORCE++, ReMax) then see its weakest step, not a total
that more high-scoring steps can inflate, and GAE with gamma = lambda = 1 sees the min-form return
at every step. `dense`: each step's value as it is (sum-form; only for GAE, where it stays dense).
`process_value` is the per-step value: `signed` = 2 P - 1 (default: a bad step is a penalty) or
`prob` = P. A response that cannot be split or scored keeps the outcome reward alone, counted
in `reward_extra_info["prm_fallback"]`; an unreachable server raises, naming its URL.

Two verl interfaces, both registered as `prm_distill` when verl is importable (importing this
module without verl works and registers nothing):
- `PRMRewardManager`: the batch interface of `verl.workers.reward_manager` (`__call__(data,
  return_dict)` -> `[batch, response_len]`); PRM options come as constructor keywords
  (`reward_model.reward_kwargs`).
- `PRMRewardLoopManager`: verl's reward loop (`verl.experimental.reward_loop`, the default path
  of verl >= 0.9): `async run_single(data)` per sample, `assemble_rm_scores` writes the dense rows.
  Select it with `reward.reward_manager.source=importlib`, `reward.reward_manager.module.path=<this
  file>`, `reward.reward_manager.name=PRMRewardLoopManager` (or `name=prm_distill` with
  `source=register` once this module is imported); PRM options from `+reward.prm_distill.<option>=`
  (the same names as `PRMRewardManager`'s keywords) or `PRM_DISTILL_MODEL` / `PRM_DISTILL_URL`.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from prm_distill.integrations.common import FallbackCounter, PRMBackend, ScoredSteps, UnscorableError, question_of
from prm_distill.scorer.alignment import AlignmentError, assign_tokens_to_steps, decode_with_offsets
from prm_distill.scorer.shaping import check_min_form_temperature, min_form_step_rewards

__all__ = ["VERL_AVAILABLE", "PRMRewardLoopManager", "PRMRewardManager", "process_token_rewards"]

log = logging.getLogger("prm_distill.integrations.verl")
CREDITS = ("min_form", "dense")
PROCESS_VALUES = ("signed", "prob")


def _verl_base() -> tuple[Any, Any, Any, Any]:
    """verl's two reward-manager bases and registries, each (object, None) when it does not import."""
    try:
        import verl  # noqa: F401
    except ImportError:
        return object, None, object, None
    try:
        from verl.workers.reward_manager import register
        from verl.workers.reward_manager.abstract import AbstractRewardManager
    except Exception as error:  # noqa: BLE001 - a broken verl install must not break this import
        warnings.warn(f"verl is installed but its reward managers failed to import ({type(error).__name__}: {error}); "
                      "PRMRewardManager is not registered with it", RuntimeWarning, stacklevel=2)
        AbstractRewardManager, register = object, None
    try:
        from verl.experimental.reward_loop.reward_manager import register as loop_register
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    except ImportError:  # an older verl, before the reward loop
        RewardManagerBase, loop_register = object, None
    except Exception as error:  # noqa: BLE001
        warnings.warn(f"verl's reward loop failed to import ({type(error).__name__}: {error}); "
                      "PRMRewardLoopManager is not registered with it", RuntimeWarning, stacklevel=2)
        RewardManagerBase, loop_register = object, None
    return AbstractRewardManager, register, RewardManagerBase, loop_register


_verl = _verl_base()
_Base: Any = _verl[0]
_register: Any = _verl[1]
_LoopBase: Any = _verl[2]
_loop_register: Any = _verl[3]
VERL_AVAILABLE = _register is not None or _loop_register is not None


def process_token_rewards(
    scored: ScoredSteps, token_steps: Sequence[int], *, credit: str = "min_form", process_value: str = "signed",
    temperature: float | None = None,
) -> torch.Tensor:
    """`[len(token_steps)]` float32: each step's (credit-assigned) reward on the step's last token, zeros elsewhere."""
    probs = torch.tensor(scored.scores, dtype=torch.float64)
    values = 2.0 * probs - 1.0 if process_value == "signed" else probs
    per_step = min_form_step_rewards(values, temperature) if credit == "min_form" else values
    rewards = torch.zeros(len(token_steps), dtype=torch.float32)
    last = {step: i for i, step in enumerate(token_steps)}
    for step, i in last.items():
        rewards[i] = float(per_step[step])
    return rewards


class _PRMCore:
    """What both verl interfaces share: options, the PRM backend, and one sample's dense rewards."""

    def _setup(
        self,
        tokenizer: Any,
        compute_score: Callable[..., Any] | None,
        reward_fn_key: str = "data_source",
        *,
        prm_model: str | None = None,
        prm_url: str | None = None,
        process_weight: float = 1.0,
        outcome_weight: float = 1.0,
        credit: str = "min_form",
        process_value: str = "signed",
        min_form_temperature: float | None = None,
        question_key: str | None = None,
        prm_device: str = "auto",
        prm_backend: PRMBackend | None = None,
    ) -> None:
        if credit not in CREDITS:
            raise ValueError(f"credit must be one of {'|'.join(CREDITS)}, got {credit!r}")
        if process_value not in PROCESS_VALUES:
            raise ValueError(f"process_value must be one of {'|'.join(PROCESS_VALUES)}, got {process_value!r}")
        check_min_form_temperature(min_form_temperature)
        for name, value in (("process_weight", process_weight), ("outcome_weight", outcome_weight)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self.tokenizer = tokenizer
        self.compute_score = compute_score or _default_compute_score()
        self.reward_fn_key = reward_fn_key
        self.process_weight, self.outcome_weight = float(process_weight), float(outcome_weight)
        self.credit, self.process_value, self.temperature = credit, process_value, min_form_temperature
        self.question_key = question_key
        if prm_backend is None and prm_model is None and prm_url is None:
            prm_model, prm_url = os.environ.get("PRM_DISTILL_MODEL"), os.environ.get("PRM_DISTILL_URL")
        self.prm = prm_backend if prm_backend is not None else PRMBackend(model=prm_model, url=prm_url, device=prm_device)
        self.fallbacks = FallbackCounter()

    def _sample(self, data: Any, i: int) -> tuple[list[int], str]:
        """Row i's valid response ids and its decoded prompt (special tokens kept, for the chat markers)."""
        prompts, responses = data.batch["prompts"], data.batch["responses"]
        mask = data.batch["attention_mask"]
        prompt_len = prompts.shape[-1]
        n_prompt = int(mask[i, :prompt_len].sum())
        n_response = int(mask[i, prompt_len:].sum())
        prompt_ids = prompts[i, prompt_len - n_prompt :].tolist()
        return responses[i, :n_response].tolist(), self.tokenizer.decode(prompt_ids, skip_special_tokens=False)

    def _question(self, data: Any, i: int, prompt_text: str) -> str:
        if self.question_key is not None:
            extra = _non_tensor(data, "extra_info", i) or {}
            if self.question_key not in extra:
                raise UnscorableError("no_question", f"extra_info has no {self.question_key!r}")
            return str(extra[self.question_key])
        return question_of(prompt_text)

    def _outcome_kwargs(self, data: Any, i: int, solution: str) -> dict[str, Any]:
        reward_model = _non_tensor(data, "reward_model", i) or {}
        return dict(
            data_source=_non_tensor(data, self.reward_fn_key, i),
            solution_str=solution,
            ground_truth=reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None,
            extra_info=_non_tensor(data, "extra_info", i),
        )

    @staticmethod
    def _outcome_value(result: Any) -> tuple[float, Mapping[str, Any]]:
        if isinstance(result, Mapping):
            key = "score" if "score" in result else "reward"
            return float(result[key]), result
        return float(result), {}

    def _dense(
        self, n_tokens: int, ends: list[int], result: ScoredSteps | UnscorableError, outcome: float
    ) -> tuple[torch.Tensor, dict[str, float], str | None]:
        """One response's `[n_tokens]` rewards (outcome at the last token plus the PRM's), its PRM
        logs, and the fallback reason (None when the PRM scored it)."""
        row = torch.zeros(n_tokens, dtype=torch.float32)
        if n_tokens:
            row[n_tokens - 1] = self.outcome_weight * outcome
        if not isinstance(result, UnscorableError):
            try:
                token_steps = assign_tokens_to_steps(ends, result.spans)
                row += self.process_weight * process_token_rewards(
                    result, token_steps, credit=self.credit, process_value=self.process_value, temperature=self.temperature)
            except AlignmentError as e:
                result = UnscorableError("alignment", str(e))
        if isinstance(result, UnscorableError):
            # 0.0, not NaN: verl averages each key over the batch, and a NaN would hide every scored row.
            # The mean over scored rows is mean(prm_min_step_score) / (1 - mean(prm_fallback)).
            return row, {"prm_min_step_score": 0.0, "prm_fallback": 1.0, "prm_num_steps": 0.0}, result.reason
        return row, {"prm_min_step_score": min(result.scores), "prm_fallback": 0.0, "prm_num_steps": float(len(result.scores))}, None


class PRMRewardManager(_PRMCore, _Base):
    """verl's batch reward-manager interface: outcome at the last token plus the PRM's step rewards."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        **options: Any,
    ) -> None:
        """verl passes `tokenizer`, `num_examine`, `compute_score`, `reward_fn_key` and the entries of
        `reward_model.reward_kwargs`; the PRM options (`prm_model` or `prm_url`, `credit`,
        `process_value`, `min_form_temperature`, `process_weight`, `outcome_weight`, `question_key`:
        an `extra_info` key holding the bare question, `prm_device`) are among the latter."""
        self.num_examine = num_examine
        self._examined = 0
        self._setup(tokenizer, compute_score, reward_fn_key, **options)

    def __call__(self, data: Any, return_dict: bool = False) -> Any:
        if "rm_scores" in data.batch.keys():  # a reward model already scored the batch (verl's convention)
            return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]
        responses = data.batch["responses"]
        reward_tensor = torch.zeros(responses.shape, dtype=torch.float32)
        extra: dict[str, list[Any]] = defaultdict(list)
        samples: list[tuple[int, list[int], float, str]] = []
        pending: list[tuple[str | UnscorableError, str]] = []
        for i in range(len(data)):
            response_ids, prompt_text = self._sample(data, i)
            text, ends = decode_with_offsets(self.tokenizer, response_ids)
            outcome, details = self._outcome_value(self.compute_score(**self._outcome_kwargs(data, i, text)))
            extra["score"].append(outcome)
            for key, value in details.items():
                if key != "score":
                    extra[key].append(value)
            samples.append((len(response_ids), ends, outcome, text))
            try:
                pending.append((self._question(data, i, prompt_text), text))
            except UnscorableError as e:
                pending.append((e, text))
        ready = [(q, t) for q, t in pending if not isinstance(q, UnscorableError)]
        scored = iter(self.prm.score_responses(ready))
        reasons = []
        for i, ((question, _), (n, ends, outcome, text)) in enumerate(zip(pending, samples, strict=True)):
            result = question if isinstance(question, UnscorableError) else next(scored)
            row, logs, reason = self._dense(n, ends, result, outcome)
            reward_tensor[i, :n] = row
            for key, value in logs.items():
                extra[key].append(value)
            if reason is not None:
                log.warning("PRM fallback for sample %d (%s): outcome reward alone", i, reason)
                reasons.append(reason)
            if self._examined < self.num_examine:
                self._examined += 1
                print("[response]", text, "[score]", outcome, "[prm_min_step_score]", logs["prm_min_step_score"])
        self.fallbacks.count(scored=len(pending) - len(reasons), reasons=reasons)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": dict(extra)}
        return reward_tensor


class PRMRewardLoopManager(_PRMCore, _LoopBase):
    """verl's reward-loop interface (verl >= 0.9): one sample per `run_single`, dense rows assembled per batch."""

    def __init__(self, config: Any = None, tokenizer: Any = None, compute_score: Callable[..., Any] | None = None,
                 **kwargs: Any) -> None:
        options = dict(_config_section(config))
        options.update({k: v for k, v in kwargs.items() if k not in ("reward_router_address", "reward_model_tokenizer")})
        dense_rows = options.pop("dense_rows", None)
        if _LoopBase is not object:
            _LoopBase.__init__(self, config, tokenizer, compute_score)
        self._setup(tokenizer, compute_score, options.pop("reward_fn_key", "data_source"), **options)
        self.dense_rows = _dense_route(config) if dense_rows is None else bool(dense_rows)
        if options.get("prm_backend") is None and self.prm.url is None:
            workers = _get(_get(config, "reward"), "num_workers")
            log.warning("prm_distill: this reward-loop worker loads its own PRM copy (one per reward.num_workers=%s); "
                        "one `prm-distill serve` shared through prm_url= loads it once", workers)

    async def run_single(self, data: Any) -> dict[str, Any]:
        """`{"reward_score": ..., "reward_extra_info": {...}}` of the batch's last row. `reward_score` is one
        float (the sum of the row: `outcome_weight * outcome + process_weight * sum of the step rewards`, i.e.
        the weakest step's value plus the outcome under `min_form`) on verl's agent-loop route, and the
        dense row (one reward per valid response token) on the colocated reward-model route
        (`reward.reward_model.enable=True`, `enable_resource_pool=False`), whose `compute_rm_score` hands it
        to `assemble_rm_scores`; `dense_rows=` in the options forces either."""
        i = len(data) - 1
        response_ids, prompt_text = self._sample(data, i)
        text, ends = decode_with_offsets(self.tokenizer, response_ids)
        outcome_call = self.compute_score(**self._outcome_kwargs(data, i, text))
        outcome, details = self._outcome_value(await outcome_call if inspect.isawaitable(outcome_call) else outcome_call)
        try:
            [result] = await self.prm.ascore_responses([(self._question(data, i, prompt_text), text)])
        except UnscorableError as e:
            result = e
        row, logs, reason = self._dense(len(response_ids), ends, result, outcome)
        self.fallbacks.count(scored=int(reason is None), reasons=[reason] if reason else [])
        if reason is not None:
            log.warning("PRM fallback (%s): outcome reward alone", reason)
        info = {"score": outcome, **{k: v for k, v in details.items() if k != "score"}, **logs}
        # verl's agent loop takes one float per sample (AgentLoopOutput.reward_score) and puts it at the
        # last token; only RewardLoopManager.compute_rm_score (the colocated reward-model route) passes
        # run_single's answer to assemble_rm_scores, which takes the dense row.
        score: float | list[float] = row.tolist() if self.dense_rows else float(row.sum())
        return {"reward_score": score, "reward_extra_info": info}

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: list[Any]) -> torch.Tensor:
        """The `[batch, response_len]` rows: each sample's dense list from position 0 (a scalar goes to its last token)."""
        prompt_length = data.batch["prompts"].size(1)
        lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=1).tolist()
        rm_scores = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        for i, (score, n) in enumerate(zip(scores, lengths, strict=True)):
            if isinstance(score, (list, tuple, torch.Tensor)):
                values = torch.as_tensor(score, dtype=torch.float32)
                rm_scores[i, : values.numel()] = values
            elif n:
                rm_scores[i, int(n) - 1] = float(score)
        return rm_scores


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    if hasattr(node, "get"):
        try:
            return node.get(key)
        except Exception:  # noqa: BLE001 - a structured config without the key
            return None
    return getattr(node, key, None)


def _to_dict(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            container: Any = OmegaConf.to_container(section, resolve=True)
            return dict(container)
    except ImportError:
        pass
    return dict(section)


def _config_section(config: Any) -> Mapping[str, Any]:
    """The PRM options in verl's config: `config.reward.reward_kwargs` (where verl puts a reward manager's
    keywords: `+reward.reward_kwargs.<option>=...`, and where `migrate_legacy_reward_impl` moves
    `reward_model.reward_kwargs`), then `config.reward.prm_distill` (this adapter's earlier section) over it."""
    reward = _get(config, "reward")
    options = _to_dict(_get(reward, "reward_kwargs"))
    options.update(_to_dict(_get(reward, "prm_distill")))
    return options


def _dense_route(config: Any) -> bool:
    """True where verl passes run_single's answer to `assemble_rm_scores` (RewardLoopManager.compute_rm_score:
    `reward.reward_model.enable=True` without its own resource pool); False on the agent-loop route."""
    reward_model = _get(_get(config, "reward"), "reward_model")
    return bool(_get(reward_model, "enable")) and not bool(_get(reward_model, "enable_resource_pool"))


def _non_tensor(data: Any, key: str, i: int) -> Any:
    values = getattr(data, "non_tensor_batch", {}) or {}
    return values[key][i] if key in values else None


def _default_compute_score() -> Callable[..., Any]:
    try:
        from verl.utils.reward_score import default_compute_score
    except ImportError:
        def missing(**_: Any) -> float:
            raise RuntimeError("no compute_score given and verl's default_compute_score is not importable")
        return missing
    found: Callable[..., Any] = default_compute_score
    return found


CANONICAL_MODULE = "prm_distill.integrations.verl"


def _register_once(register: Any, lookup: Callable[[str], Any], name: str, cls: type) -> None:
    """`register(name)(cls)` unless `name` already holds this class (verl's registries refuse a second one)."""
    try:
        current = lookup(name)
    except (ValueError, KeyError):
        current = None
    if current is cls or (current is not None and (current.__module__, current.__qualname__) == (cls.__module__, cls.__qualname__)):
        return
    register(name)(cls)


if __name__ != CANONICAL_MODULE:
    # Loaded from this file under another name (verl's `load_extern_object` executes the file afresh each
    # time, as `custom_module_<hash>`): hand out the package's own classes, registered once, so that loading
    # the file twice, or importing the package and loading the file, gives one class and no "already registered".
    import importlib

    _canonical = importlib.import_module(CANONICAL_MODULE)
    PRMRewardManager = _canonical.PRMRewardManager  # type: ignore[misc]
    PRMRewardLoopManager = _canonical.PRMRewardLoopManager  # type: ignore[misc]
else:
    if _register is not None:
        from verl.workers.reward_manager import get_reward_manager_cls as _lookup

        _register_once(_register, _lookup, "prm_distill", PRMRewardManager)
    if _loop_register is not None:
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls as _loop_lookup

        _register_once(_loop_register, _loop_lookup, "prm_distill", PRMRewardLoopManager)
