"""Best-of-N reranking: per problem, the sample whose aggregated step scores are highest.

With gold answers (or `outcome`), the report gives best-of-N accuracy for every aggregation next to
three baselines, for N = 1, 2, 4, ... up to the largest group (and that size itself), or every N from 1
(`n_grid="every"`):
- majority vote: the most frequent final answer (equal answers by `answers.same_answer`); a tie
  counts the expected accuracy of picking one of the tied answers at random;
- random: the expected accuracy of one sample picked at random (the mean correctness, exact);
- oracle (pass@N): some sample among the N is right.
Beside best-of-N, `weighted_vote[agg][N]`: the answer whose samples' aggregated scores sum highest
(majority vote with each vote weighted by the PRM), ties counted as in majority vote. `sample_auroc[agg]`:
how well the aggregated scores separate right from wrong samples, within each problem and pooled.
Subsampling is deterministic: at N, each problem's first N samples in input order; a problem with
fewer than N samples does not count at that N. A problem with one sample has no best-of-N: it is
reported (its question) and left out of the curves; its only sample is still written as chosen.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..aggregate import AGGREGATIONS, aggregate_all
from ..answers import answer_classes
from ..atomic import write_json
from ..jobfiles import AppendLog, check_job
from ..metrics import binary_auroc
from ..protocol import StepScorer
from ..steps import SplitConfig
from .backend import calibrated
from .inputs import Sample, group_by_question, read_samples
from .plots import best_of_n_plot

BASELINES = ("majority_vote", "random", "oracle")
N_GRIDS = ("doubling", "every")
SUBSAMPLING = "first N samples of each problem, in input order; problems with fewer than N samples are left out at N"


@dataclass
class RerankConfig:
    """How `prm-distill rerank` picks and reports."""

    agg: str = field(default="min", metadata={"help": f"Aggregation that picks the written `chosen` sample ({'|'.join(AGGREGATIONS)}); the report covers all."})
    gamma: float = field(default=0.9, metadata={"help": "Discount of the `discounted` aggregation (weights gamma**i, normalised to sum to 1)."})
    n_grid: str = field(default="doubling", metadata={"help": "The N of the report: `doubling` (1, 2, 4, ..., the largest group) or `every` (1, 2, 3, ...)."})

    def __post_init__(self) -> None:
        if self.agg not in AGGREGATIONS:
            raise ValueError(f"--agg must be one of {'|'.join(AGGREGATIONS)}, got {self.agg!r}")
        if self.n_grid not in N_GRIDS:
            raise ValueError(f"--n-grid must be one of {'|'.join(N_GRIDS)}, got {self.n_grid!r}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"--gamma must lie in (0, 1], got {self.gamma}")


def _best(values: list[float]) -> int:
    """Index of the highest value; the first one on ties (deterministic)."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def rank_group(key: str, samples: list[Sample], scores: list[list[float]], cfg: RerankConfig) -> dict[str, Any]:
    """The output row of one problem: every sample's scores and answer, and the chosen one."""
    answers = [s.answer() for s in samples]
    classes = answer_classes(answers)
    rows: list[dict[str, Any]] = []
    for s, sc, a, c in zip(samples, scores, answers, classes, strict=True):
        rows.append({"id": s.id, "line": s.line, "step_scores": sc, "scores": aggregate_all(sc, gamma=cfg.gamma),
                     "answer": a.text if a else None, "answer_class": c, "correct": s.correct(a)})
    best = {agg: _best([r["scores"][agg] for r in rows]) for agg in AGGREGATIONS}
    row = {"group": key, "question": samples[0].question, "n": len(samples), "gold": samples[0].gold, "best": best, "samples": rows}
    return _with_chosen(row, samples, cfg.agg)


def _with_chosen(row: dict[str, Any], samples: list[Sample], agg: str) -> dict[str, Any]:
    """The row with `agg`'s best sample written as `chosen`, from the scores the row already holds."""
    i = row["best"][agg]
    s = next(x for x in samples if x.id == row["samples"][i]["id"])
    return {**row, "agg": agg, "chosen": {**s.record, "id": s.id, "steps": s.steps, "step_scores": row["samples"][i]["step_scores"]}}


