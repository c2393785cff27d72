"""The outcome reward the verl checks configure as `reward.custom_reward_function` (verl's signature)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if solution_str.replace("<|im_end|>", "").strip().endswith(f"is {ground_truth}.") else 0.0
