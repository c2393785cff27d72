"""`prm-distill data gsm8k|math|prmbench|prm800k|steps`: build step-labelled training data offline."""

from __future__ import annotations

import argparse

from ..config import add_options, from_options
from ..records import FORMATS, read_jsonl
from .build import BuildConfig, build_from_gsm8k, build_from_steps, excluded_questions, read_step_records
from .math import build_from_math
from .prm800k import PRM800KConfig, build_from_prm800k


def _print(summary: dict, output: str) -> None:
    kinds = ", ".join(f"{k} {v['made']} made / {v['skipped']} skipped" for k, v in summary["variants"].items())
    print(f"{summary['solutions']} solutions ({summary['skipped_lines']} input lines skipped) -> {summary['records']} records "
          f"({summary['originals']} originals, {summary['extra_records']} given); variants: {kinds}")
    bare = summary.get("bare_answers") or {}
    if any(v["made"] for v in bare.values()):
        print("bare-answer negatives: " + ", ".join(f"{k} {v['made']} made / {v['skipped']} skipped" for k, v in bare.items()))
    print(f"train {summary['train_records']}, dev {summary['dev_records']} ({summary['dev_questions']} questions) -> "
          f"{output}/train.jsonl, {output}/dev.jsonl, {output}/summary.json")


def _print_prm800k(summary: dict, output: str) -> None:
    print(f"{summary['rows']} rows ({summary['malformed_rows']} malformed, named in summary.json) -> {summary['records']} records "
          f"over {summary['problems']} problems: {summary['first_error']} first-error, {summary['solutions']} all-correct, "
          f"{summary['alternatives']} alternatives; "
          f"skipped {summary['skipped']}")
    print(f"train {summary['train_records']}, dev {summary['dev_records']} ({summary['dev_questions']} problems) -> "
          f"{output}/train.jsonl, {output}/dev.jsonl, {output}/summary.json")


def cmd_data(args: argparse.Namespace) -> int:
    cfg = from_options(BuildConfig, args)
    exclude = excluded_questions(args.exclude or [])
    sides = {k: excluded_questions(getattr(args, k) or [], "--" + k.replace("_", "-")) for k in ("dev_with", "train_with")}
    if args.source == "gsm8k":
        summary = build_from_gsm8k(_one(args.input, "gsm8k"), args.output, cfg, exclude, **sides)
    elif args.source == "math":
        summary = build_from_math(_one(args.input, "math"), args.output, cfg, exclude, **sides)
    elif args.source == "prm800k":
        known = {(r.question.strip(), tuple(r.steps)) for f in (args.dev_with or []) + (args.train_with or []) for r in read_jsonl(f)}
        summary = build_from_prm800k(_one(args.input, "prm800k"), args.output, cfg, from_options(PRM800KConfig, args), exclude,
                                     known=known, **sides)
    else:
        fmt = "prmbench" if args.source == "prmbench" else args.format
        records = read_step_records(args.input, fmt)
        summary = build_from_steps(records, args.output, cfg, origin=f"{fmt}: {', '.join(args.input)}", keep_given=not args.originals_only,
                                   exclude=exclude, **sides)
    (_print_prm800k if args.source == "prm800k" else _print)(summary, args.output)
    if args.exclude:
        print(f"excluded {summary['excluded_problems']} problem(s) equal to one in {', '.join(args.exclude)}")
    return 0


def _one(paths: list[str], source: str) -> str:
    if len(paths) != 1:
        raise ValueError(f"data {source} takes one --input file, got {len(paths)}")
    return paths[0]


def add_data_parser(sub) -> None:
    p = sub.add_parser("data", help="build step-labelled data with first-error variants (GSM8K, PRMBench, any step lists)")
    p.add_argument("source", choices=("gsm8k", "math", "prmbench", "prm800k", "steps"),
                   help="gsm8k: GSM8K JSONL (question, answer with ####); math: MATH JSONL (problem, solution with \\boxed{}); "
                        "prmbench: PRMBench items; prm800k: PRM800K phase-1 Parquet "
                        "(human step ratings); steps: records with question + steps")
    p.add_argument("--input", required=True, action="append", help="input file (repeat for several; gsm8k takes one)")
    p.add_argument("--output", required=True, help="folder for train.jsonl, dev.jsonl, summary.json")
    add_options(p, BuildConfig)
    add_options(p, PRM800KConfig)
    p.add_argument("--exclude", action="append", metavar="FILE",
                   help="test file (ProcessBench JSON or JSONL records): drop every problem whose text equals one of its problems (repeat)")
    p.add_argument("--dev-with", action="append", metavar="FILE",
                   help="records of another source's dev split (e.g. runs/data/prmbench/dev.jsonl): their problems go to dev here too, so a mix "
                        "of sources that share problems (PRMBench, PRM800K and MATH do) stays problem-disjoint (repeat)")
    p.add_argument("--train-with", action="append", metavar="FILE",
                   help="records of another source's train split: their problems stay in train here (repeat); prm800k also drops its items equal to "
                        "one of theirs or of --dev-with's")
    p.add_argument("--format", default="jsonl", choices=FORMATS, help="format of --input for 'steps'")
    p.add_argument("--originals-only", action="store_true", help="prmbench/steps: write only the originals and their variants, not the given labelled records")
    p.set_defaults(func=cmd_data)
