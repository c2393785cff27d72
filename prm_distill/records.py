"""Step-labelled trajectory records: the one format every stage reads and writes.

A label is P(step is good) in [0, 1] (the mean of judge votes; 0.5 stays 0.5) or None when the
step is not supervised (e.g. steps after the first error in ProcessBench-style data). Records are
validated on load so a bad line fails with its file, line and field instead of deep in training.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from .atomic import atomic_open, dumps
from .steps import SplitConfig, StepSplitError, split_steps

FORMATS = ("jsonl", "processbench", "prmbench", "trl", "openrlhf")
T = TypeVar("T")
log = logging.getLogger("prm_distill.records")


class RecordError(ValueError):
    """A record is malformed; the message names where (file, line) and which field."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None, field: str | None = None):
        self.source, self.line, self.field, self.message = source, line, field, message
        where = ":".join(str(p) for p in (source, line) if p is not None)
        prefix = f"{where}: " if where else ""
        fld = f"field '{field}': " if field else ""
        super().__init__(f"{prefix}{fld}{message}")


@dataclass
class Trajectory:
    """One solution to one question, split into steps, with optional per-step labels."""

    id: str
    question: str
    steps: list[str]
    labels: list[float | None] | None = None
    votes: list[list[float]] | None = None
    judge: dict[str, Any] | None = None
    outcome: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def first_error(self) -> int:
        """0-based index of the first step labelled bad (< 0.5), or -1 (ProcessBench convention)."""
        for i, lab in enumerate(self.labels or []):
            if lab is not None and lab < 0.5:
                return i
        return -1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: v for k, v in d.items() if v is not None and not (k == "metadata" and not v)}

    @classmethod
    def from_dict(cls, d: Any) -> "Trajectory":
        if not isinstance(d, dict):
            raise RecordError(f"expected a JSON object, got {type(d).__name__}")
        unknown = set(d) - _FIELDS
        if unknown:
            raise RecordError(f"unknown field(s) {sorted(unknown)}; known: {sorted(_FIELDS)}", field=sorted(unknown)[0])
        for req in ("id", "question", "steps"):
            if req not in d:
                raise RecordError("missing", field=req)
        return cls(
            id=d["id"],
            question=d["question"],
            steps=d["steps"],
            labels=d.get("labels"),
            votes=d.get("votes"),
            judge=d.get("judge"),
            outcome=d.get("outcome"),
            metadata=d.get("metadata") or {},
        )


_FIELDS = {"id", "question", "steps", "labels", "votes", "judge", "outcome", "metadata"}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(t: Trajectory) -> None:
    """Raise RecordError naming the first bad field."""
    if isinstance(t.id, int) and not isinstance(t.id, bool):
        t.id = str(t.id)
    if not isinstance(t.id, str) or not t.id:
        raise RecordError("must be a non-empty string", field="id")
    if not isinstance(t.question, str) or not t.question.strip():
        raise RecordError("must be a non-empty string", field="question")
    if not isinstance(t.steps, list) or not t.steps:
        raise RecordError("must be a non-empty list of strings", field="steps")
    for i, s in enumerate(t.steps):
        if not isinstance(s, str) or not s.strip():
            raise RecordError("must be a non-empty string", field=f"steps[{i}]")
    if t.labels is not None:
        if not isinstance(t.labels, list) or len(t.labels) != len(t.steps):
            n = len(t.labels) if isinstance(t.labels, list) else type(t.labels).__name__
            raise RecordError(f"must be a list with one entry per step ({len(t.steps)}), got {n}", field="labels")
        for i, lab in enumerate(t.labels):
            if lab is None:
                continue
            if not _is_number(lab) or not 0.0 <= lab <= 1.0:
                raise RecordError(f"must be a number in [0, 1] or null, got {lab!r}", field=f"labels[{i}]")
            t.labels[i] = float(lab)
    if t.votes is not None:
        if not isinstance(t.votes, list) or len(t.votes) != len(t.steps):
            raise RecordError(f"must be a list with one list of votes per step ({len(t.steps)})", field="votes")
        for i, vs in enumerate(t.votes):
            if not isinstance(vs, list) or not all(_is_number(v) and 0.0 <= v <= 1.0 for v in vs):
                raise RecordError(f"must be a list of numbers in [0, 1], got {vs!r}", field=f"votes[{i}]")
    if t.judge is not None and not isinstance(t.judge, dict):
        raise RecordError("must be an object", field="judge")
    if t.outcome is not None and not _is_number(t.outcome):
        raise RecordError(f"must be a finite number, got {t.outcome!r}", field="outcome")
    if not isinstance(t.metadata, dict):
        raise RecordError("must be an object", field="metadata")


