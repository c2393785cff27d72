"""`prm-distill <command>`: the only place (with recalibration) that ties the stages together.

Exit codes are the same for every command (`exits.py`): 0 done, 2 bad input, 3 drift (recalibrate),
4 a judge or backend unavailable, 130 interrupted (SIGINT/SIGTERM). A command returns 0 or 3; every
other code comes from `exit_table()`, applied once in `main`, which also says what work is kept (a
command names it in `args.kept` once it knows its output folder) and how to resume.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import sys
import time
from pathlib import Path

from . import exits, stop
from .atomic import atomic_open, dumps, write_json
from .config import ConfigError, add_flags, flag_values, help_text, load_config
from .records import FORMATS, RecordError, Trajectory, read_inputs, steps_of


def cmd_train(args: argparse.Namespace) -> int:
    """Exit 0 when trained (or already finished: nothing is retrained); 2 when optim.output_dir holds
    another run (the message names what changed; --fresh or another folder); 130 on SIGTERM/SIGINT."""
    from .train import TrainJobConfig, train

    if args.help_config:
        print("\n".join(help_text(TrainJobConfig)))
        return 0
    cfg = load_config(TrainJobConfig, args.config, args.overrides)
    args.kept = f"the newest resumable checkpoint is kept in {Path(cfg.optim.output_dir) / 'checkpoints'}"
    summary = train(cfg, fresh=args.fresh)
    if summary.get("already_finished"):
        print(f"already finished: {summary['already_finished']} (exported at step {summary.get('steps')}); nothing retrained. "
              f"A larger optim.max_steps continues it, --fresh starts it over")
        return 0
    dev = summary.get("dev")
    if summary.get("dev_problem"):
        print(f"dev: unusable ({summary['dev_problem']}): the checkpoint stores no threshold (eval, recalibrate and the RL scorer decide at 0.5)")
    elif dev:
        print(f"dev: auroc {dev['auroc']:.3f}  f1 {dev['processbench_f1']:.3f}  threshold {dev['threshold']:.3f}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate_files, format_report
    from .serve.engine import PRMEngine

    missing = [f for f in [*args.data, *(args.dev or [])] if not Path(f).is_file()]
    if missing:  # bad input (2) before a model loads
        raise FileNotFoundError(f"data file not found: {', '.join(missing)}")
    engine = PRMEngine.from_checkpoint(args.model, device=args.device, verifier=not args.no_verifier)
    # both checkpoints load before any scoring: a bad --against fails in seconds, not after the first model's pass
    against = PRMEngine.from_checkpoint(args.against, device=args.device, verifier=not args.no_verifier) if args.against else None
    rep = evaluate_files(engine, args.data, args.format, threshold=args.threshold, dev_files=args.dev or (), limit=args.limit, dev_limit=args.dev_limit or None,
                         dev_format=args.dev_format, against=against)
    print(format_report(rep))
    if args.output:
        write_json(args.output, rep)
        print(f"report written to {args.output}")
    return 0


def _score_input(obj: dict, lineno: int) -> tuple[int, dict]:
    """(line, record) for score: `question` plus `steps` or `response` (split with the shared splitter)."""
    obj = {**obj, "steps": steps_of(obj)}
    Trajectory(id=str(obj.get("id", lineno)), question=obj.get("question"), steps=obj["steps"])  # type: ignore[arg-type]  # checked there
    return lineno, obj


def cmd_score(args: argparse.Namespace) -> int:
    from .serve.engine import PRMEngine

    items = read_inputs(args.input, _score_input)  # strict: one output line per input line, or none
    engine = PRMEngine.from_checkpoint(args.model, device=args.device, verifier=not args.no_verifier)
    t0 = time.time()
    scores = engine.score([(o["question"], o["steps"]) for _, o in items])
    elapsed = time.time() - t0
    out = Path(args.output)
    with atomic_open(out) as f:
        for (lineno, o), s in zip(items, scores):
            f.write(dumps({"id": o.get("id", lineno), "question": o["question"], "steps": o["steps"], "step_scores": s}, ensure_ascii=False) + "\n")
    n_steps = sum(len(s) for s in scores)
    print(f"scored {len(items)} trajectories ({n_steps} steps) in {elapsed:.2f}s -> {out}")
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    from .labeling import LabelJobConfig, run_label_job

    if args.help_config:
        print("\n".join(help_text(LabelJobConfig)))
        return 0
    cfg = load_config(LabelJobConfig, args.config, args.overrides)
    args.kept = f"completed records and cached answers are kept in {cfg.output}"
    s = run_label_job(cfg)
    votes = [f"{name} {s[key]}" for name, key in (("invalid-vote rate", "invalid_vote_rate"), ("agreement", "vote_agreement")) if s[key] is not None]
    print(f"labelled {s['records']} rollouts ({s['labelled_steps']}/{s['steps']} steps supervised, {s['skipped_lines']} bad lines skipped); "
          f"{', '.join(votes) or 'no judge votes to rate'}; "  # a rule (reference, verifier alone) casts no vote that can be invalid
          f"{s['this_run']['requests_sent']} requests this run -> {cfg.output}/labels.jsonl, {cfg.output}/summary.json")
    return 0


# Shortcut flags of the YAML commands: option -> config key (type, choices and help come from the key's field).
ROLLOUT_FLAGS = {"--policy": "policy.policy", "--problems": "problems", "--output": "output", "--k": "k", "--temperature": "temperature",
                 "--max-new-tokens": "max_new_tokens", "--backend": "policy.backend", "--base-url": "policy.base_url", "--seed": "seed",
                 "--dataset-split": "dataset_split", "--limit": "limit", "--device": "policy.device", "--batch-size": "policy.batch_size",
                 "--concurrency": "policy.concurrency", "--policy-version": "policy.version"}
RECALIBRATE_FLAGS = {"--method": "calibration.method"}


def cmd_rollout(args: argparse.Namespace) -> int:
    """Exit 0 when every sample is written; 4 when the policy server gave up, 130 on SIGTERM/SIGINT (the shard in hand
    is written first; a rerun resumes); 2 on bad input."""
    from .rollout import RolloutConfig, run_rollout

    if args.help_config:
        print("\n".join(help_text(RolloutConfig)))
        return 0
    cfg = load_config(RolloutConfig, args.config, args.overrides, values=flag_values(args, ROLLOUT_FLAGS))
    args.kept = f"every finished sample is kept in {cfg.output}"
    s = run_rollout(cfg)
    acc = "n/a (no gold answers)" if s["accuracy"] is None else f"{s['accuracy']:.3f} (pass@{s['k']} {s['pass_at_k']:.3f})"
    print(f"rolled out {s['problems']} problems x {s['k']} samples with {s['generator']} ({s['this_run']['samples_generated']} generated this run); "
          f"accuracy {acc}; {s['no_answer_found']} without an answer -> {cfg.output}/rollouts.jsonl, {cfg.output}/summary.json")
    return 0


def _check_dev_files(args: argparse.Namespace) -> None:
    missing = [f for f in args.dev or [] if not Path(f).is_file()]
    if missing:  # bad input (2) before anything is written
        raise FileNotFoundError(f"dev file not found: {', '.join(missing)}")


def _store_dev_threshold(args: argparse.Namespace) -> None:
    """The threshold of a written checkpoint (`--output`), chosen on `--dev` with eval's rule and sample, or why none is."""
    from .average import choose_threshold_into

    if args.dev:
        threshold, source = choose_threshold_into(args.output, args.dev, device=args.device, dev_limit=args.dev_limit,
                                                  fmt=getattr(args, "dev_format", "jsonl"))
        print(f"threshold {threshold:.3f} ({source})")
    else:
        print("no threshold stored (no --dev): eval, the server and the RL scorer decide at 0.5 until one is chosen")


