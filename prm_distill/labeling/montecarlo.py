"""Monte-Carlo step labels (Math-Shepherd) and consensus filtering (the Qwen PRM recipe).

A step is good when the policy, continuing from the solution up to and including it, still reaches
the gold answer: the label is the share of n completions that do (soft) or whether any does (hard).
The last step needs no sampling: the solution is complete, so its label is whether its own final
answer is right. This costs n generations per step but no judge, and it sees what a judge cannot
(whether the path still leads somewhere); it also credits lucky recoveries, which is why the Qwen
PRM recipe keeps only the labels on which it and an LLM judge agree. With `judge.mc_search=binary`
(OmegaPRM) only the prefixes a binary search for the first bad one needs are sampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..answers import is_correct
from ..generate import problem_messages
from ..records import Trajectory
from .config import JudgeConfig
from .prompts import Prompt

VERSION = "montecarlo.v1"


@dataclass(frozen=True)
class ContinuationPrompt(Prompt):
    """The policy's prompt for a problem with the solution's first steps already written (`prefix`)."""

    prefix: str = ""

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.user}, {"role": "assistant", "content": self.prefix}]


def continuation_prompts(question: str, steps: list[str], instruction: str) -> list[ContinuationPrompt]:
    """One prompt per step prefix except the last step's (whose label is the answer's own correctness)."""
    out = []
    for k in range(len(steps) - 1):
        (_, user), (_, prefix) = problem_messages(question, instruction, steps[: k + 1])
        out.append(ContinuationPrompt("montecarlo", VERSION, "", user, k, prefix))
    return out


def missing_gold(records: list[Trajectory]) -> list[str]:
    return [r.id for r in records if r.metadata.get("answer") in (None, "")]


def check_gold(records: list[Trajectory]) -> None:
    """Monte-Carlo labels need a gold answer per record: refuse, naming records, rather than label blindly."""
    missing = missing_gold(records)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"judge.backend=montecarlo needs a gold `answer` on every rollout; {len(missing)} of {len(records)} have none "
                         f"({shown}): add answers (prm-distill rollout writes them from the problems file) or leave those records out")


def reaches_gold(completion: str, gold: Any) -> float:
    """1.0 when the completion's final answer equals the gold one; no answer at all counts as 0."""
    return float(is_correct(completion, str(gold)) is True)


def estimate(votes: list[float], how: str) -> float | None:
    """soft: share of completions that reached the gold answer; hard: 1 if any did."""
    if not votes:
        return None
    return max(votes) if how == "hard" else sum(votes) / len(votes)


def reached(outcomes: list[float]) -> bool:
    """A prefix is good for the binary search when some completion from it reached the gold answer (OmegaPRM: MC > 0)."""
    return any(o > 0 for o in outcomes)


