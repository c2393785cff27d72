"""Uses of step scores beyond RL shaping: best-of-N reranking, DPO preference pairs, SFT filtering.

Each command reads JSONL records (`question`, `steps` or `response`, optional `id`, `answer`,
`outcome`, `labels`), scores them through an in-process engine or a server (`backend`), turns the
calibrated step scores into one trajectory score with `prm_distill.aggregate`, and writes its output
append-only so that a rerun after a failure resumes where it stopped.
"""

from .backend import ScoringUnavailable, calibrated, open_scorer
from .filter import FilterConfig, run_filter
from .pairs import PairsConfig, run_pairs
from .rerank import RerankConfig, run_rerank

__all__ = ["FilterConfig", "PairsConfig", "RerankConfig", "ScoringUnavailable", "calibrated", "open_scorer", "run_filter", "run_pairs", "run_rerank"]
