"""`prm-distill data gsm8k|prmbench|steps`: build step-labelled training data offline."""

from __future__ import annotations

import argparse

from ..config import add_options, from_options
from .build import BuildConfig, build_from_gsm8k, build_from_steps, read_step_records


def _print(summary: dict, output: str) -> None:
    kinds = ", ".join(f"{k} {v['made']} made / {v['skipped']} skipped" for k, v in summary["variants"].items())
    print(f"{summary['solutions']} solutions ({summary['skipped_lines']} input lines skipped) -> {summary['records']} records "
          f"({summary['originals']} originals, {summary['extra_records']} given); variants: {kinds}")
    bare = summary.get("bare_answers") or {}
    if any(v["made"] for v in bare.values()):
        print("bare-answer negatives: " + ", ".join(f"{k} {v['made']} made / {v['skipped']} skipped" for k, v in bare.items()))
    print(f"train {summary['train_records']}, dev {summary['dev_records']} ({summary['dev_questions']} questions) -> "
          f"{output}/train.jsonl, {output}/dev.jsonl, {output}/summary.json")


def cmd_data(args: argparse.Namespace) -> int:
    cfg = from_options(BuildConfig, args)
    if args.source == "gsm8k":
        summary = build_from_gsm8k(args.input[0] if len(args.input) == 1 else _one(args.input), args.output, cfg)
    else:
        fmt = "prmbench" if args.source == "prmbench" else args.format
        records = read_step_records(args.input, fmt)
        summary = build_from_steps(records, args.output, cfg, origin=f"{fmt}: {', '.join(args.input)}", keep_given=not args.originals_only)
    _print(summary, args.output)
    return 0


def _one(paths: list[str]) -> str:
    raise ValueError(f"data gsm8k takes one --input file, got {len(paths)}")


def add_data_parser(sub) -> None:
    p = sub.add_parser("data", help="build step-labelled data with first-error variants (GSM8K, PRMBench, any step lists)")
    p.add_argument("source", choices=("gsm8k", "prmbench", "steps"),
                   help="gsm8k: GSM8K JSONL (question, answer with ####); prmbench: PRMBench items; steps: records with question + steps")
    p.add_argument("--input", required=True, action="append", help="input file (repeat for several; gsm8k takes one)")
    p.add_argument("--output", required=True, help="folder for train.jsonl, dev.jsonl, summary.json")
    add_options(p, BuildConfig)
    p.add_argument("--format", default="jsonl", choices=("jsonl", "processbench", "prmbench"), help="format of --input for 'steps'")
    p.add_argument("--originals-only", action="store_true", help="prmbench/steps: write only the originals and their variants, not the given labelled records")
    p.set_defaults(func=cmd_data)
