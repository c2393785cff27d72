"""`prm-distill data prm800k`: PRM800K's human step ratings as training records.

PRM800K (phase 1, as Parquet) has one row per rated candidate step: the problem, the steps before it
(`responses`), the step (`next_response`) and its human rating (1 good, 0 neutral, -1 wrong, null for a
step a person wrote). Its items are real model errors judged by people, so they are the closest training
signal to ProcessBench's. Two kinds of record come out of it:

- a *first-error* item: a row rated -1 whose earlier steps carry no -1 (steps = responses + [next], the
  last labelled 0; the earlier ones by their own rows' ratings);
- an *all-correct* solution: a finished solution (`is_solution`) rated >= 0, with no -1 before it;
- with `alternatives_per_problem`, an *alternative*: a non-preferred candidate step rated 0 or 1 (no -1
  before it), ending its item. Phase 1 rates ~16k such steps (all 10k of its rating-0 rows are among
  them) that no other item reaches: prefixes follow the preferred path. They sit beside the first errors
  that share their prefix: the same context, a right and a wrong next step.

An earlier step's rating is looked up in its own row (same problem, same prefix): 1 is good, a human
step is good, 0 goes by `neutral` (good, 0.5 or unsupervised), and a step no row rates is unsupervised.
First-error items share long prefixes (about 22 per problem), so at most `negatives_per_problem` are kept
per problem, of distinct first-error positions first. A row that is not of that shape is counted and
named, never guessed into a label.
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..records import Trajectory, parquet_rows, write_jsonl
from .build import BuildConfig, drop_excluded, split_with_sides, warn_dev_split

log = logging.getLogger("prm_distill.data")
NEUTRAL = {"good": 1.0, "half": 0.5, "unsupervised": None}
COLUMNS = ("instruction", "responses", "next_response", "rating")


@dataclass
class PRM800KConfig:
    neutral: str = field(default="good", metadata={"help": (
        "What a rating 0 ('neutral': correct but not obviously useful) means: good (1.0), half (0.5) or unsupervised "
        "(no label). Chosen on the dev split (docs/data.md).")})
    negatives_per_problem: int = field(default=8, metadata={"help": (
        "At most this many first-error items per problem (distinct first-error positions first); 0 keeps all.")})
    alternatives_per_problem: int = field(default=0, metadata={"help": (
        "Also keep up to this many items per problem that end in a non-preferred step rated 0 or 1 (0: none, the recipe).")})

    def __post_init__(self) -> None:
        if self.neutral not in NEUTRAL:
            raise ValueError(f"neutral must be one of {', '.join(NEUTRAL)}, got {self.neutral!r}")
        if self.negatives_per_problem < 0:
            raise ValueError("negatives_per_problem must be >= 0 (0 keeps all)")
        if self.alternatives_per_problem < 0:
            raise ValueError("alternatives_per_problem must be >= 0 (0 keeps none)")


def read_rows(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The Parquet rows as dicts; a file that is not readable Parquet, or lacks a column, is a RecordError naming it."""
    return parquet_rows(path, COLUMNS, "a PRM800K file", limit)


def _row_problem(row: dict[str, Any]) -> str | None:
    """Why a row cannot be used, or None."""
    if not isinstance(row.get("instruction"), str) or not row["instruction"].strip():
        return "no 'instruction' (problem) text"
    responses = row.get("responses")
    if not isinstance(responses, list) or not all(isinstance(s, str) and s.strip() for s in responses):
        return "'responses' is not a list of non-empty steps"
    if not isinstance(row.get("next_response"), str) or not row["next_response"].strip():
        return "empty 'next_response' (the rated step)"
    rating = row.get("rating")
    if rating is not None and rating not in (-1, 0, 1):
        return f"rating {rating!r} is not -1, 0, 1 or null"
    return None


