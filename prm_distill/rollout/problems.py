"""Problems to roll out: GSM8K JSONL, generic question/answer JSONL, a `datasets` dataset, or the
package's own generator (offline default).

A problem is a question with an optional gold answer; without one the rollout's `outcome` stays
null (and Monte-Carlo labelling refuses the records), never a silent 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..records import RecordError

EMBEDDED = "embedded"
QUESTION_KEYS = ("question", "problem", "prompt", "query")
ANSWER_KEYS = ("answer", "final_answer", "gold", "ground_truth")


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str | None  # the gold final answer (a number or a LaTeX expression), None when unknown
    reference: str | None = None  # the gold worked solution (GSM8K's `answer` text, a MATH `solution`), for judge.backend=reference


def gold_answer(obj: dict[str, Any]) -> str | None:
    """The final answer of a row: GSM8K's text after '####' (thousands separators dropped), else a
    plain answer field, else the boxed answer of a MATH-style `solution`."""
    for key in ANSWER_KEYS:
        value = obj.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if isinstance(value, str) and "####" in value:
            return re.sub(r"(?<=\d),(?=\d{3}\b)", "", value.rsplit("####", 1)[1]).strip() or None
        return str(value).strip()
    if isinstance(obj.get("solution"), str):
        from ..answers import extract_answer

        found = extract_answer(obj["solution"])
        return found.text if found is not None else None
    return None


def worked_solution(obj: dict[str, Any]) -> str | None:
    """The gold worked solution of a row: a `reference` field, GSM8K's `answer` text (reasoning before
    '####'), or a MATH-style `solution`; None when the row holds only a final answer."""
    for key in ("reference", "answer", "solution"):
        value = obj.get(key)
        if isinstance(value, str) and (key != "answer" or value.split("####", 1)[0].strip() and "####" in value):
            return value
    return None


def _problem(obj: Any, default_id: str, where: str) -> Problem:
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = next((obj[k] for k in QUESTION_KEYS if isinstance(obj.get(k), str) and obj[k].strip()), None)
    if question is None:
        raise RecordError(f"{where}: no question (one of the fields {', '.join(QUESTION_KEYS)} must be a non-empty string)")
    pid = obj.get("id", obj.get("problem_id", default_id))
    return Problem(str(pid), question, gold_answer(obj), worked_solution(obj))


def _unique(problems: Iterable[Problem], source: str) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.id in seen:
            raise RecordError(f"{source}: duplicate problem id {p.id!r} (rollouts are resumed by id)")
        seen.add(p.id)
        out.append(p)
    return out


def _from_jsonl(path: Path) -> list[Problem]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise RecordError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            out.append(_problem(obj, f"{path.stem}-{lineno}", f"{path}:{lineno}"))
    return out


def _from_dataset(ds, source: str) -> list[Problem]:
    return [_problem(dict(row), f"{source.rsplit('/', 1)[-1]}-{i}", f"{source} row {i}") for i, row in enumerate(ds)]


def _pick_split(dd, split: str | None, source: str):
    if not hasattr(dd, "keys"):
        return dd
    if split is None:
        split = "test" if "test" in dd else next(iter(dd.keys()))
    if split not in dd:
        raise ValueError(f"{source}: no split {split!r}; it has {sorted(dd.keys())}")
    return dd[split]


def load_problems(source: str, split: str | None = None, limit: int | None = None, seed: int = 0) -> list[Problem]:
    """`embedded[:N]` (the package's generator, N=32 by default), a JSON Lines file, a folder saved with
    `datasets.save_to_disk`, a .parquet/.csv file, or `hf:NAME[:CONFIG]` (datasets.load_dataset, needs
    the hub or its local cache). `split` picks a split of a dataset with several."""
    if source == EMBEDDED or source.startswith(EMBEDDED + ":"):
        from ..synthetic import SyntheticConfig, generate

        n = int(source.split(":", 1)[1]) if ":" in source else 32
        recs = generate(SyntheticConfig(n=n, seed=seed, corrupt_rate=0.0, id_prefix="problem"))
        problems = [Problem(r.id, r.question, str(r.metadata["answer"])) for r in recs]
    elif source.startswith("hf:"):
        import datasets

        name, _, config = source[3:].partition(":")
        problems = _from_dataset(_pick_split(datasets.load_dataset(name, config or None), split, source), source)
    else:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"problems not found: {source!r} (a JSONL file, a saved dataset folder, hf:NAME or embedded[:N])")
        if path.is_dir():
            import datasets

            problems = _from_dataset(_pick_split(datasets.load_from_disk(str(path)), split, source), source)
        elif path.suffix in (".parquet", ".csv"):
            import datasets

            problems = _from_dataset(datasets.load_dataset(path.suffix[1:], data_files=str(path), split="train"), source)
        else:
            problems = _from_jsonl(path)
    problems = _unique(problems, source)
    if not problems:
        raise ValueError(f"{source}: no problems")
    return problems[:limit] if limit is not None else problems