def cmd_average(args: argparse.Namespace) -> int:
    """Exit 0 when the averaged checkpoint is written; 2 when the checkpoints cannot be averaged (what differs
    is named) or --output exists and is not empty."""
    from .average import average_checkpoints

    _check_dev_files(args)
    provenance = average_checkpoints(args.model, args.output, args.weight)
    mix = ", ".join(f"{m['path']} x {m['weight']:.3f}" for m in provenance["averaged_from"])
    print(f"averaged {len(args.model)} checkpoints ({mix}) -> {args.output}")
    _store_dev_threshold(args)
    return 0


def cmd_import_trl(args: argparse.Namespace) -> int:
    """Exit 0 when the imported checkpoint is written; 2 when the folder is not a PRM TRL could have saved (why is
    named) or --output exists and is not empty."""
    from .import_trl import import_trl, read_separator

    _check_dev_files(args)
    sidecar = import_trl(args.model, args.output, separator=read_separator(args.separator), max_length=args.max_length)
    print(f"imported {args.model} -> {args.output} (layout trl: separator {sidecar.step_tag!r} = ids "
          f"{sidecar.training['separator_ids']}, windows of {sidecar.max_length} tokens)")
    _store_dev_threshold(args)
    return 0


def cmd_import_openrlhf(args: argparse.Namespace) -> int:
    """Exit 0 when the imported checkpoint is written; 2 when the folder is not a PRM OpenRLHF's train_prm could have
    saved, its tokens do not read as OpenRLHF read them (why is named), or --output exists and is not empty."""
    from .import_openrlhf import import_openrlhf, read_text_format

    _check_dev_files(args)
    fmt = read_text_format(args.question_format, args.step_format, args.joiner, args.add_special_tokens)
    sidecar = import_openrlhf(args.model, args.output, placeholder=args.placeholder, reward_tokens=tuple(args.reward_tokens),
                              text_format=fmt, max_length=args.max_length)
    tokens = sidecar.training["reward_tokens"]
    print(f"imported {args.model} -> {args.output} (layout openrlhf: placeholder {sidecar.step_tag!r} = id {sidecar.step_tag_id}, "
          f"P(good) = P({tokens['good'][0]!r}) / (P({tokens['good'][0]!r}) + P({tokens['bad'][0]!r})), windows of {sidecar.max_length} tokens)")
    _store_dev_threshold(args)
    return 0