def _bisect(evaluated: dict[int, list[float]], n_steps: int) -> tuple[int, int | None]:
    """Replay the search over step prefixes 0..n_steps-1 (the last, the whole wrong solution, is known
    bad): (first bad prefix so far, the prefix to sample next or None when the search is over)."""
    lo, hi = 0, n_steps - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if mid not in evaluated:
            return lo, mid
        if reached(evaluated[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo, None


def next_prefix(evaluated: dict[int, list[float]], n_steps: int, last_ok: float) -> int | None:
    """The step prefix the binary search samples next (its completions decide the half to keep), None
    when it is over. A rollout whose own answer is right is not searched: it reaches the gold answer.

    Stateless: the search is replayed from the outcomes so far, so a resumed job (outcomes from the
    response cache) asks for exactly the prefixes a fresh one would."""
    if last_ok:
        return None
    return _bisect(evaluated, n_steps)[1]


def binary_labels(evaluated: dict[int, list[float]], n_steps: int, last_ok: float, how: str) -> tuple[list[float | None], int | None]:
    """(labels, first error) of a finished binary search (OmegaPRM). A right answer: every step 1,
    no error. A wrong one: the first bad prefix e is 0, later steps unsupervised, a sampled step
    before e keeps its estimate and a skipped one takes the estimate of the next sampled step (MC
    values fall along a path, so that is a lower bound; e - 1 is always sampled when e > 0)."""
    if last_ok:
        return [1.0] * n_steps, None
    e, pending = _bisect(evaluated, n_steps)
    if pending is not None:
        raise ValueError(f"binary search unfinished: prefix {pending} not sampled")
    labels: list[float | None] = [0.0 if k == e else None for k in range(n_steps)]
    carry: float | None = None
    for k in range(e - 1, -1, -1):
        if k in evaluated:
            carry = estimate(evaluated[k], how)
        labels[k] = carry
    return labels, e


def requests_per_record(n_steps: int, jc: JudgeConfig, votes: int) -> int:
    """Most requests a judge sends for one record (the progress bar's total): n per sampled prefix for
    Monte-Carlo (ceil(log2(steps)) prefixes at most in a binary search), none for the reference rule."""
    if jc.reference:
        return 0
    if not jc.montecarlo:
        return n_steps * votes
    prefixes = max(n_steps - 1, 0) if jc.mc_search == "all" else math.ceil(math.log2(n_steps)) if n_steps > 1 else 0
    return prefixes * jc.n


def first_error(labels: list[float | None], threshold: float) -> int | None:
    """Index of the first step below threshold, -1 when none is; None when a step before it is unlabelled."""
    for k, lab in enumerate(labels):
        if lab is None:
            return None
        if lab < threshold:
            return k
    return -1


def _kept_value(mc: float, judge: float, value: str, threshold: float) -> float:
    if value == "montecarlo":
        return mc
    if value == "judge":
        return judge
    if value == "mean":
        return (mc + judge) / 2
    return float(mc >= threshold)


def consensus(mc: list[float | None], judge: list[float | None], rule: str, threshold: float, value: str) -> tuple[list[float | None], list[bool | None]]:
    """(labels, kept) under the rule. kept[k] is None where a side has no label (nothing to compare).

    step: a step is kept where both call it good or both bad. first_error: a record is kept where both
    place the first error at the same step (or both find none); it keeps the steps up to that error,
    later steps unsupervised, as in ProcessBench."""
    n = len(mc)
    if rule == "first_error":
        a, b = first_error(mc, threshold), first_error(judge, threshold)
        if a is None or b is None:
            return [None] * n, [None] * n
        end = n if a < 0 else a + 1
        if a != b:
            return [None] * n, [False] * n
        return ([_kept_value(mc[k], judge[k], value, threshold) for k in range(end)] + [None] * (n - end),  # type: ignore[arg-type]
                [True] * end + [None] * (n - end))
    labels: list[float | None] = []
    kept: list[bool | None] = []
    for m, j in zip(mc, judge):
        if m is None or j is None:
            labels.append(None)
            kept.append(None)
        elif (m >= threshold) == (j >= threshold):
            labels.append(_kept_value(m, j, value, threshold))
            kept.append(True)
        else:
            labels.append(None)
            kept.append(False)
    return labels, kept


def agreement_matrix(records: list[Trajectory]) -> dict[str, Any] | None:
    """Over steps labelled by both sides: the 2x2 counts (Monte-Carlo good/bad x judge good/bad), the
    agreement and the kept share (None when no record went through consensus)."""
    m = {"montecarlo_good": {"judge_good": 0, "judge_bad": 0}, "montecarlo_bad": {"judge_good": 0, "judge_bad": 0}}
    compared = kept = 0
    rule = None
    for r in records:
        c = (r.judge or {}).get("consensus")
        if not c:
            continue
        rule, threshold = c["rule"], c["threshold"]
        for a, b, k in zip(c["montecarlo"], c["judge"], c["kept"]):
            if a is None or b is None:
                continue
            m["montecarlo_good" if a >= threshold else "montecarlo_bad"]["judge_good" if b >= threshold else "judge_bad"] += 1
            compared += 1
            kept += k is True
    if rule is None:
        return None
    agree = m["montecarlo_good"]["judge_good"] + m["montecarlo_bad"]["judge_bad"]
    return {"rule": rule, "steps_compared": compared, "steps_kept": kept, "kept_share": round(kept / compared, 4) if compared else None,
            "agreement": round(agree / compared, 4) if compared else None, "matrix": m}


def montecarlo_stats(records: list[Trajectory]) -> dict[str, Any] | None:
    """Per Monte-Carlo judge: completions sampled and the share that reached the gold answer."""
    out: dict[str, Any] = {}
    for r in records:
        for name, d in ((r.judge or {}).get("montecarlo") or {}).items():
            o = out.setdefault(name, {"completions": 0, "reached_gold": 0, "prefixes_sampled": 0})
            o["completions"] += sum(d["completions"])
            o["prefixes_sampled"] += sum(1 for n in d["completions"] if n)
            o["reached_gold"] += sum(c for c, n in zip(d["correct"], d["completions"]) if n)
    for o in out.values():
        o["share_reaching_gold"] = round(o["reached_gold"] / o["completions"], 4) if o["completions"] else None
    return out or None