def n_values(largest: int, grid: str = "doubling") -> list[int]:
    """1, 2, 4, ... up to `largest`, and `largest` itself; `every`: 1, 2, ..., `largest`."""
    if grid == "every":
        return list(range(1, largest + 1))
    ns, n = [], 1
    while n <= largest:
        ns.append(n)
        n *= 2
    return ns + ([largest] if largest >= 1 and ns[-1] != largest else [])


def _vote(samples: list[dict[str, Any]], agg: str | None = None) -> float:
    """Expected correctness of the answer with the most votes, each vote weighted by the sample's `agg`
    score (majority vote: weight 1); ties at random; no answer at all is wrong."""
    weight: dict[int, float] = {}
    right: dict[int, bool] = {}
    for s in samples:
        if s["answer_class"] is not None:
            weight[s["answer_class"]] = weight.get(s["answer_class"], 0.0) + (1.0 if agg is None else s["scores"][agg])
            right[s["answer_class"]] = bool(s["correct"])
    if not weight:
        return 0.0
    top = max(weight.values())
    tied = [c for c, w in weight.items() if w == top]
    return sum(right[c] for c in tied) / len(tied)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def sample_auroc(rows: list[dict[str, Any]], aggregations: tuple[str, ...] = AGGREGATIONS) -> dict[str, dict[str, float | int | None]]:
    """How well each aggregation separates right from wrong samples: `within_problem`, the mean over problems
    with both right and wrong samples of the AUROC among that problem's samples (what best-of-N needs), and
    `pooled`, over all samples at once (problem difficulty included); None where undefined."""
    scored = [r for r in rows if all(s["correct"] is not None for s in r["samples"])]
    mixed = [r for r in scored if len({bool(s["correct"]) for s in r["samples"]}) == 2]
    out: dict[str, dict[str, float | int | None]] = {}
    for agg in aggregations:
        per = [binary_auroc([s["scores"][agg] for s in r["samples"]], [bool(s["correct"]) for s in r["samples"]]) for r in mixed]
        pooled = binary_auroc([s["scores"][agg] for r in scored for s in r["samples"]],
                              [bool(s["correct"]) for r in scored for s in r["samples"]])
        out[agg] = {"within_problem": _mean(per), "pooled": None if math.isnan(pooled) else pooled, "problems": len(mixed)}
    return out


def best_of_n_report(rows: list[dict[str, Any]], aggregations: tuple[str, ...] = AGGREGATIONS, grid: str = "doubling") -> dict[str, Any]:
    """best_of_n[agg][N] and the baselines, from the output rows alone (so a resumed run reports all)."""
    multi = [r for r in rows if r["n"] >= 2]
    scored = [r for r in multi if all(s["correct"] is not None for s in r["samples"])]
    ns = n_values(max((r["n"] for r in multi), default=0), grid)
    best: dict[str, dict[str, float | None]] = {agg: {} for agg in aggregations}
    voted: dict[str, dict[str, float | None]] = {agg: {} for agg in aggregations}
    base: dict[str, dict[str, float | None]] = {b: {} for b in BASELINES}
    at_n: dict[str, dict[str, int]] = {}
    for n in ns:
        groups = [r["samples"][:n] for r in scored if r["n"] >= n]
        at_n[str(n)] = {"problems": sum(r["n"] >= n for r in multi), "with_answers": len(groups)}
        for agg in aggregations:
            best[agg][str(n)] = _mean([float(bool(g[_best([s["scores"][agg] for s in g])]["correct"])) for g in groups])
            voted[agg][str(n)] = _mean([_vote(g, agg) for g in groups])
        base["majority_vote"][str(n)] = _mean([_vote(g) for g in groups])
        base["random"][str(n)] = _mean([sum(bool(s["correct"]) for s in g) / len(g) for g in groups])
        base["oracle"][str(n)] = _mean([float(any(s["correct"] for s in g)) for g in groups])
    gain: dict[str, float | None] = {}
    for method, values in [*best.items(), *((f"vote:{agg}", v) for agg, v in voted.items())]:
        mine, vote = (values[str(ns[-1])], base["majority_vote"][str(ns[-1])]) if ns else (None, None)
        gain[method] = None if mine is None or vote is None else mine - vote
    return {
        "aggregations": list(aggregations), "problems": len(rows), "groups_with_answers": len(scored),
        "singleton_problems": [r["question"] for r in rows if r["n"] < 2], "subsampling": SUBSAMPLING,
        "n_values": ns, "problems_at_n": at_n, "best_of_n": best, "weighted_vote": voted, "baselines": base,
        "gain_over_majority_at_largest_n": gain, "sample_auroc": sample_auroc(scored, aggregations),
    }