def cmd_recalibrate(args: argparse.Namespace) -> int:
    """Exit 0: nothing flagged; 3: re-distillation advised (a drift flag or a floor); 2 on bad input; 4: judge unavailable."""
    from .recalibrate import RecalibrateConfig, run_recalibration

    if args.help_config:
        print("\n".join(help_text(RecalibrateConfig)))
        return 0
    missing = [flag for flag, value in (("--model", args.model), ("--heldout", args.heldout), ("--output", args.output)) if not value]
    if missing:
        raise ValueError(f"the following arguments are required: {', '.join(missing)}")
    cfg = load_config(RecalibrateConfig, args.config, args.overrides, values=flag_values(args, RECALIBRATE_FLAGS))
    if args.fresh:
        args.kept = f"the judge's answers on --fresh rollouts are cached in {Path(args.output) / 'fresh_label_cache.jsonl'}"
    rep = run_recalibration(args.model, args.heldout, args.output, fmt=args.format, fresh=args.fresh, label_config=args.label_config,
                            history=args.history, adopt=args.adopt, config=cfg, device=args.device)

    from .metrics import fmt as f

    prev = rep.get("previous")
    deltas = prev["deltas"] if prev else {}

    def change(key: str) -> str:
        return f" ({f(deltas[key], signed=True)})" if deltas.get(key) is not None else ""

    print(f"held-out: auroc {f(rep['auroc'])}{change('auroc')}  ece {f(rep['ece'])}{change('ece')}  mean score {f(rep['mean_score'])}{change('mean_score')}  "
          f"f1 {f(rep['processbench_f1'])}{change('processbench_f1')}  agreement ({rep['agreement_source']}) {f(rep['agreement'])}{change('agreement')}")
    print(f"previous report: {prev['path'] if prev else 'none'}")
    c = rep["calibration"]
    print(f"calibration: {c['method']} ECE {f(c['ece_before'])} -> {f(c['ece_after'])} on the evaluation split; {c.get('reason', '')}")
    audits = rep.get("audits")
    if audits:
        print(f"audits: {', '.join(audits['flags']) or 'no flag'}")
    print(rep["verdict"])  # the drift verdict (none without an earlier report), the floors, and whether to re-distil
    print(f"report: {Path(args.output) / 'report.json'}, {Path(args.output) / 'report.md'}, plots: {', '.join(rep['plots'].values())}")
    return exits.DRIFT if rep["redistill_advised"] else exits.OK


