"""`prm-distill data ...`: step-labelled trajectories from worked solutions, with first-error variants.

Originals are kept with every step labelled good. Each variant goes wrong at one real step (label
0), keeps the steps before it (1) and carries the wrong value through the rest, which stay
unsupervised (null): after a first error nothing is known about a step, as in ProcessBench.
Bare-answer negatives teach that a right answer no step derives is a guess: the final answer alone
("The answer is 72.", label 0), and a solution cut short that jumps to it (kept steps 1, answer 0).
Output: `train.jsonl` and `dev.jsonl` (dev = whole questions held out) and `summary.json`.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..atomic import write_json
from ..metrics import dev_split_warning
from ..records import RecordError, Trajectory, iter_jsonl, split_by_question, write_jsonl
from .latex import MATH_KINDS
from .perturb import KINDS, NUMBER, Perturber, mark_statements, num

log = logging.getLogger("prm_distill.data")
_ANSWER_STYLES = ("The answer is {a}.", "So the answer is {a}.", "Therefore, the final answer is $\\boxed{{{a}}}$.")


@dataclass
class BuildConfig:
    variants: int = field(default=3, metadata={"help": "First-error variants per solution (each of a different kind where possible)."})
    kinds: list[str] | None = field(default=None, metadata={"help": (
        f"Error kinds to use (default: every kind of the source). gsm8k, prmbench, steps: {', '.join(KINDS)}; math: {', '.join(MATH_KINDS)}.")})
    seed: int = field(default=0, metadata={"help": "Seed of the variant choices and of the dev split."})
    dev_fraction: float = field(default=0.05, metadata={"help": "Share of questions held out (whole questions) as dev.jsonl."})
    limit: int | None = field(default=None, metadata={"help": "Read at most this many input records."})
    bare_answers: float = field(default=0.5, metadata={"help": (
        "Share of GSM8K solutions that also yield two bare-answer negatives: the final answer alone as one step (label 0), and the "
        "solution cut after some of its lines, jumping to the answer (kept lines 1, the answer step 0). 0 turns them off.")})

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds or [] if k not in KINDS + MATH_KINDS]
        if bad:
            raise ValueError(f"unknown error kind(s) {bad}; known: {', '.join(KINDS + MATH_KINDS)}")
        if self.variants < 0:
            raise ValueError("variants must be >= 0")
        if not 0.0 <= self.dev_fraction < 1.0:
            raise ValueError("dev_fraction must be in [0, 1)")
        if not 0.0 <= self.bare_answers <= 1.0:
            raise ValueError(f"bare_answers must be in [0, 1], got {self.bare_answers}")

    def kinds_for(self, known: tuple[str, ...]) -> list[str]:
        """The kinds to use on a source whose kinds are `known` (all of them when none were given)."""
        bad = [k for k in self.kinds or [] if k not in known]
        if bad:
            raise ValueError(f"error kind(s) {bad} do not apply to this source; its kinds: {', '.join(known)}")
        return list(self.kinds or known)


@dataclass
class Source:
    """One worked solution: lines may hold `<<expr=result>>` marks."""

    id: str
    question: str
    lines: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)


_FINAL = re.compile(r"^####\s*(.*?)\s*$")


def read_gsm8k(path: str | Path, limit: int | None = None) -> tuple[list[Source], list[str]]:
    """GSM8K lines (`question`, `answer` ending in `#### N`); a bad line is skipped and named."""
    out: list[Source] = []
    skipped: list[str] = []
    for lineno, obj in iter_jsonl(path):
        if limit is not None and len(out) >= limit:
            break
        where = f"{path}:{lineno}"
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or not obj["question"].strip():
            skipped.append(f"{where}: no 'question' string")
            continue
        answer = obj.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            skipped.append(f"{where}: empty solution")
            continue
        lines = [x.strip() for x in answer.strip().split("\n") if x.strip()]
        m = _FINAL.match(lines[-1]) if lines else None
        if m is None:
            skipped.append(f"{where}: no final '#### <answer>' line")
            continue
        final = m.group(1).replace(",", "")
        if not NUMBER.fullmatch(final.lstrip("-")):
            skipped.append(f"{where}: non-numeric final answer {m.group(1)!r}")
            continue
        if len(lines) < 2:
            skipped.append(f"{where}: a solution without reasoning lines")
            continue
        out.append(Source(id=f"gsm8k-{lineno}", question=obj["question"].strip(), lines=lines[:-1] + [f"#### {final}"],
                          metadata={"source": "gsm8k", "answer": final}))
    return out, skipped


def _with_final_sentence(lines: list[str], rng: random.Random) -> list[str]:
    """`#### 72` becomes a sentence, as a policy writes its last step."""
    last = _FINAL.match(lines[-1])
    if last is None:
        return lines
    return lines[:-1] + [rng.choice(_ANSWER_STYLES).format(a=last.group(1))]


def _strip_marks(text: str) -> str:
    return re.sub(r"<<[^<>]*>>", "", text)


def variants_of(src: Source, cfg: BuildConfig, rng: random.Random, counts: Counter) -> list[Trajectory]:
    """The original (all good) and up to cfg.variants first-error variants of distinct kinds."""
    lines = _with_final_sentence(src.lines, rng)
    steps = [_strip_marks(x).strip() for x in lines]
    out = [Trajectory(id=f"{src.id}-orig", question=src.question, steps=steps, labels=[1.0] * len(steps), outcome=1.0,
                      metadata={**src.metadata, "kind": "original"})]
    pert = Perturber(src.question, lines, rng)
    kinds = cfg.kinds_for(KINDS)
    rng.shuffle(kinds)
    made = 0
    for kind in kinds:
        if made >= cfg.variants:
            break
        cands = pert.candidates(kind)
        if not cands:
            counts[f"{kind}.skipped"] += 1
            continue
        line, comp = rng.choice(cands)
        v = pert.make(kind, line, comp)
        if v is None or any(not s.strip() for s in v.lines):
            counts[f"{kind}.skipped"] += 1
            continue
        vsteps = [x.strip() for x in v.lines]
        if vsteps[v.line] == steps[v.line] or any(vsteps == r.steps for r in out):  # unchanged, or the same as another kind's
            counts[f"{kind}.skipped"] += 1
            continue
        labels: list[float | None] = [1.0] * v.line + [0.0] + [None] * (len(vsteps) - v.line - 1)
        out.append(Trajectory(id=f"{src.id}-{kind}", question=src.question, steps=vsteps, labels=labels, outcome=None,
                              metadata={**src.metadata, "kind": kind, "error_step": v.line, "detail": {k: str(x) for k, x in v.detail.items()}}))
        counts[f"{kind}.made"] += 1
        made += 1
    return out


def bare_answers_of(src: Source, cfg: BuildConfig, counts: Counter) -> list[Trajectory]:
    """The bare-answer negatives of one GSM8K solution (chosen with a generator of their own, so the
    variants stay the same with or without them): `bare_answer` (the answer alone) and `skipped_steps`
    (the first k of L >= 2 reasoning lines, then the answer, where no kept line states the answer)."""
    answer = src.metadata.get("answer")
    if answer is None or cfg.bare_answers <= 0:
        return []
    rng = random.Random(f"{cfg.seed}:bare:{src.id}")
    if rng.random() >= cfg.bare_answers:
        return []
    meta = {**src.metadata}
    out = [Trajectory(id=f"{src.id}-bare_answer", question=src.question, steps=[rng.choice(_ANSWER_STYLES).format(a=answer)],
                      labels=[0.0], outcome=None, metadata={**meta, "kind": "bare_answer", "error_step": 0})]
    counts["bare_answer.made"] += 1
    steps = [_strip_marks(x).strip() for x in src.lines[:-1]]
    gold = num(answer)
    cuts = [k for k in range(1, len(steps)) if not any(num(m.group(1)) == gold for s in steps[:k] for m in NUMBER.finditer(s))]
    if not cuts:
        counts["skipped_steps.skipped"] += 1
        return out
    k = rng.choice(cuts)
    labels: list[float | None] = [1.0] * (k + 1)
    labels[k] = 0.0
    out.append(Trajectory(id=f"{src.id}-skipped_steps", question=src.question, steps=steps[:k] + [rng.choice(_ANSWER_STYLES).format(a=answer)],
                          labels=labels, outcome=None, metadata={**meta, "kind": "skipped_steps", "error_step": k, "kept_lines": k}))
    counts["skipped_steps.made"] += 1
    return out


def excluded_questions(paths: Iterable[str | Path], option: str = "--exclude") -> set[str]:
    """The problem texts of test files to keep out of training (`--exclude`): ProcessBench JSON (a list of
    items with `problem`) or JSONL records (`question`, or `problem`). Compared after `.strip()`."""
    import json

    out: set[str] = set()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise RecordError(f"{option} {path}: cannot read it ({e})") from None
        try:
            if text.lstrip().startswith("["):
                items = json.loads(text)
            else:
                items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise RecordError(f"{option} {path}: neither a JSON list nor JSONL ({e})") from None
        found = {str(it.get("question") or it.get("problem")).strip() for it in items
                 if isinstance(it, dict) and isinstance(it.get("question") or it.get("problem"), str)}
        if not found:
            raise RecordError(f"{option} {path}: no 'problem' or 'question' texts in it")
        out |= found
    return out


def drop_excluded(records: list[Trajectory], exclude: set[str]) -> tuple[list[Trajectory], int]:
    """(records whose question is not excluded, number of distinct questions dropped)."""
    dropped = {r.question for r in records if r.question.strip() in exclude}
    return [r for r in records if r.question not in dropped], len(dropped)


def split_with_sides(records: list[Trajectory], fraction: float, seed: int, dev_with: set[str],
                     train_with: set[str]) -> tuple[list[Trajectory], list[Trajectory], dict[str, int]]:
    """`split_by_question`, except that questions another source already holds out (`dev_with`) go to dev and
    those it trains on (`train_with`) stay in train, so a mix of sources that share problems stays disjoint."""
    forced_dev = {r.question for r in records if r.question.strip() in dev_with}
    forced_train = {r.question for r in records if r.question.strip() in train_with} - forced_dev
    free = [r for r in records if r.question not in forced_dev and r.question not in forced_train]
    train, dev = split_by_question(free, fraction, seed)
    dev_set = {r.question for r in dev} | forced_dev
    sides = {"dev_with": len(forced_dev), "train_with": len(forced_train)}
    return [r for r in records if r.question not in dev_set], [r for r in records if r.question in dev_set], sides


def warn_dev_split(dev: list[Trajectory], path: Path, fraction: float) -> None:
    """A dev split that cannot choose a threshold (one class, too few records) is said at build time, not
    found out as a NaN after training; none asked for (dev_fraction 0, nothing held out) is not."""
    warning = dev_split_warning([r.labels for r in dev], [r.first_error for r in dev])
    if warning and (dev or fraction > 0):
        log.warning("%s: %s", path, warning)


def _build(sources: Iterable[Source], extra: list[Trajectory], out_dir: str | Path, cfg: BuildConfig, skipped: list[str], origin: str,
           exclude: set[str] | None = None, make: Callable[[Source, BuildConfig, random.Random, Counter], list[Trajectory]] | None = None,
           known: tuple[str, ...] = KINDS, dev_with: set[str] | None = None, train_with: set[str] | None = None) -> dict:
    """`make` gives the records of one source (default: GSM8K-style variants and bare answers), `known` its error kinds;
    `dev_with` / `train_with`: problems another source holds out / trains on keep that side (`split_with_sides`)."""
    rng = random.Random(cfg.seed)
    counts: Counter = Counter()
    records = list(extra)
    n_sources = 0
    for src in sources:
        n_sources += 1
        if make is not None:
            records += make(src, cfg, rng, counts)
            continue
        records += variants_of(src, cfg, rng, counts)
        records += bare_answers_of(src, cfg, counts)
    for s in skipped[:20]:
        log.warning("skipped %s", s)
    if len(skipped) > 20:
        log.warning("... and %d more skipped lines", len(skipped) - 20)
    records, excluded = drop_excluded(records, exclude or set())
    train, dev, sides = split_with_sides(records, cfg.dev_fraction, cfg.seed, dev_with or set(), train_with or set())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(dev, out / "dev.jsonl")
    warn_dev_split(dev, out / "dev.jsonl", cfg.dev_fraction)
    kinds = {k: {"made": counts[f"{k}.made"], "skipped": counts[f"{k}.skipped"]} for k in cfg.kinds_for(known)}
    originals = [r for r in records if r.metadata.get("kind") == "original"]
    label_counts = Counter("good" if lab > 0.5 else "bad" if lab < 0.5 else "neutral" for r in records for lab in (r.labels or []) if lab is not None)
    summary = {
        "source": origin,
        "solutions": n_sources,
        "skipped_lines": len(skipped),
        "skipped": skipped[:100],
        "records": len(records),
        "originals": len(originals),
        "steps_per_solution": round(sum(len(r.steps) for r in originals) / max(1, len(originals)), 3),
        "variants": kinds,
        "bare_answers": {k: {"made": counts[f"{k}.made"], "skipped": counts[f"{k}.skipped"]} for k in ("bare_answer", "skipped_steps")},
        "extra_records": len(extra),
        "excluded_problems": excluded,
        "sides_from_other_sources": sides,
        "labels": dict(label_counts),
        "unsupervised_steps": sum(lab is None for r in records for lab in (r.labels or [])),
        "train_records": len(train),
        "dev_records": len(dev),
        "dev_questions": len({r.question for r in dev}),
        "config": {"variants": cfg.variants, "kinds": list(kinds), "seed": cfg.seed, "dev_fraction": cfg.dev_fraction, "bare_answers": cfg.bare_answers},
    }
    write_json(out / "summary.json", summary)
    return summary


def build_from_gsm8k(path: str | Path, out_dir: str | Path, cfg: BuildConfig, exclude: set[str] | None = None, dev_with: set[str] | None = None,
                     train_with: set[str] | None = None) -> dict:
    sources, skipped = read_gsm8k(path, cfg.limit)
    return _build(sources, [], out_dir, cfg, skipped, f"gsm8k: {path}", exclude, dev_with=dev_with, train_with=train_with)


def sources_from_steps(records: Iterable[Trajectory]) -> list[Source]:
    """Plain step lists (no marks): arithmetic statements get marks so they can vary."""
    return [Source(id=r.id.removesuffix("-orig"), question=r.question, lines=[mark_statements(s) for s in r.steps],
                   metadata={k: v for k, v in r.metadata.items() if k == "source"}) for r in records]


def build_from_steps(records: list[Trajectory], out_dir: str | Path, cfg: BuildConfig, origin: str, keep_given: bool = True,
                     exclude: set[str] | None = None, dev_with: set[str] | None = None,
                     train_with: set[str] | None = None) -> dict:
    """Variants of the all-good records (labels all 1, or none); with keep_given, the given
    labelled records (e.g. PRMBench's modified processes) are written too."""
    originals = [r for r in records if r.labels is None or all(lab == 1.0 for lab in r.labels)]
    given = [r for r in records if r not in originals] if keep_given else []
    if cfg.limit is not None:
        originals = originals[: cfg.limit]
    return _build(sources_from_steps(originals), given, out_dir, cfg, [], origin, exclude, dev_with=dev_with, train_with=train_with)


def read_step_records(paths: list[str], fmt: str) -> list[Trajectory]:
    """Records for `data steps`/`data prmbench`: any format the trainer reads; a bad line is an error
    of the reader (PRMBench's reader skips and counts invalid items itself)."""
    from ..records import load_records

    out: list[Trajectory] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for p in paths:
        for r in load_records(p, fmt):
            key = (r.question, tuple(r.steps))
            if key in seen:  # PRMBench repeats each original once per error type
                continue
            seen.add(key)
            out.append(r)
    if not out:
        raise RecordError(f"no records in {', '.join(paths)}")
    return out
