"""Preference pairs for DPO from step scores, in the format TRL's DPO trainer reads.

Two kinds, both within one problem and both with a minimum score margin:
- trajectory pairs: chosen = the solution with the higher aggregate score, rejected = the lower;
- step pairs: two solutions that share their first k >= `min_prefix_steps` steps (exactly) and then
  diverge; chosen = the continuation whose next step scores higher. Each pair of solutions meets at
  most once (where they diverge), and a next step shared by several solutions is scored alike.

Format: plain strings (`prompt`, `chosen`, `rejected`) or, with `conversational`, message lists
(`prompt` = the user's question, `chosen`/`rejected` = one assistant message). A plain step pair
puts the shared steps in the prompt and the next step in the completions (Step-DPO); a
conversational one keeps the prompt the question and writes the shared steps into both assistant
messages, whose identical prefix cancels in DPO's log-ratio difference. Extra columns (`kind`,
`margin`, `chosen_id`, `rejected_id`, `prefix_steps`, `group`) say where each pair came from.
Steps are joined by newlines where a solution is rebuilt from steps; a trajectory pair uses the
record's own `response` when it has one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..aggregate import AGGREGATIONS, aggregate
from ..atomic import write_json
from ..jobfiles import AppendLog, check_job
from ..protocol import StepScorer
from ..steps import SplitConfig
from .backend import calibrated
from .inputs import Sample, group_by_question, read_samples

LEVELS = ("both", "trajectory", "step")


@dataclass
class PairsConfig:
    """What `prm-distill pairs` pairs and how it writes them."""

    agg: str = field(default="min", metadata={"help": f"Aggregation of trajectory pairs ({'|'.join(AGGREGATIONS)})."})
    gamma: float = field(default=0.9, metadata={"help": "Discount of the `discounted` aggregation."})
    min_margin: float = field(default=0.1, metadata={"help": "Least score difference (aggregate, or next step) between chosen and rejected."})
    level: str = field(default="both", metadata={"help": "Pairs to make: trajectory, step or both."})
    max_pairs_per_problem: int = field(default=8, metadata={"help": "Most pairs of each kind per problem, largest margins first (0: no limit)."})
    min_prefix_steps: int = field(default=1, metadata={"help": "Step pairs need at least this many shared steps before they diverge."})
    conversational: bool = field(default=False, metadata={"help": "Write message lists (TRL's conversational format) instead of plain strings."})

    def __post_init__(self) -> None:
        if self.agg not in AGGREGATIONS:
            raise ValueError(f"--agg must be one of {'|'.join(AGGREGATIONS)}, got {self.agg!r}")
        if self.level not in LEVELS:
            raise ValueError(f"--level must be one of {'|'.join(LEVELS)}, got {self.level!r}")
        if self.min_margin < 0 or self.max_pairs_per_problem < 0 or self.min_prefix_steps < 0:
            raise ValueError("--min-margin, --max-pairs-per-problem and --min-prefix-steps must be >= 0")


@dataclass
class _Step:
    """The next step of a step pair, with the solution it came from."""

    sample: Sample
    text: str

    @property
    def id(self) -> str:
        return self.sample.id


@dataclass
class Pair:
    kind: str
    chosen: Sample | _Step
    rejected: Sample | _Step
    margin: float
    prefix: list[str]  # shared steps (step pairs); empty for trajectory pairs


def _top(pairs: list[Pair], limit: int) -> list[Pair]:
    pairs.sort(key=lambda p: -p.margin)  # stable: input order among equal margins
    return pairs[:limit] if limit else pairs


def trajectory_pairs(samples: list[Sample], scores: list[list[float]], cfg: PairsConfig) -> list[Pair]:
    """Every (higher, lower) pair of solutions whose aggregates differ by at least the margin."""
    agg = [aggregate(s, cfg.agg, gamma=cfg.gamma) for s in scores]
    out = []
    for i in range(len(samples)):
        for j in range(len(samples)):
            margin = agg[i] - agg[j]
            if i != j and margin > 0 and margin >= cfg.min_margin and samples[i].text != samples[j].text:
                out.append(Pair("trajectory", samples[i], samples[j], margin, []))
    return _top(out, cfg.max_pairs_per_problem)


def step_pairs(samples: list[Sample], scores: list[list[float]], cfg: PairsConfig) -> list[Pair]:
    """Pairs of next steps after a shared prefix, the higher-scored one chosen."""
    # prefix -> next step -> (its score, the first solution that takes it)
    branches: dict[tuple[str, ...], dict[str, tuple[float, Sample]]] = {}
    for s, sc in zip(samples, scores, strict=True):
        for k in range(cfg.min_prefix_steps, len(s.steps)):
            nxt = branches.setdefault(tuple(s.steps[:k]), {})
            nxt.setdefault(s.steps[k], (sc[k], s))
    out = []
    for prefix, nxt in branches.items():
        options = list(nxt.items())
        for a, (score_a, sample_a) in options:
            for b, (score_b, sample_b) in options:
                margin = score_a - score_b
                if a != b and margin > 0 and margin >= cfg.min_margin:
                    out.append(Pair("step", _Step(sample_a, a), _Step(sample_b, b), margin, list(prefix)))
    return _top(out, cfg.max_pairs_per_problem)


def to_row(p: Pair, question: str, group: str, conversational: bool) -> dict[str, Any]:
    """One TRL DPO row (see the module docstring for where the shared steps go)."""
    shared = "".join(step + "\n" for step in p.prefix)
    if conversational:
        def msg(role: str, content: str) -> list[dict[str, str]]:
            return [{"role": role, "content": content}]
        prompt: Any = msg("user", question)
        chosen: Any = msg("assistant", shared + p.chosen.text)
        rejected: Any = msg("assistant", shared + p.rejected.text)
    else:
        prompt, chosen, rejected = question + "\n\n" + shared, p.chosen.text, p.rejected.text
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "kind": p.kind, "margin": round(p.margin, 6),
            "chosen_id": p.chosen.id, "rejected_id": p.rejected.id, "prefix_steps": len(p.prefix), "group": group}


def _answer_agreement(pairs: list[Pair]) -> dict[str, int]:
    """Trajectory pairs whose answers are known: chosen right and rejected wrong, or the reverse."""
    known: list[tuple[bool, bool]] = []
    for p in pairs:
        if isinstance(p.chosen, Sample) and isinstance(p.rejected, Sample):
            c, r = p.chosen.correct(), p.rejected.correct()
            if c is not None and r is not None:
                known.append((c, r))
    return {"with_answers": len(known), "chosen_right_rejected_wrong": sum(c and not r for c, r in known),
            "chosen_wrong_rejected_right": sum(r and not c for c, r in known)}


def run_pairs(scorer: StepScorer, input_path: str | Path, output: str | Path, cfg: PairsConfig,
              splitter: SplitConfig | None = None, progress: bool = True) -> dict[str, Any]:
    """Pairs of every problem not yet done, appended to `output`; a summary beside it.

    A problem is done once its line is in `<output stem>.progress.jsonl` (written after its pairs);
    pairs of a problem cut off between the two writes are removed on the rerun, then redone."""
    output = Path(output)
    samples, invalid = read_samples(input_path, splitter)
    groups = group_by_question(samples)
    progress_path = output.with_name(output.stem + ".progress.jsonl")
    check_job(output.with_name(output.stem + ".job.json"), {"command": "pairs", "model": scorer.model_id, **asdict(cfg)})
    with AppendLog(progress_path) as prog, AppendLog(output) as out:
        done = {r["group"] for r in prog.rows}
        out.keep(lambda r: r.get("group") in done)
        todo = [k for k in groups if k not in done]
        for key in tqdm(todo, desc="pairs", unit="problem", disable=not progress):
            group = groups[key]
            pairs: list[Pair] = []
            if len(group) > 1:
                scores = calibrated(scorer, [(s.question, s.steps) for s in group])
                if cfg.level in ("both", "trajectory"):
                    pairs += trajectory_pairs(group, scores, cfg)
                if cfg.level in ("both", "step"):
                    pairs += step_pairs(group, scores, cfg)
            out.append(to_row(p, group[0].question, key, cfg.conversational) for p in pairs)
            prog.append([{"group": key, "question": group[0].question, "n": len(group),
                          "trajectory_pairs": sum(p.kind == "trajectory" for p in pairs),
                          "step_pairs": sum(p.kind == "step" for p in pairs), **_answer_agreement(pairs)}])
        rows = [r for r in prog.rows if r["group"] in groups]
    summary = {
        "config": asdict(cfg), "input": str(input_path), "output": str(output), "invalid_records": invalid,
        "problems": len(rows), "singleton_problems": [r["question"] for r in rows if r["n"] < 2],
        "problems_without_pairs": sum(r["trajectory_pairs"] + r["step_pairs"] == 0 for r in rows),
        "trajectory_pairs": sum(r["trajectory_pairs"] for r in rows), "step_pairs": sum(r["step_pairs"] for r in rows),
        "answers": {k: sum(r[k] for r in rows) for k in ("with_answers", "chosen_right_rejected_wrong", "chosen_wrong_rejected_right")},
        "this_run": {"problems_scored": len(todo), "problems_already_done": len(groups) - len(todo)},
    }
    write_json(output.with_name(output.stem + ".summary.json"), summary)
    return summary