def _bare(err: RecordError) -> str:
    """The message of an error without its location prefixes, to re-attach a new location."""
    msg = str(err)
    if err.field:
        msg = msg.split(f"field '{err.field}': ", 1)[-1]
    return msg


def steps_of(obj: Mapping[str, Any], splitter: SplitConfig | None = None) -> Any:
    """The steps of an input record: its `steps` as given (checked where the record is built), or
    its raw `response` cut by the shared splitter. The one reader of "steps or a response to split"
    (`score`, `label`, the HTTP server); RecordError names the field."""
    if obj.get("steps") is not None:
        return obj["steps"]
    response = obj.get("response")
    if not isinstance(response, str):
        raise RecordError("needs 'steps' (list of strings) or 'response' (string)", field="steps")
    try:
        return split_steps(response, splitter)
    except StepSplitError as e:
        raise RecordError(str(e), field="response") from None


def iter_jsonl(path: str | os.PathLike, skipped: list[RecordError] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for each non-blank line; bad JSON names its line (and is collected
    in `skipped` instead of raised when a list is given)."""
    src = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    err = RecordError(f"invalid JSON ({e.msg} at column {e.colno})", source=src, line=lineno)
                    if skipped is None:
                        raise err from None
                    skipped.append(err)
    except UnicodeDecodeError as e:
        raise not_text(path, e) from None


def not_text(path: str | os.PathLike, e: UnicodeDecodeError) -> RecordError:
    """A JSON or JSONL file that is not UTF-8 text, often a Parquet file given with a JSON format: say which."""
    with open(path, "rb") as f:
        parquet = f.read(4) == b"PAR1"
    hint = ("; it is a Parquet file: the trl and openrlhf formats read Parquet (data.format / --format), "
            "`prm-distill data prm800k` PRM800K's") if parquet else ""
    return RecordError(f"not UTF-8 text (it holds the byte {e.object[e.start]:#04x}){hint}", source=str(path))


def read_inputs(path: str | os.PathLike, parse: Callable[[dict[str, Any], int], T], *, key: Callable[[T], str | None] | None = None,
                skipped: list[dict[str, Any]] | None = None, limit: int | None = None) -> list[T]:
    """The one reader of input records (`score`, `label`, `rerank`/`pairs`/`filter`): JSONL, one JSON
    object per line, turned into a `T` by `parse(object, line)` (which raises RecordError naming the
    field; `steps_of` reads "steps or a response to split").

    The one bad-line policy: invalid JSON, a non-object, a record `parse` refuses and a repeated
    `key` (the id) are bad lines. Strict by default (RecordError naming file, line and field: a
    command that writes one output per input); with `skipped` a list, each bad line is logged,
    appended as {"line", "error"} and skipped (a long job should not die on one broken record).
    `limit` stops after that many good records."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    src = str(path)
    out: list[T] = []
    seen: dict[str, int] = {}
    bad_json: list[RecordError] = []  # filled by iter_jsonl with the lines before the one it yields

    def reject(err: RecordError) -> None:
        if skipped is None:
            raise err
        log.warning("%s: skipped", err)
        skipped.append({"line": err.line, "error": str(RecordError(err.message, field=err.field))})

    for lineno, obj in iter_jsonl(path, bad_json if skipped is not None else None):
        while bad_json:
            reject(bad_json.pop(0))
        if not isinstance(obj, dict):
            reject(RecordError(f"expected a JSON object, got {type(obj).__name__}", source=src, line=lineno))
            continue
        try:
            item = parse(obj, lineno)
            k = key(item) if key is not None else None
            if k is not None and k in seen:
                raise RecordError(f"duplicate id {k!r} (first on line {seen[k]})", field="id")
        except RecordError as e:
            reject(RecordError(e.message, source=src, line=lineno, field=e.field))
            continue
        if k is not None:
            seen[k] = lineno
        out.append(item)
        if limit is not None and len(out) >= limit:
            return out
    while bad_json:
        reject(bad_json.pop(0))
    return out


def read_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    out: list[Trajectory] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        try:
            rec = Trajectory.from_dict(obj)
        except RecordError as e:
            raise RecordError(_bare(e), source=str(path), line=lineno, field=e.field) from None
        if rec.id in seen:
            raise RecordError(f"duplicate id {rec.id!r} (first on line {seen[rec.id]})", source=str(path), line=lineno, field="id")
        seen[rec.id] = lineno
        out.append(rec)
    return out


def write_jsonl(records: Iterable[Trajectory], path: str | os.PathLike) -> None:
    """Write atomically: readers see the old file or the whole new one, never a torn one."""
    with atomic_open(path) as f:
        for r in records:
            f.write(dumps(r.to_dict(), ensure_ascii=False) + "\n")


def to_dataset(records: list[Trajectory]):
    """A Hugging Face `datasets.Dataset` (labels keep None for unsupervised steps)."""
    import datasets

    rows = [
        {
            "id": r.id,
            "question": r.question,
            "steps": r.steps,
            "labels": r.labels if r.labels is not None else [None] * len(r.steps),
            "outcome": r.outcome,
            "metadata": json.dumps(r.metadata),
        }
        for r in records
    ]
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "question": datasets.Value("string"),
            "steps": datasets.List(datasets.Value("string")),
            "labels": datasets.List(datasets.Value("float64")),
            "outcome": datasets.Value("float64"),
            "metadata": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_list(rows, features=features)


def from_dataset(ds, source: str = "dataset") -> list[Trajectory]:
    """Records from a `datasets.Dataset` with at least id, question, steps (validated per row)."""
    out = []
    for i, row in enumerate(ds):
        row = dict(row)
        if isinstance(row.get("metadata"), str):
            row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
        if row.get("labels") is not None and all(x is None for x in row["labels"]):
            row["labels"] = None
        row = {k: v for k, v in row.items() if k in _FIELDS}
        try:
            out.append(Trajectory.from_dict(row))
        except RecordError as e:
            raise RecordError(_bare(e), source=source, line=i, field=e.field) from None
    return out


def read_processbench(path: str | os.PathLike) -> list[Trajectory]:
    """ProcessBench: `label` is the 0-based earliest wrong step or -1. Steps before it are 1, it is 0,
    later steps are unsupervised (nothing is known about them)."""
    src = str(path)
    with open(path, encoding="utf-8") as f:
        try:
            items = json.load(f)
        except UnicodeDecodeError as e:
            raise not_text(path, e) from None
        except json.JSONDecodeError as e:
            # "Extra data" after one whole value: one JSON value per line, the jsonl format
            hint = "; this looks like JSONL (one record per line): did you mean --format jsonl?" if e.msg == "Extra data" else ""
            raise RecordError(f"invalid JSON ({e.msg} at line {e.lineno}, column {e.colno}){hint}", source=src) from None
    if not isinstance(items, list):
        raise RecordError("expected a JSON list of items (ProcessBench); for one record per line use --format jsonl", source=src)
    out = []
    for i, it in enumerate(items):
        try:
            if not isinstance(it, dict):
                raise RecordError("expected an object")
            for k in ("id", "problem", "steps", "label"):
                if k not in it:
                    raise RecordError("missing", field=k)
            steps, label = it["steps"], it["label"]
            if not isinstance(label, int) or isinstance(label, bool) or not -1 <= label < len(steps):
                raise RecordError(f"must be -1 or a step index below {len(steps)}, got {label!r}", field="label")
            n = len(steps)
            labels: list[float | None] = [1.0] * n if label == -1 else [1.0] * label + [0.0] + [None] * (n - label - 1)
            out.append(
                Trajectory(
                    id=str(it["id"]),
                    question=it["problem"],
                    steps=steps,
                    labels=labels,
                    outcome=float(it["final_answer_correct"]) if "final_answer_correct" in it else None,
                    metadata={"generator": it.get("generator"), "source": "processbench"},
                )
            )
        except RecordError as e:
            raise RecordError(_bare(e), source=src, line=f"item {i}", field=e.field) from None  # type: ignore[arg-type]
    return out


def read_prmbench(path: str | os.PathLike) -> list[Trajectory]:
    """PRMBench: each item gives two records, the original process (all steps good) and the modified
    one (steps before the first error step good, the 1-based `error_steps` bad, the rest unsupervised).
    A `multi_solutions` item (no error steps: the modified process is another correct solution) gives
    two all-good processes. An item that is truly invalid is skipped with a warning naming its line
    and counted: one bad item never fails the whole file."""
    src = str(path)
    out: list[Trajectory] = []
    no_error_inside, invalid = 0, []
    bad_json: list[RecordError] = []
    for lineno, it in iter_jsonl(path, skipped=bad_json):
        try:
            pair, had_error = _prmbench_item(it, lineno)
        except RecordError as e:
            invalid.append(lineno)
            log.warning("%s:%d: item skipped: %s", src, lineno, e)
            continue
        no_error_inside += not had_error
        out.extend(pair)
    for bad in bad_json:
        log.warning("item skipped: %s", bad)
        invalid.append(bad.line or 0)
    if not out and invalid:
        raise RecordError(f"no valid item ({len(invalid)} invalid, first on line {min(invalid)})", source=src)
    if no_error_inside or invalid:
        log.warning("%s: %d modified processes without an error step inside them (original kept), %d invalid items skipped%s",
                    src, no_error_inside, len(invalid),
                    f" (lines {', '.join(map(str, invalid[:10]))}{', ...' if len(invalid) > 10 else ''})" if invalid else "")
    return out


def _prmbench_item(it: Any, lineno: int) -> tuple[list[Trajectory], bool]:
    """(records of one item, whether its modified process was kept)."""
    if not isinstance(it, dict):
        raise RecordError("expected an object")
    for k in ("original_process", "modified_process", "error_steps"):
        if k not in it:
            raise RecordError("missing", field=k)
    q = it.get("modified_question") or it.get("question") or it.get("original_question")
    if q is None:
        raise RecordError("missing (also looked for modified_question, original_question)", field="question")
    orig, mod, errs = it["original_process"], it["modified_process"], it["error_steps"]
    kind = it.get("classification")
    if not isinstance(errs, list) or not all(isinstance(e, int) and not isinstance(e, bool) for e in errs):
        raise RecordError(f"must be a list of 1-based step indices, got {errs!r}", field="error_steps")
    multi = not errs and (kind == "multi_solutions" or not it.get("modified_steps"))
    if not errs and not multi:
        raise RecordError("is empty for an item that is not multi_solutions", field="error_steps")
    base = f'{it.get("idx", it.get("id", lineno))}-{kind}' if kind else str(it.get("idx", it.get("id", lineno)))
    oq = it.get("original_question") or q
    meta = {"source": "prmbench", "classification": kind}
    pair = [Trajectory(id=f"{base}-orig", question=oq, steps=orig, labels=[1.0] * len(orig), metadata=meta)]
    if multi:  # another correct solution: all good
        pair.append(Trajectory(id=f"{base}-mod", question=q, steps=mod, labels=[1.0] * len(mod), metadata={**meta, "error_steps": []}))
        return pair, True
    # Real PRMBench items sometimes cite steps beyond the modified process: those indices are
    # dropped (kept in metadata); an item with no valid error step left yields only its original.
    valid = sorted({e for e in errs if 1 <= e <= len(mod)})
    if not valid:
        return pair, False
    dropped = sorted(set(errs) - set(valid))
    first, bad = valid[0] - 1, {e - 1 for e in valid}
    labels: list[float | None] = [1.0 if i < first else (0.0 if i in bad else None) for i in range(len(mod))]
    mod_meta = {**meta, "error_steps": valid, **({"dropped_error_steps": dropped} if dropped else {})}
    pair.append(Trajectory(id=f"{base}-mod", question=q, steps=mod, labels=labels, metadata=mod_meta))
    return pair, True


def split_by_question(records: list[Trajectory], fraction: float, seed: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """(rest, held out): whole questions are held out, so no held-out question has a trajectory in the rest."""
    questions = sorted({r.question for r in records})
    random.Random(seed).shuffle(questions)
    n_out = int(round(len(questions) * fraction))
    held = set(questions[:n_out])
    return [r for r in records if r.question not in held], [r for r in records if r.question in held]


def sample_questions(records: list[Trajectory], limit: int | None, seed: int = 0) -> list[Trajectory]:
    """A seeded sample of whole questions holding at least `limit` records (all when there are fewer),
    in the records' order: every record of a kept question is kept, so a question's variants are never
    split. The one sampler of dev and evaluation files (train's `data.dev_limit`, `eval --limit`,
    benchmarks/quality.py), so the same files and seed give the same items on every path."""
    if limit is None or len(records) <= limit:
        return list(records)
    per_question: dict[str, int] = {}
    for r in records:
        per_question[r.question] = per_question.get(r.question, 0) + 1
    questions = sorted(per_question)
    random.Random(seed).shuffle(questions)
    keep: set[str] = set()
    n = 0
    for q in questions:
        if n >= limit:
            break
        keep.add(q)
        n += per_question[q]
    return [r for r in records if r.question in keep]


def parquet_rows(path: str | os.PathLike, required: Sequence[str], what: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a Parquet file as dicts; a file that is not readable Parquet, or lacks one of the `required`
    columns, is a RecordError naming it (`what` says whose columns those are)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise RecordError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise RecordError(f"{path}: no column(s) {', '.join(missing)} ({what} has {', '.join(required)}, ...)")
    if limit is not None:
        table = table.slice(0, limit)
    return table.to_pylist()


TRL_COLUMNS = ("prompt", "completions", "labels")


def read_trl(path: str | os.PathLike) -> list[Trajectory]:
    """TRL's stepwise-supervision rows (what its removed PRMTrainer read): `prompt`, `completions` (the steps)
    and `labels` (one bool per step, True = correct), as JSONL or Parquet (a hub dataset's shard, or
    `Dataset.to_parquet`). Every label is kept, after a wrong step too, as PRMTrainer trained on them; a
    conversational prompt (a list of role/content messages) gives its last user message as the question.
    A malformed row is a RecordError naming its file, row and field, as for JSONL records."""
    return _read_rows(path, TRL_COLUMNS, "TRL's stepwise supervision", _trl_row)


def _read_rows(path: str | os.PathLike, columns: Sequence[str], what: str, parse: Callable[[dict[str, Any], str], Trajectory]) -> list[Trajectory]:
    """The one loop over a trainer's own rows (JSONL, or Parquet by its suffix): `parse(row, id)` makes each
    record. Those rows have no id: a record's is the row's `id` if it has one, else `<file stem>:<row number>`
    (unique within and across files); ids must be unique; an error names the file, the row and the field."""
    parquet = Path(path).suffix == ".parquet"
    rows: Iterable[tuple[int, Any]] = enumerate(parquet_rows(path, columns, what), 1) if parquet else iter_jsonl(path)
    out: list[Trajectory] = []
    seen: dict[str, int] = {}
    for n, row in rows:
        try:
            if not isinstance(row, dict):
                raise RecordError(f"expected an object, got {type(row).__name__}")
            rec = parse(row, str(row["id"]) if row.get("id") is not None else f"{Path(path).stem}:{n}")
            if rec.id in seen:
                raise RecordError(f"duplicate id {rec.id!r} (first at {seen[rec.id]})", field="id")
            seen[rec.id] = n
            out.append(rec)
        except RecordError as e:
            where = f"row {n}" if parquet else n  # Parquet rows count from 1, as lines do
            raise RecordError(_bare(e), source=str(path), line=where, field=e.field) from None  # type: ignore[arg-type]
    return out


def _trl_row(row: dict[str, Any], rid: str) -> Trajectory:
    for k in TRL_COLUMNS:
        if row.get(k) is None:
            raise RecordError("missing", field=k)
    prompt = row["prompt"]
    if isinstance(prompt, list):  # conversational: [{"role": ..., "content": ...}, ...]
        from .serve.prompts import last_user_text

        prompt = last_user_text(prompt)
        if prompt is None:
            raise RecordError("a conversational prompt needs a user message with text", field="prompt")
    if not isinstance(prompt, str):
        raise RecordError(f"must be a string or a list of messages, got {type(prompt).__name__}", field="prompt")
    labels = row["labels"]
    if not isinstance(labels, list):
        raise RecordError(f"must be a list of booleans (True = correct step), got {type(labels).__name__}", field="labels")
    meta = {"source": "trl", **({"index": row["index"]} if "index" in row else {})}
    return Trajectory(id=rid, question=prompt, steps=row["completions"],
                      labels=[float(b) if isinstance(b, bool) else b for b in labels], metadata=meta)


PLACEHOLDER = "ки"  # Math-Shepherd's step mark, OpenRLHF's --placeholder_token in its PRM recipes
REWARD_TOKENS = {"+": 1.0, "-": 0.0}  # OpenRLHF's --reward_tokens + -: good, bad
_FIRST_STEP = re.compile(r"(?:^|\s)(Step 1\s*[:.])")


def read_openrlhf(path: str | os.PathLike) -> list[Trajectory]:
    """The rows OpenRLHF's removed PRM trainer read in its recipes (Math-Shepherd's layout: `--input_key input
    --label_key value --placeholder_token ки --reward_tokens + -`), as JSONL or Parquet: `input` is the question
    then the steps, each followed by the placeholder `ки`; `value` (or `label`) gives one label per placeholder,
    `+` / `-` or a number in [0, 1], or is Math-Shepherd's label text (the input with `+` or `-` in each
    placeholder's place). The question ends where `Step 1:` begins. Every label is kept, as OpenRLHF trained on
    them; a row that cannot be read so is a RecordError naming its file, row and field."""
    return _read_rows(path, ("input",), "OpenRLHF's process reward data", _openrlhf_row)


def _openrlhf_row(row: dict[str, Any], rid: str) -> Trajectory:
    text = row.get("input")
    if not isinstance(text, str):
        raise RecordError("missing" if text is None else f"must be a string, got {type(text).__name__}", field="input")
    key = "value" if row.get("value") is not None else "label"
    raw = row.get(key)
    if raw is None:
        raise RecordError("missing: one label per placeholder, in 'value' or 'label'", field="value")
    parts = text.split(PLACEHOLDER)
    if len(parts) < 2:
        raise RecordError(f"has no step: no placeholder {PLACEHOLDER!r} after a step", field="input")
    if parts[-1].strip():
        raise RecordError(f"text after the last placeholder has no label: {parts[-1].strip()[:60]!r}", field="input")
    found = _FIRST_STEP.search(parts[0])
    if found is None:
        raise RecordError("cannot tell the question from the first step: no 'Step 1:' before the first placeholder", field="input")
    question, steps = parts[0][: found.start(1)].strip(), [parts[0][found.start(1):].strip(), *(p.strip() for p in parts[1:-1])]
    labels = _marks_in_label_text(raw, parts, key) if isinstance(raw, str) else raw
    if not isinstance(labels, list):
        raise RecordError(f"must be a list with one label per placeholder, got {type(labels).__name__}", field=key)
    if len(labels) != len(steps):
        raise RecordError(f"{len(labels)} labels for {len(steps)} placeholders", field=key)
    values: list[float | None] = []
    for i, lab in enumerate(labels):
        if isinstance(lab, str) and lab.strip() in REWARD_TOKENS:
            values.append(REWARD_TOKENS[lab.strip()])
        elif _is_number(lab) and 0.0 <= lab <= 1.0:
            values.append(float(lab))
        else:
            raise RecordError(f"must be '+', '-' or a number in [0, 1], got {lab!r}", field=f"{key}[{i}]")
    meta = {"source": "openrlhf", **({"task": row["task"]} if row.get("task") is not None else {})}
    return Trajectory(id=rid, question=question, steps=steps, labels=values, metadata=meta)


def _marks_in_label_text(label: str, parts: list[str], key: str) -> list[str]:
    """Math-Shepherd's label text is its input with `+` or `-` where each placeholder was: read those marks,
    checking that everything else is the input's text."""
    marks, at = [], 0
    for i, part in enumerate(parts):
        if label[at: at + len(part)] != part:
            where = f"before placeholder {i + 1}" if i < len(parts) - 1 else "after the last placeholder"
            raise RecordError(f"the label text differs from the input {where}", field=key)
        at += len(part)
        if i < len(parts) - 1:
            marks.append(label[at: at + 1])
            at += 1
    if at != len(label):
        raise RecordError("the label text is longer than the input", field=key)
    return marks


def file_and_format(entry: str, default: str) -> tuple[str, str]:
    """A file entry of a config's file list, `PATH` or `FORMAT:PATH` (one of FORMATS, e.g. `trl:rows.parquet`): its
    path and format, `default` (the config's data.format) when none is named. A Windows drive (`C:`) is no format."""
    head, sep, rest = str(entry).partition(":")
    return (rest, head) if sep and head in FORMATS else (str(entry), default)


def load_records(path: str | os.PathLike, fmt: str = "jsonl") -> list[Trajectory]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return {"jsonl": read_jsonl, "processbench": read_processbench, "prmbench": read_prmbench, "trl": read_trl, "openrlhf": read_openrlhf}[fmt](path)