def build_from_prm800k(path: str | Path, out_dir: str | Path, build: BuildConfig, cfg: PRM800KConfig, exclude: set[str] | None = None,
                       dev_with: set[str] | None = None, train_with: set[str] | None = None,
                       known: set[tuple[str, tuple[str, ...]]] | None = None) -> dict:
    """Write train.jsonl / dev.jsonl / summary.json from one PRM800K Parquet file (see the module doc);
    `build` gives the seed (negatives kept, dev split), `dev_fraction` and `limit` (rows read).
    `dev_with` / `train_with`: problems another source already holds out / trains on (PRMBench's items are
    PRM800K solutions): they keep that side here, so the mixed data stays problem-disjoint. `known`: the
    (problem, steps) of those sources' records: an item equal to one of them is dropped (counted)."""
    rows = read_rows(path, build.limit)
    malformed: list[str] = []
    counts: Counter[str] = Counter()
    rating_of: dict[tuple[str, tuple[str, ...], str], float | None] = {}
    good: list[tuple[int, dict[str, Any]]] = []
    for i, row in enumerate(rows):
        why = _row_problem(row)
        if why is not None:
            malformed.append(f"{path}: row {i}: {why}")
            continue
        key = (row["instruction"].strip(), tuple(s.strip() for s in row["responses"]), row["next_response"].strip())
        # a human-written step counts as good; a model step nobody rated stays unsupervised
        rating = float(row["rating"]) if row.get("rating") is not None else 1.0 if row.get("is_human_response") else None
        counts["unrated_rows"] += rating is None
        rating_of.setdefault(key, rating)
        good.append((i, row))
    neutral = NEUTRAL[cfg.neutral]

    def label(rating: float | None) -> float | None:
        return None if rating is None else neutral if rating == 0.0 else float(rating > 0)

    negatives: dict[str, list[Trajectory]] = defaultdict(list)
    positives: list[Trajectory] = []
    alternatives: dict[str, list[Trajectory]] = defaultdict(list)
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for i, row in good:
        question = row["instruction"].strip()
        prefix = [s.strip() for s in row["responses"]]
        step = row["next_response"].strip()
        rating = rating_of[(question, tuple(prefix), step)]
        is_error = rating == -1.0
        is_solution = bool(row.get("is_solution")) and rating is not None and rating >= 0
        is_alternative = (cfg.alternatives_per_problem > 0 and not is_error and not is_solution and row.get("rating") is not None
                          and row.get("is_preferred_response") is not True)
        if not (is_error or is_solution or is_alternative):
            continue  # a preferred partial step: its label reaches training inside longer items
        prior = [rating_of.get((question, tuple(prefix[:j]), prefix[j])) for j in range(len(prefix))]
        if any(r == -1.0 for r in prior):
            counts["after_an_earlier_error"] += 1
            continue
        steps = prefix + [step]
        if (question, tuple(steps)) in seen:
            counts["duplicates"] += 1
            continue
        if known and (question, tuple(steps)) in known:
            counts["in_another_source"] += 1
            continue
        if not is_alternative:  # alternatives are checked against the rest after this loop: a solution or first error wins
            seen.add((question, tuple(steps)))
        counts["unrated_earlier_steps"] += sum(r is None for r in prior)
        labels = [label(r) for r in prior] + [0.0 if is_error else label(rating)]
        kind = "first_error" if is_error else "solution" if is_solution else "alternative"
        meta = {"source": "prm800k", "row": i, "kind": kind}
        if is_error:
            meta["error_step"] = len(prefix)
        if row.get("answer") is not None:
            meta["answer"] = str(row["answer"])
        t = Trajectory(id=f"prm800k-{i}", question=question, steps=steps, labels=labels, outcome=1.0 if is_solution else None, metadata=meta)
        (negatives[question] if is_error else positives if is_solution else alternatives[question]).append(t)
    kept: list[Trajectory] = []
    rng = random.Random(build.seed)
    for question in sorted(negatives):
        items = negatives[question]
        rng.shuffle(items)
        if cfg.negatives_per_problem:
            # distinct first-error positions first (round robin over positions), in the shuffled order
            rank: Counter[int] = Counter()
            keyed = []
            for j, t in enumerate(items):
                keyed.append((rank[t.metadata["error_step"]], j, t))
                rank[t.metadata["error_step"]] += 1
            items = [t for _, _, t in sorted(keyed, key=lambda x: x[:2])]
            counts["negatives_capped"] += max(0, len(items) - cfg.negatives_per_problem)
            items = items[: cfg.negatives_per_problem]
        kept += items
    for question in sorted(alternatives):
        items = []
        for t in alternatives[question]:
            if (question, tuple(t.steps)) in seen:
                counts["duplicates"] += 1
            else:
                seen.add((question, tuple(t.steps)))
                items.append(t)
        rng.shuffle(items)
        counts["alternatives_capped"] += max(0, len(items) - cfg.alternatives_per_problem)
        kept += items[: cfg.alternatives_per_problem]
    records = sorted(positives + kept, key=lambda t: t.metadata["row"])
    records, excluded = drop_excluded(records, exclude or set())
    train, dev, sides = split_with_sides(records, build.dev_fraction, build.seed, dev_with or set(), train_with or set())
    for m in malformed[:20]:
        log.warning("skipped %s", m)
    if len(malformed) > 20:
        log.warning("... and %d more malformed rows", len(malformed) - 20)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(dev, out / "dev.jsonl")
    warn_dev_split(dev, out / "dev.jsonl", build.dev_fraction)
    label_counts = Counter("good" if x > 0.5 else "bad" if x < 0.5 else "neutral" for r in records for x in (r.labels or []) if x is not None)
    summary = {
        "source": f"prm800k: {path}",
        "rows": len(rows),
        "malformed_rows": len(malformed),
        "malformed": malformed[:100],
        "problems": len({r.question for r in records}),
        "records": len(records),
        "first_error": sum(r.metadata["kind"] == "first_error" for r in records),
        "solutions": sum(r.metadata["kind"] == "solution" for r in records),
        "alternatives": sum(r.metadata["kind"] == "alternative" for r in records),
        "excluded_problems": excluded,
        "skipped": dict(counts),
        "labels": dict(label_counts),
        "unsupervised_steps": sum(x is None for r in records for x in (r.labels or [])),
        "train_records": len(train),
        "dev_records": len(dev),
        "dev_questions": len({r.question for r in dev}),
        "sides_from_other_sources": sides,
        "config": {"neutral": cfg.neutral, "negatives_per_problem": cfg.negatives_per_problem,
                   "alternatives_per_problem": cfg.alternatives_per_problem, "seed": build.seed,
                   "dev_fraction": build.dev_fraction, "limit": build.limit},
    }
    write_json(out / "summary.json", summary)
    return summary
