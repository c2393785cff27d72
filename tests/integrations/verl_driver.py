"""Runs verl 0.9.1's OWN objects on the PRM reward manager; executed with .venv-verl's python by
test_verl_real.py (verl cannot share .venv: it pins transformers <5.11 and pulls ray). Prints one JSON object.

    python verl_driver.py CHECK '{"url": ..., "policy": <tokenizer dir>, ...}'

What is verl's own code here: hydra composing `verl/trainer/config/ppo_trainer.yaml` with command-line
overrides as `main_ppo` composes it, `load_extern_object`, both reward-manager registries,
`RewardLoopWorker` (its `_init_reward_fn` -> `load_reward_manager`, its `compute_score`),
`AgentLoopWorker._agent_loop_postprocess` -> `_compute_score` -> `_postprocess`, `AgentLoopOutput.as_dict()`,
`RewardLoopManager.compute_rm_score` -> `assemble_rm_scores`, `extract_reward`. STAND-INS, named as such:
`ActorHandleStandIn` (a Ray actor handle: `.method.remote(...)` calls the real worker's method in this
process instead of in a Ray actor), `ray.get` in `compute_rm_score` (awaits those calls), and the
`AgentLoopWorker` is built with `object.__new__` and the attributes its scoring path reads (no LLM server:
the response tokens are given, the one thing that stands in for the policy's generation).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types

QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."
BAD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 8.\n\nThe answer is 8."
OUTCOME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_outcome.py")


def compose(overrides: list[str]):
    """verl's config as `python -m verl.trainer.main_ppo <overrides>` composes it (hydra, ppo_trainer.yaml)."""
    import verl
    from hydra import compose as hydra_compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def overrides(args: dict, *extra: str) -> list[str]:
    import prm_distill.integrations.verl as module

    base = [
        f"actor_rollout_ref.model.path={args['policy']}",
        "actor_rollout_ref.rollout.prompt_length=64", "actor_rollout_ref.rollout.response_length=48",
        "reward.reward_manager.source=importlib", f"reward.reward_manager.module.path={args.get('module_path', module.__file__)}",
        "reward.reward_manager.name=PRMRewardLoopManager",
        f"+reward.reward_kwargs.prm_url={args['url']}",
        f"reward.custom_reward_function.path={OUTCOME}", "reward.custom_reward_function.name=compute_score",
    ]
    return base + list(extra)


class ActorHandleStandIn:
    """STAND-IN for a Ray actor handle: `handle.method.remote(*a)` returns the real method's coroutine."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        return types.SimpleNamespace(remote=getattr(self._target, name))


def agent_loop_worker(tokenizer, handles, prompt_length: int, response_length: int):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = object.__new__(AgentLoopWorker)  # no LLM server, no tools: the attributes its scoring path reads
    worker.reward_loop_worker_handles = handles
    worker.tokenizer, worker.processor, worker.mm_processor_kwargs = tokenizer, None, {}
    worker.rollout_config = types.SimpleNamespace(prompt_length=prompt_length, response_length=response_length)
    worker.distillation_enabled = False
    return worker


def sample(tokenizer, text: str):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    response_ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt_ids, response_ids


def row_kwargs():
    """One dataset row's non-tensor fields, as verl's RLHFDataset hands them to the agent loop."""
    return {"raw_prompt": [{"role": "user", "content": QUESTION}], "data_source": "gsm8k",
            "reward_model": {"ground_truth": "7", "style": "rule"}, "extra_info": {"question": QUESTION}}


def check_agent_loop(args: dict) -> dict:
    """The default route (no verl reward model): AgentLoopWorker._compute_score -> RewardLoopWorker.compute_score
    -> run_single; the answer goes to AgentLoopOutput.reward_score, then _postprocess builds rm_scores."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import extract_reward

    config = compose(overrides(args))
    reward_worker = RewardLoopWorker(config)  # verl's own loader builds our manager from the config
    manager = reward_worker.reward_manager
    worker = agent_loop_worker(reward_worker.input_tokenizer, [ActorHandleStandIn(reward_worker)], 64, 48)

    async def run():
        internals, as_dicts = [], []
        for text in (GOOD, BAD):
            prompt_ids, response_ids = sample(reward_worker.input_tokenizer, text)
            output = AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response_ids, response_mask=[1] * len(response_ids),
                                     metrics=AgentLoopMetrics())
            internals.append(await worker._agent_loop_postprocess(output, False, **row_kwargs()))
            as_dicts.append(output.as_dict()["rm_scores"].tolist())  # the crash: a list in reward_score
        return internals, as_dicts

    internals, as_dicts = asyncio.run(run())
    batch = worker._postprocess(internals)
    reward_tensor, extra = extract_reward(batch)
    return {
        "manager": f"{type(manager).__module__}.{type(manager).__qualname__}",
        "credit": manager.credit, "dense_rows": manager.dense_rows,
        "rm_scores": reward_tensor.tolist(), "as_dict_rm_scores": as_dicts,
        "response_lengths": [len(sample(reward_worker.input_tokenizer, t)[1]) for t in (GOOD, BAD)],
        "extra": {k: [float(x) for x in v] for k, v in extra.items()},
    }


