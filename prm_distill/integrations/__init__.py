"""Adapters that put the distilled PRM into the RL trainers people run: thin, one module per trainer.

- `prm_distill.integrations.trl`: `PRMReward` / `AsyncPRMReward`, GRPOTrainer `reward_funcs`.
- `prm_distill.integrations.verl`: `PRMRewardManager`, a verl reward manager (registered as `prm_distill`).
- `prm_distill.integrations.openrlhf`: `reward_func` for OpenRLHF's Python reward path; its remote
  path is `prm-distill serve`'s `POST /get_reward`.

Each module imports its trainer lazily (or not at all), so importing one never requires the others.
See docs/integrations.md.
"""
