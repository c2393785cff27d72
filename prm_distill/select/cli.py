"""`prm-distill rerank | pairs | filter`: each over `--model DIR` (in-process) or `--url URL` (a server).

Exit codes (`prm-distill`'s one table, `cli.exit_table`): 0 done; 2 bad arguments or input; 4 the scoring
server failed or could not be reached; 130 interrupted (what was written stays; rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..config import add_options, from_options
from .backend import close_scorer, describe, open_scorer
from .filter import FilterConfig, run_filter
from .pairs import PairsConfig, run_pairs
from .rerank import RerankConfig, format_table, run_rerank


def _common(p: argparse.ArgumentParser, output_help: str) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="exported checkpoint folder, scored in-process")
    src.add_argument("--url", help="base URL of a `prm-distill serve` server, e.g. http://127.0.0.1:8000")
    p.add_argument("--input", required=True, help="JSONL: question, steps or response, optional id, answer (gold), outcome, labels")
    p.add_argument("--output", required=True, help=output_help)
    p.add_argument("--device", default="auto", help="with --model: cpu, cuda or auto")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _print_invalid(command: str, invalid: list[dict[str, Any]], source: str) -> None:
    if invalid:
        lines = ", ".join(str(r["line"]) for r in invalid[:20]) + (" ..." if len(invalid) > 20 else "")
        print(f"prm-distill {command}: skipped {len(invalid)} invalid record(s) of {source} (lines {lines}); first: {invalid[0]['error']}",
              file=sys.stderr)


def cmd_select(args: argparse.Namespace) -> int:
    """Run one of the three commands; a dead server is exit 4 with the way to resume (`cli.exit_table`)."""
    scorer = None
    if not Path(args.input).is_file():  # bad input (2) before a model loads or a server is asked (4)
        raise FileNotFoundError(f"input file not found: {args.input}")
    args.kept = f"what was finished is kept in {args.output}"
    try:
        scorer = open_scorer(args.model, args.url, device=args.device)
        print(f"scoring with {describe(scorer)}")
        if args.command == "rerank":
            rep = run_rerank(scorer, args.input, args.output, from_options(RerankConfig, args), progress=not args.quiet)
            _report_rerank(rep)
        elif args.command == "pairs":
            rep = run_pairs(scorer, args.input, args.output, from_options(PairsConfig, args), progress=not args.quiet)
            print(f"{rep['trajectory_pairs']} trajectory pairs and {rep['step_pairs']} step pairs from {rep['problems']} problems "
                  f"({len(rep['singleton_problems'])} with one sample, {rep['problems_without_pairs']} without a pair) -> {args.output}")
        else:
            rep = run_filter(scorer, args.input, args.output, from_options(FilterConfig, args), dropped=args.dropped, progress=not args.quiet)
            _report_filter(rep)
    finally:
        if scorer is not None:
            close_scorer(scorer)
    _print_invalid(args.command, rep["invalid_records"], args.input)
    return 0


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _report_rerank(rep: dict[str, Any]) -> None:
    out = Path(rep["output"])
    print(f"reranked {rep['problems']} problems -> {out} (chosen by {rep['config']['agg']})")
    if rep["singleton_problems"]:
        print(f"{len(rep['singleton_problems'])} problem(s) with one sample: best-of-N undefined, left out of the report")
    if not rep["n_values"]:
        print("no problem has two or more samples: no best-of-N report")
    elif not rep["groups_with_answers"]:
        print("no gold answers (or outcomes): accuracies are null")
    else:
        print(f"best-of-N accuracy ({rep['subsampling']}):")
        print(format_table(rep))
        print("gain over majority vote at N=" + str(rep["n_values"][-1]) + ": "
              + ", ".join(f"{agg} {_f(g)}" for agg, g in rep["gain_over_majority_at_largest_n"].items()))
    print(f"report: {out.parent / 'report.json'}" + (f", plot: {rep['plot']}" if rep.get("plot") else ""))


def _report_filter(rep: dict[str, Any]) -> None:
    print(f"kept {rep['kept']}/{rep['records']} records (fraction {_f(rep['kept_fraction'])}) -> {rep['output']}; "
          f"dropped with reasons -> {rep['dropped_file']}")
    for source, p in rep["precision"].items():
        if p is not None:
            print(f"precision by {source}: kept {_f(p['kept_precision'])} vs {_f(p['base_rate'])} before filtering ({p['records']} records known)")
    if rep.get("histogram"):
        print(f"histogram: {rep['histogram']}")


def add_select_parsers(sub: Any) -> None:
    """The three subcommands, on `prm-distill`'s subparsers."""
    r = sub.add_parser("rerank", help="best-of-N: pick each problem's best sample by its step scores; accuracy vs majority vote, random, oracle")
    _common(r, "JSONL, one line per problem (chosen sample, every sample's scores); report.json and best_of_n.png go beside it")
    add_options(r, RerankConfig)
    r.set_defaults(func=cmd_select)

    p = sub.add_parser("pairs", help="DPO preference pairs (trajectory and step level) in TRL's format")
    _common(p, "JSONL of prompt/chosen/rejected rows; <stem>.summary.json and <stem>.progress.jsonl go beside it")
    add_options(p, PairsConfig)
    p.set_defaults(func=cmd_select)

    f = sub.add_parser("filter", help="SFT filtering: keep records whose every step (or aggregate) clears --min-step")
    _common(f, "JSONL of kept records (with step_scores, prm_score); <stem>.summary.json and <stem>.scores.png go beside it")
    f.add_argument("--dropped", help="JSONL of dropped records with a reason (default: <output stem>.dropped.jsonl)")
    add_options(f, FilterConfig)
    f.set_defaults(func=cmd_select)
