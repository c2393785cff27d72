"""The AReaL-compatible process-reward scorer contract: scorers, runner, metrics and shaping.

With an AReaL that has `areal.reward.prm` installed, the scorer base classes and result types are
AReaL's own (see `contract.py`), so scorers defined here run unchanged inside AReaL's runner.
"""

from prm_distill.scorer.branches import clone_branches, score_branches
from prm_distill.scorer.config import (
    PRMAdvantageShapingConfig,
    PRMConfig,
    PRMConfigError,
    PRMScorerConfig,
    load_prm_config,
)
from prm_distill.scorer.contract import (
    USING_AREAL,
    BaseScorer,
    BaseTrajectoryScorer,
    PRMMetricObservation,
    PRMScorerResult,
    PRMTurnResult,
)
from prm_distill.scorer.distilled import DistilledPRMScorer, DistilledPRMTrajectoryScorer
from prm_distill.scorer.export import PRMExportStats, score_prm_branches
from prm_distill.scorer.filters import (
    filter_mixed_or_penalized_all_wrong,
    filter_mixed_or_penalized_all_wrong_mask_no_eos,
    filter_process_consistent,
    process_consistency_mask,
)
from prm_distill.scorer.grpo import (
    aggregate_step_scores,
    combine_step_rewards,
    group_normalize,
    prm_group_advantages,
)
from prm_distill.scorer.length_budget import LengthBudgetScorer
from prm_distill.scorer.metrics import PRMMetrics, process_metrics, record_prm_results
from prm_distill.scorer.runner import PRMRejectedError, PRMRunner
from prm_distill.scorer.shaping import (
    check_shaping_mode,
    fold_turn_rewards,
    min_form_returns,
    min_form_step_rewards,
    no_eos_rows,
    shape_advantages,
    shape_advantages_prerolled,
)
from prm_distill.scorer.tree import order_parents_first
from prm_distill.scorer.types import Interaction, ModelResponse

__all__ = [
    "USING_AREAL",
    "BaseScorer",
    "BaseTrajectoryScorer",
    "DistilledPRMScorer",
    "DistilledPRMTrajectoryScorer",
    "Interaction",
    "LengthBudgetScorer",
    "ModelResponse",
    "PRMAdvantageShapingConfig",
    "PRMConfig",
    "PRMConfigError",
    "PRMExportStats",
    "PRMMetricObservation",
    "PRMMetrics",
    "PRMRejectedError",
    "PRMRunner",
    "PRMScorerConfig",
    "PRMScorerResult",
    "PRMTurnResult",
    "aggregate_step_scores",
    "check_shaping_mode",
    "clone_branches",
    "combine_step_rewards",
    "filter_mixed_or_penalized_all_wrong",
    "filter_mixed_or_penalized_all_wrong_mask_no_eos",
    "filter_process_consistent",
    "fold_turn_rewards",
    "group_normalize",
    "load_prm_config",
    "min_form_returns",
    "min_form_step_rewards",
    "no_eos_rows",
    "order_parents_first",
    "prm_group_advantages",
    "process_consistency_mask",
    "process_metrics",
    "record_prm_results",
    "score_branches",
    "score_prm_branches",
    "shape_advantages",
    "shape_advantages_prerolled",
]