def check_dense_route(args: dict) -> dict:
    """The colocated reward-model route (reward.reward_model.enable=True): RewardLoopManager.compute_rm_score
    -> compute_score_batch -> compute_score -> run_single (custom_reward_function set) -> assemble_rm_scores."""
    import verl.experimental.reward_loop.reward_loop as reward_loop
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager, RewardLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import extract_reward, resolve_reward_manager_cls

    config = compose(overrides(args, "reward.reward_model.enable=True", "reward.reward_model.model_path=" + args["policy"]))
    reward_worker = RewardLoopWorker(config)
    tokenizer = reward_worker.input_tokenizer
    worker = agent_loop_worker(tokenizer, None, 64, 48)  # no reward handles on this route: the trainer scores later

    async def run():
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

        out = []
        for text in (GOOD, BAD):
            prompt_ids, response_ids = sample(tokenizer, text)
            output = AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response_ids, response_mask=[1] * len(response_ids),
                                     metrics=AgentLoopMetrics())
            out.append(await worker._agent_loop_postprocess(output, False, **row_kwargs()))
        return out

    batch = worker._postprocess(asyncio.run(run()))
    for key, value in row_kwargs().items():  # ray_trainer unions the dataset's fields back into the batch
        import numpy as np

        column = np.empty(len(batch), dtype=object)
        column[:] = [value] * len(batch)
        batch.non_tensor_batch[key] = column
    manager = object.__new__(RewardLoopManager)  # no RM server launched: the one thing this check leaves out
    manager.config, manager.reward_model_manager = config, None
    manager.reward_manager_cls = resolve_reward_manager_cls(config)
    manager.reward_loop_workers = [ActorHandleStandIn(reward_worker)]
    real_ray = reward_loop.ray
    reward_loop.ray = types.SimpleNamespace(get=lambda refs: asyncio.run(_gather(refs)))  # STAND-IN for ray.get
    try:
        scored = manager.compute_rm_score(batch)
    finally:
        reward_loop.ray = real_ray
    reward_tensor, extra = extract_reward(batch.union(scored) if isinstance(scored, DataProto) else scored)
    return {"rm_scores": reward_tensor.tolist(), "dense_rows": reward_worker.reward_manager.dense_rows,
            "extra": {k: [float(x) for x in v] for k, v in extra.items()}}


async def _gather(coros):
    return await asyncio.gather(*coros)


def check_loading(args: dict) -> dict:
    """verl's file loader twice, after importing the package; then `source=register`."""
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls as loop_cls
    from verl.utils.import_utils import load_extern_object
    from verl.workers.reward_manager import get_reward_manager_cls

    import prm_distill.integrations.verl as module

    first = load_extern_object(module.__file__, "PRMRewardLoopManager")
    second = load_extern_object(module.__file__, "PRMRewardLoopManager")
    batch = load_extern_object(module.__file__, "PRMRewardManager")
    pkg = load_extern_object("pkg://prm_distill.integrations.verl", "PRMRewardLoopManager")
    return {"same_class": first is second is pkg is module.PRMRewardLoopManager is loop_cls("prm_distill"),
            "batch_same": batch is module.PRMRewardManager is get_reward_manager_cls("prm_distill")}


def check_fresh_register(args: dict) -> dict:
    """A fresh process as a Ray worker is: `import verl` only, then the registry lookup by name."""
    import verl  # noqa: F401
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    try:
        cls = get_reward_manager_cls("prm_distill")
    except ValueError as e:
        return {"found": None, "error": str(e)}
    return {"found": f"{cls.__module__}.{cls.__qualname__}"}


def check_engine(args: dict) -> dict:
    """The in-process engine under verl's (lower) transformers: the scorer's numbers must not move."""
    import transformers

    from prm_distill.integrations.common import PRMBackend

    backend = PRMBackend(model=args["checkpoint"], device="cpu")
    [good, bad] = backend.score_responses([(QUESTION, GOOD), (QUESTION, BAD)])
    return {"transformers": transformers.__version__, "good": good.scores, "bad": bad.scores}


if __name__ == "__main__":
    name, payload = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    print("RESULT " + json.dumps(globals()[f"check_{name}"](payload)))
