"""`prm-distill data math`: the MATH training set as step-labelled process data.

Each worked solution (LaTeX, final answer in `\\boxed{}`) is cut into ProcessBench-style paragraph
steps (`latex.split_solution`: paragraphs, long ones cut into groups of 1-3 whole sentences, never
inside math; a one-paragraph solution may stay one step and is kept). The original is kept with
every step 1 and outcome 1; up to `--variants` first-error variants of distinct kinds
(`latex.MATH_KINDS`) change one token of one step k: steps before k are 1, step k is 0, later steps
are unsupervised (null), and the wrong value is carried on where it is written again literally. A
kind without a site in a solution is skipped and counted (`<kind>.skipped`), never faked. Output
and split are those of every builder (`build._build`): train.jsonl, dev.jsonl (whole problems held
out), summary.json; `--exclude` drops problems equal to a test set's.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from ..records import RecordError, Trajectory, iter_jsonl
from .build import BuildConfig, Source, _build
from .latex import MATH_KINDS, Editor, boxed_answer, split_solution


def read_math(path: str | Path, limit: int | None = None) -> tuple[list[Source], list[str]]:
    """MATH lines (`problem`, `solution` with `\\boxed{}`, `level`, `type`, `id`) as sources whose lines
    are the steps; a bad line is skipped and named `path:line: reason`."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    out: list[Source] = []
    skipped: list[str] = []
    bad_json: list[RecordError] = []
    seen: set[str] = set()

    def name_bad_json() -> None:
        skipped.extend(f"{path}:{e.line}: {e.message}" for e in bad_json)  # invalid JSON (...)
        bad_json.clear()

    for lineno, obj in iter_jsonl(path, bad_json):
        name_bad_json()
        if limit is not None and len(out) >= limit:
            break
        where = f"{path}:{lineno}"
        if not isinstance(obj, dict):
            skipped.append(f"{where}: not a JSON object")
            continue
        problem, solution = obj.get("problem"), obj.get("solution")
        if not isinstance(problem, str) or not problem.strip():
            skipped.append(f"{where}: no 'problem' text")
            continue
        if not isinstance(solution, str) or not solution.strip():
            skipped.append(f"{where}: no 'solution' text")
            continue
        answer = boxed_answer(solution)
        if not answer:
            skipped.append(f"{where}: " + ("no \\boxed{...} answer in the solution" if answer is None else "an empty \\boxed{} answer"))
            continue
        sid = f"math-{obj['id']}" if isinstance(obj.get("id"), str) and obj["id"] else f"math-line{lineno}"
        if sid in seen:
            skipped.append(f"{where}: repeated id {sid.removeprefix('math-')!r}")
            continue
        seen.add(sid)
        meta = {"source": "math", "answer": answer, "level": obj.get("level"), "type": obj.get("type"), "math_id": obj.get("id")}
        out.append(Source(id=sid, question=problem.strip(), lines=split_solution(solution.strip()), metadata=meta))
    name_bad_json()
    return out, skipped


def variants_of(src: Source, cfg: BuildConfig, rng: random.Random, counts: Counter) -> list[Trajectory]:
    """The original (all steps 1, outcome 1) and up to cfg.variants first-error variants of distinct kinds."""
    steps = src.lines
    out = [Trajectory(id=f"{src.id}-orig", question=src.question, steps=steps, labels=[1.0] * len(steps), outcome=1.0,
                      metadata={**src.metadata, "kind": "original"})]
    editor = Editor(steps, rng)
    kinds = cfg.kinds_for(MATH_KINDS)
    rng.shuffle(kinds)
    made = 0
    for kind in kinds:
        if made >= cfg.variants:
            break
        e = editor.edit(kind)
        if e is None or e.steps[e.step] == steps[e.step] or any(e.steps == r.steps for r in out):
            counts[f"{kind}.skipped"] += 1
            continue
        labels: list[float | None] = [1.0] * e.step + [0.0] + [None] * (len(steps) - e.step - 1)
        answer = next((a for s in reversed(e.steps) if (a := boxed_answer(s)) is not None), None)
        out.append(Trajectory(id=f"{src.id}-{kind}", question=src.question, steps=e.steps, labels=labels,
                              outcome=0.0 if answer != src.metadata["answer"] else None,  # a changed final answer is known wrong
                              metadata={**src.metadata, "kind": kind, "error_step": e.step, "detail": e.detail}))
        counts[f"{kind}.made"] += 1
        made += 1
    return out


def build_from_math(path: str | Path, out_dir: str | Path, cfg: BuildConfig, exclude: set[str] | None = None, dev_with: set[str] | None = None,
                     train_with: set[str] | None = None) -> dict:
    """Process data from MATH's train.jsonl; problems in `exclude` (stripped texts) are dropped."""
    sources, skipped = read_math(path, cfg.limit)
    return _build(sources, [], out_dir, cfg, skipped, f"math: {path}", exclude, make=variants_of, known=MATH_KINDS, dev_with=dev_with, train_with=train_with)