def cmd_pipeline(args: argparse.Namespace) -> int:
    """The main job (also `prm-distill demo`). Exit 0, 3 on drift; 2, 4 and 130 by `exit_table()`."""
    from .pipeline import PipelineConfig, main as pipeline_main
    from .pipeline.config import embedded_defaults

    if args.help_config:  # the values shown are the main job's (the packaged defaults.yaml)
        print("\n".join(help_text(PipelineConfig, defaults=embedded_defaults())))
        return 0
    args.kept = "completed stages are kept"
    return pipeline_main(args.config, args.overrides, args.iteration)


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve.config import server_config_from_args
    from .serve.runner import run_server

    return run_server(server_config_from_args(args))


def _add_dev_threshold_args(parser: argparse.ArgumentParser, own_rows: str) -> None:
    """An importer's options for choosing the stored threshold on a dev split (`_store_dev_threshold`)."""
    parser.add_argument("--dev", action="append", help="dev file to choose the stored threshold on (the rule and sample of eval --dev)")
    parser.add_argument("--dev-format", default="jsonl", choices=FORMATS, help=f"format of the --dev files ({own_rows})")
    parser.add_argument("--dev-limit", type=int, default=600, help="about this many dev records (whole questions, seeded); 0 = all")
    parser.add_argument("--device", default="auto")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prm-distill", description="Distil an LLM judge into a small, fast process reward model.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="fine-tune a backbone into a PRM and export the checkpoint")
    t.add_argument("--config", help="YAML config (see configs/train.yaml)")
    t.add_argument("--help-config", action="store_true", help="list every config key with its default and help")
    t.add_argument("--fresh", action="store_true", help="start over in optim.output_dir: remove its checkpoints, snapshots, export and "
                   "run.json, then train (a rerun with other settings is refused without it)")
    t.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. optim.max_steps=50")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint on labelled files (AUROC, ECE, ProcessBench F1)")
    e.add_argument("--model", required=True, help="exported checkpoint folder")
    e.add_argument("--data", required=True, action="append", help="labelled file (repeat for several splits)")
    e.add_argument("--format", default="jsonl", choices=FORMATS)
    e.add_argument("--threshold", type=float, help="decision threshold for F1 (else: --dev, the checkpoint's, or 0.5)")
    e.add_argument("--dev", action="append", help="dev file to choose the threshold on (never the evaluated files)")
    e.add_argument("--dev-format", choices=FORMATS, help="format of the --dev files (default: --format)")
    e.add_argument("--no-verifier", action="store_true", help="the model's scores alone, without the checkpoint's verifier rule (to compare)")
    e.add_argument("--limit", type=int, help="a seeded sample of whole questions per file, about N items (not the first N)")
    e.add_argument("--dev-limit", type=int, default=600, help="choose the threshold on a seeded sample of about this many dev records "
                   "(whole questions; the sample benchmarks/quality.py takes); 0 = all")
    e.add_argument("--against", metavar="MODEL", help="a second checkpoint scored on the same items: its step AUROC and --model's minus it, "
                   "with a 95%% paired bootstrap interval that resamples whole problems (items grouped by question); "
                   "--no-verifier applies to both")
    e.add_argument("--output", help="write the report as JSON here")
    e.add_argument("--device", default="auto")
    e.set_defaults(func=cmd_eval)

    s = sub.add_parser("score", help="per-step scores for records with question + steps (or response)")
    s.add_argument("--model", required=True)
    s.add_argument("--input", required=True, help="JSONL with question and steps (or response)")
    s.add_argument("--output", required=True, help="JSONL with step_scores added")
    s.add_argument("--no-verifier", action="store_true", help="the model's scores alone, without the checkpoint's verifier rule")
    s.add_argument("--device", default="auto")
    s.set_defaults(func=cmd_score)

    from .serve.config import add_server_arguments

    v = sub.add_parser("serve", help="HTTP scoring server with dynamic batching (POST /v1/score, /health, /metrics)")
    add_server_arguments(v)
    v.set_defaults(func=cmd_serve, own_signals=True)  # uvicorn drains in-flight requests on SIGTERM, then re-raises it

    lb = sub.add_parser("label", help="label rollouts with LLM judges (resumable): labels.jsonl + summary.json")
    lb.add_argument("--config", help="YAML config (see configs/label.yaml)")
    lb.add_argument("--help-config", action="store_true", help="list every config key with its default and help")
    lb.add_argument("overrides", nargs="*", help="key=value overrides, e.g. input=rollouts.jsonl mode=trajectory judge.base_url=http://host:8000/v1")
    lb.set_defaults(func=cmd_label)

    ro = sub.add_parser("rollout", help="k samples per problem from a policy, split into steps, answers checked (resumable): rollouts.jsonl")
    from .rollout.config import RolloutConfig

    add_flags(ro, RolloutConfig, ROLLOUT_FLAGS)
    ro.add_argument("--split", dest="dataset_split", help=argparse.SUPPRESS)  # the old name of --dataset-split
    ro.add_argument("--config", help="YAML with rollout settings (see --help-config); flags override it")
    ro.add_argument("--help-config", action="store_true", help="list every setting with its default and help")
    ro.add_argument("overrides", nargs="*", help="key=value overrides, e.g. policy.vllm.tensor_parallel_size=2 policy.top_p=0.95")
    ro.set_defaults(func=cmd_rollout)

    a = sub.add_parser("average", help="one checkpoint from the mean of several checkpoints' weights (e.g. a run's last snapshots)")
    a.add_argument("--model", required=True, action="append", help="checkpoint folder (repeat: at least two, same architecture and tokenizer)")
    a.add_argument("--weight", type=float, action="append", help="mixing weight per --model, in order (default: equal)")
    a.add_argument("--output", required=True, help="new folder for the averaged checkpoint (refused if it exists and is not empty)")
    a.add_argument("--dev", action="append", help="dev file to choose the stored threshold on (the rule and sample of eval --dev)")
    a.add_argument("--dev-limit", type=int, default=600, help="about this many dev records (whole questions, seeded); 0 = all")
    a.add_argument("--device", default="auto")
    a.set_defaults(func=cmd_average)

    it = sub.add_parser("import-trl", help="a PRM trained by TRL's PRMTrainer, made a checkpoint here (scored as TRL scored it)")
    it.add_argument("--model", required=True, help="the folder PRMTrainer saved (*ForTokenClassification, safetensors, tokenizer)")
    it.add_argument("--output", required=True, help="new folder for the checkpoint (refused if it exists and is not empty)")
    it.add_argument("--separator", default="\\n", help="PRMConfig.step_separator the model was trained with (default: a newline; "
                    "type \\n for a newline, \\t for a tab)")
    it.add_argument("--max-length", type=int, default=1024, help="tokens per window, PRMConfig.max_length (longer trajectories are windowed)")
    _add_dev_threshold_args(it, "trl: PRMTrainer's own rows")
    it.set_defaults(func=cmd_import_trl)

    io = sub.add_parser("import-openrlhf", help="a PRM trained by OpenRLHF's train_prm (a causal LM), made a checkpoint here (scored as it scored)")
    io.add_argument("--model", required=True, help="the folder train_prm saved (*ForCausalLM, safetensors, tokenizer holding the placeholder)")
    io.add_argument("--output", required=True, help="new folder for the checkpoint (refused if it exists and is not empty)")
    io.add_argument("--placeholder", default="ки", help="--placeholder_token it was trained with (one token; default Math-Shepherd's ки)")
    io.add_argument("--reward-tokens", nargs=2, default=["+", "-"], metavar=("GOOD", "BAD"), help="--reward_tokens, good first (default + -)")
    io.add_argument("--question-format", help="how the question opens the text (default '{question} ': Math-Shepherd's)")
    io.add_argument("--step-format", help="how a step is written, {n} its number, the placeholder after {step} (default 'Step {n}: {step} ки')")
    io.add_argument("--joiner", help="between steps (default \\n, a newline; type \\n for a newline, \\t for a tab)")
    io.add_argument("--add-special-tokens", action="store_true", help="tokenise with the tokenizer's special tokens (BOS), as a model card's "
                    "tokenizer.encode(text) does (Math-Shepherd's own PRM); train_prm tokenised without them (the default)")
    io.add_argument("--max-length", type=int, default=2048, help="tokens per window, train_prm's --max_len (longer trajectories are windowed)")
    _add_dev_threshold_args(io, "openrlhf: train_prm's own rows")
    io.set_defaults(func=cmd_import_openrlhf)

    r = sub.add_parser("recalibrate", help="held-out metrics vs the last report, drift flags (exit 3: re-distil), checked calibration, audits")
    r.add_argument("--model", help="exported checkpoint folder")
    r.add_argument("--heldout", help="fixed labelled held-out set, never trained on (ids checked against the model's training_ids.txt)")
    r.add_argument("--format", default="jsonl", choices=FORMATS, help="format of --heldout")
    r.add_argument("--fresh", help="fresh policy rollouts (JSONL: id, question, steps or response); a sample is labelled by the judge")
    r.add_argument("--label-config", help="labeling config of the judge for --fresh (see configs/label.yaml)")
    r.add_argument("--history", help="folder of earlier reports; the newest is compared with this one")
    r.add_argument("--output", help="folder for report.json, report.md and the PNG plots")
    r.add_argument("--adopt", action="store_true", help="write the fitted calibration into the sidecar when it improves ECE on the evaluation split")
    from .recalibrate.config import RecalibrateConfig

    add_flags(r, RecalibrateConfig, RECALIBRATE_FLAGS)
    r.add_argument("--config", help="YAML with recalibration settings (prm-distill recalibrate --help-config lists them)")
    r.add_argument("--help-config", action="store_true", help="list every setting with its default and help")
    r.add_argument("--device", default="cpu")
    r.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. drift.auroc_drop=0.05 audit.max_trajectories=30")
    r.set_defaults(func=cmd_recalibrate)

    from .data.cli import add_data_parser

    add_data_parser(sub)

    from .select.cli import add_select_parsers

    add_select_parsers(sub)

    for name, about in (("pipeline", "rollout -> label -> train -> eval -> serve -> RL scoring -> recalibrate from one config (resumable; exit 3 on drift)"),
                        ("demo", "the main job on embedded defaults: an alias of `prm-distill pipeline`")):
        pl = sub.add_parser(name, help=about)
        pl.add_argument("--config", help="YAML merged into the embedded defaults (prm_distill/pipeline/defaults.yaml = configs/pipeline.yaml)")
        pl.add_argument("--iteration", type=int, default=1, help="iteration K (K > 1 continues from iteration K-1's checkpoint and report)")
        pl.add_argument("--help-config", action="store_true", help="list every setting with its embedded default and help")
        pl.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. name=exp1 train.optim.max_steps=50 rollout.k=4")
        pl.set_defaults(func=cmd_pipeline)
    return p