def method_accuracy(report: dict[str, Any], method: str) -> dict[str, float | None]:
    """Accuracy by N of a method: an aggregation's best-of-N, or `vote:<agg>` (PRM-weighted vote)."""
    return report["weighted_vote"][method[5:]] if method.startswith("vote:") else report["best_of_n"][method]


def choose_aggregation(report: dict[str, Any]) -> str:
    """The method with the highest accuracy at the report's largest N: an aggregation's best-of-N, or
    `vote:<agg>` (the weighted vote); a tie goes to the one listed first (best-of-N in `aggregations`
    order, then the votes). Meant for a report on problems set aside for choosing (e.g. GSM8K train), so
    that the test problems' report never picks its own winner."""
    methods = [*report["aggregations"], *(f"vote:{a}" for a in report["aggregations"])]
    top = str(report["n_values"][-1]) if report["n_values"] else None
    accs = {m: method_accuracy(report, m).get(top) for m in methods} if top else {}
    if not accs or all(v is None for v in accs.values()):
        raise ValueError("choose_aggregation: the report has no best-of-N accuracy at its largest N (no answered problem with that many samples)")
    return max((m for m in methods if accs[m] is not None), key=lambda m: (accs[m], -methods.index(m)))


def format_table(report: dict[str, Any]) -> str:
    """Accuracy table: one row per aggregation and baseline, one column per N."""
    ns = [str(n) for n in report["n_values"]]
    width = max(len(name) for name in [*report["aggregations"], *BASELINES]) + 7
    lines = ["method".ljust(width) + "".join(f"N={n}".rjust(8) for n in ns)]
    rows = ([(agg, report["best_of_n"][agg]) for agg in report["aggregations"]]
            + [(f"vote:{agg}", report["weighted_vote"][agg]) for agg in report["aggregations"]] + list(report["baselines"].items()))
    for name, values in rows:
        lines.append(name.ljust(width) + "".join(("n/a" if values[n] is None else f"{values[n]:.3f}").rjust(8) for n in ns))
    lines.append("problems".ljust(width) + "".join(str(report["problems_at_n"][n]["with_answers"]).rjust(8) for n in ns))
    return "\n".join(lines)


def run_rerank(scorer: StepScorer, input_path: str | Path, output: str | Path, cfg: RerankConfig,
               splitter: SplitConfig | None = None, progress: bool = True) -> dict[str, Any]:
    """Score every problem not yet in `output` (one row appended per problem), then write the report.

    Raises ScoringUnavailable when the server fails; the rows written so far stay and a rerun resumes."""
    output = Path(output)
    samples, invalid = read_samples(input_path, splitter)
    groups = group_by_question(samples)
    # The grid shapes the report only, and `agg` only which stored sample is written as `chosen`: a resume may
    # change either (another `agg` re-picks from the stored scores). `agg` stays out of the comparison, also
    # against job files that recorded it.
    picks = {k: v for k, v in asdict(cfg).items() if k not in ("n_grid", "agg")}
    check_job(output.with_name(output.stem + ".job.json"), {"command": "rerank", "model": scorer.model_id, **picks, "agg": None},
              pending=("agg",))
    with AppendLog(output) as out:
        done = {r["group"] for r in out.rows}
        todo = [k for k in groups if k not in done]
        for key in tqdm(todo, desc="rerank", unit="problem", disable=not progress):
            group = groups[key]
            scores = calibrated(scorer, [(s.question, s.steps) for s in group])
            out.append([rank_group(key, group, scores, cfg)])
        if any(r["agg"] != cfg.agg for r in out.rows if r["group"] in groups):
            out.rewrite([_with_chosen(r, groups[r["group"]], cfg.agg) if r["group"] in groups else r for r in out.rows])
        rows = [r for r in out.rows if r["group"] in groups]
    report = best_of_n_report(rows, grid=cfg.n_grid)
    report.update(config=asdict(cfg), input=str(input_path), output=str(output), invalid_records=invalid,
                  this_run={"problems_scored": len(todo), "problems_already_done": len(groups) - len(todo)})
    if report["groups_with_answers"] and report["n_values"]:
        report["plot"] = str(best_of_n_plot(output.parent / "best_of_n.png", report))
    write_json(output.parent / "report.json", report)
    return report