def exit_table() -> list[tuple[tuple[type[BaseException], ...], int, str]]:
    """Exception -> (exit code, what the message calls it), first match wins: THE table for every command.
    The upper floors' classes are imported here, when something was raised, not at startup."""
    from .generate import PolicyUnavailable
    from .labeling.judges import JudgeUnavailable
    from .select.backend import ScoringUnavailable

    return [
        ((exits.Interrupted, KeyboardInterrupt), exits.INTERRUPTED, "interrupted"),
        ((JudgeUnavailable,), exits.UNAVAILABLE, "judge unavailable"),
        ((PolicyUnavailable,), exits.UNAVAILABLE, "policy unavailable"),
        ((ScoringUnavailable,), exits.UNAVAILABLE, "scoring server unavailable"),
        ((exits.Unavailable,), exits.UNAVAILABLE, "unavailable"),
        ((ConfigError, RecordError, FileNotFoundError, ValueError), exits.BAD_INPUT, "error"),
    ]


def exit_code(e: BaseException) -> tuple[int, str] | None:
    """(code, name) of an exception by `exit_table()`; None for one it does not know (a bug: traceback)."""
    for kinds, code, name in exit_table():
        if isinstance(e, kinds):
            return code, name
    return None


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone (`prm-distill ... | head`): poll reports an error on the write end."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no real stdout: trust the error
        return True
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # accelerate logs every file of every checkpoint at INFO
        logging.getLogger("accelerate").setLevel(logging.WARNING)
    args.kept = None  # what a stopped command keeps, once it knows (the message says so, with how to resume)
    try:
        if getattr(args, "own_signals", False):
            code = args.func(args)
        else:
            with stop.handle_signals():
                code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not as a traceback at interpreter exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a broken pipe elsewhere (a socket) is not the reader leaving: a bug, with its traceback
        with contextlib.suppress(OSError, ValueError):  # the exit-time flush then writes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.CLOSED_PIPE
    except BaseException as e:
        known = exit_code(e)
        if known is None:
            raise
        code, name = known
        detail = str(e) or type(e).__name__
        print(f"prm-distill {args.command}: {name}: {detail}", file=sys.stderr)
        if code in (exits.UNAVAILABLE, exits.INTERRUPTED) and args.kept:
            print(f"{args.kept}; rerun the same command to resume", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
