"""Side by side with the peer: TRL 1.13's PRMTrainer (the last TRL release with it) versus our
trainer and engine, on the same backbone, the same PRMBench-derived rows, the same steps and batch,
one after the other on this machine. A benchmark that prints figures and ratios, not a test.

Rows: the PRMBench training items (../shared/data/prmbench), originals all good, modified
processes cut after their first error step; duplicates dropped, whole questions held out for our
dev split (our trainer picks its decision threshold there; TRL never sees it). Both trainers get
exactly the same training rows: TRL as prompt/completions/labels, ours as step records (JSONL).
Measured per run: train-loop wall time, non-pad tokens/s, peak RSS of the process (os.wait4),
ProcessBench GSM8K and MATH F1 at the threshold fixed in advance (0.5; ours also at its dev-chosen
threshold) and step AUROC; scoring throughput of our engine (batched, one pass per trajectory)
versus TRL-style scoring (the TRL model, one trajectory per forward pass).

TRL lives in its own virtual env (scripts/setup_trl.sh -> .venv-trl); this file is both the
orchestrator (run with the project's .venv) and the workers it starts, each stage in its own
process: `_trl-train` and `_trl-score` there (they import nothing of prm_distill), `_ours-score` here.

    scripts/setup_trl.sh
    .venv/bin/python benchmarks/vs_trl.py [--steps 80 --batch-size 4 --max-length 512 --limit N]
    .venv/bin/python benchmarks/vs_trl.py --steps 2 --rows 8 --dev-rows 8 --limit 10   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
PRMBENCH_KINDS = ("circular", "confidence", "counterfactual", "deception", "domain_inconsistency",
                  "missing_condition", "redundency", "step_contradiction")
SPLITS = ("gsm8k", "math")
TARGET_TRAIN, TARGET_SCORE = 1.5, 5.0  # the targets: x TRL's training and scoring tokens/s


# ----------------------------------------------------------------------------- worker (.venv-trl)

def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def trl_imports():
    """(PRMConfig, PRMTrainer) wherever the installed TRL keeps them (also used by tests/integrations/trl_prm_driver.py)."""
    try:  # where TRL 1.x keeps it
        from trl.experimental.prm import PRMConfig, PRMTrainer
    except ImportError:  # older releases
        from trl import PRMConfig, PRMTrainer
    return PRMConfig, PRMTrainer


def trl_sequence(PRMTrainer, tok, separator: str, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
    """(input ids, scored positions): the sequence PRMTrainer's own tokenize_row builds for a trajectory and the
    positions where it puts the step labels. Its arguments changed across TRL releases: only those it takes are given."""
    import inspect

    given = {"tokenizer": tok, "step_separator": separator, "max_length": None, "max_prompt_length": None,
             "max_completion_length": None, "train_on_last_step_only": False, "is_eval": True}
    names = inspect.signature(PRMTrainer.tokenize_row).parameters
    features = {"prompt": question, "completions": steps, "labels": [True] * len(steps)}
    row = PRMTrainer.tokenize_row(features, **{k: v for k, v in given.items() if k in names})
    return list(row["input_ids"]), [i for i, lab in enumerate(row["labels"]) if lab != -100]


def trl_train(a: argparse.Namespace) -> None:
    """Full fine-tune with PRMTrainer as its docs show; count the non-pad tokens the loop consumed."""
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification

    _threads(a.threads)
    PRMConfig, PRMTrainer = trl_imports()
    rows = [json.loads(x) for x in Path(a.rows).read_text(encoding="utf-8").splitlines() if x.strip()]
    tok = AutoTokenizer.from_pretrained(a.backbone)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForTokenClassification.from_pretrained(a.backbone, num_labels=2, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id

    class CountingCollator(DataCollatorForTokenClassification):
        """The default collator, counting non-pad tokens of every batch it builds."""

        tokens, batches = 0, 0

        def __call__(self, features, return_tensors=None):
            batch = super().__call__(features, return_tensors)
            CountingCollator.tokens += int(batch["attention_mask"].sum())
            CountingCollator.batches += 1
            return batch

    args = PRMConfig(
        output_dir=str(Path(a.out) / "trainer"), max_steps=a.steps, per_device_train_batch_size=a.batch_size,
        gradient_accumulation_steps=1, max_length=a.max_length, step_separator="\n", train_on_last_step_only=False,
        learning_rate=a.lr, bf16=False, fp16=False, seed=a.seed, logging_steps=max(1, a.steps // 8),
        save_strategy="no", eval_strategy="no", report_to="none", dataloader_num_workers=0, disable_tqdm=True,
        include_num_input_tokens_seen="non_padding", gradient_checkpointing=a.gradient_checkpointing == "on",
    )
    trainer = PRMTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         data_collator=CountingCollator(tok))
    kept = sum(int(lab != -100) for r in trainer.train_dataset["labels"] for lab in r)
    total = sum(len(r["labels"]) for r in rows)
    bad = sum(not lab for r in rows for lab in r["labels"])
    metrics = trainer.train().metrics
    tokens = int(trainer.state.num_input_tokens_seen)  # the Trainer's own non-pad count (the collator's is a cross-check)
    out = Path(a.out)
    trainer.save_model(str(out / "model"))
    tok.save_pretrained(str(out / "model"))
    result = {
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "steps": trainer.state.global_step, "tokens_seen": tokens, "train_wall_s": round(metrics["train_runtime"], 1),
        "tokens_per_s": round(tokens / max(metrics["train_runtime"], 1e-9), 1),
        "collator_tokens": CountingCollator.tokens, "collator_batches": CountingCollator.batches,
        "rows": len(rows), "step_labels": total, "bad_step_labels": bad, "step_labels_kept_after_truncation": kept,
        "learning_rate": a.lr, "gradient_checkpointing": a.gradient_checkpointing == "on", "train_loss": metrics.get("train_loss"),
    }
    (out / "trl_train.json").write_text(json.dumps(result, indent=2), encoding="utf-8")


def trl_score(a: argparse.Namespace) -> None:
    """TRL-style scoring: the sequence PRMTrainer's own tokenize_row builds (bos, prompt, each step followed
    by the separator), one trajectory per forward pass, P(good) read where it puts each step's label."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    _threads(a.threads)
    _, PRMTrainer = trl_imports()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForTokenClassification.from_pretrained(a.model, dtype=getattr(torch, a.dtype)).eval()
    items = [json.loads(x) for x in Path(a.items).read_text(encoding="utf-8").splitlines() if x.strip()]

    def encode(q: str, steps: list[str]) -> tuple[list[int], list[int]]:
        return trl_sequence(PRMTrainer, tok, "\n", q, steps)

    def one(ids: list[int], pos: list[int]) -> list[float]:
        logits = model(input_ids=torch.tensor([ids])).logits[0]
        return logits[pos].float().softmax(-1)[:, 1].tolist()

    with torch.inference_mode():
        one(*encode(items[0]["question"], items[0]["steps"]))  # warm-up, not timed
        t0, tokens, scores = time.perf_counter(), 0, []
        for it in items:
            ids, pos = encode(it["question"], it["steps"])
            tokens += len(ids)
            scores.append(one(ids, pos))
        wall = time.perf_counter() - t0
    Path(a.out).write_text(json.dumps({"scores": scores, "tokens": tokens, "wall_s": wall}), encoding="utf-8")


# ----------------------------------------------------------------------------- ours (.venv)

def ours_score(a: argparse.Namespace) -> None:
    """Our engine: every item in one batched call, one pass per trajectory window; raw model scores
    (the verifier rule is applied afterwards, so both variants come from one timed pass)."""
    from prm_distill.serve.engine import PRMEngine

    _threads(a.threads)
    engine = PRMEngine.from_checkpoint(a.model, device="cpu", dtype=a.dtype, verifier=False)
    items = [json.loads(x) for x in Path(a.items).read_text(encoding="utf-8").splitlines() if x.strip()]
    pairs = [(it["question"], it["steps"]) for it in items]
    engine.score(pairs[:1])  # warm-up, not timed
    tokens = sum(engine.encode(q, s).n_tokens for q, s in pairs)
    t0 = time.perf_counter()
    scores = engine.score(pairs)
    wall = time.perf_counter() - t0
    Path(a.out).write_text(json.dumps({"scores": scores, "tokens": tokens, "wall_s": wall}), encoding="utf-8")


def build_rows(args: argparse.Namespace, out: Path) -> dict:
    """The shared rows: PRMBench originals (all good) and modified processes cut after their first
    error step; train rows and dev rows from disjoint questions."""
    import dataclasses

    from prm_distill.records import load_records, split_by_question, write_jsonl

    files = [DATA / "prmbench" / f"train_p1_first400_4o_{k}.jsonl" for k in PRMBENCH_KINDS]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        sys.exit(f"PRMBench files missing (see ../shared/data/README.md): {', '.join(missing)}")
    seen, records = set(), []
    for f in files:
        for r in load_records(f, "prmbench"):
            labels = list(r.labels or [])
            bad = [i for i, lab in enumerate(labels) if lab is not None and lab < 0.5]
            if bad:
                r = dataclasses.replace(r, steps=r.steps[: bad[0] + 1], labels=labels[: bad[0] + 1])
            if any(lab is None for lab in r.labels or []) or not r.steps:
                continue
            key = (r.question, tuple(r.steps))
            if key not in seen:
                seen.add(key)
                records.append(r)
    train, dev = split_by_question(records, args.dev_fraction, args.seed)
    rng = random.Random(args.seed)
    rng.shuffle(train)
    rng.shuffle(dev)
    n_rows = args.rows or args.steps * args.batch_size
    if n_rows > len(train):
        sys.exit(f"--rows {n_rows} exceeds the {len(train)} training rows available")
    train, dev = train[:n_rows], dev[: args.dev_rows]
    rows_dir = out / "rows"
    rows_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(train, rows_dir / "ours_train.jsonl")
    write_jsonl(dev, rows_dir / "ours_dev.jsonl")
    with open(rows_dir / "trl_train.jsonl", "w", encoding="utf-8") as f:
        for r in train:
            f.write(json.dumps({"prompt": r.question, "completions": r.steps, "labels": [lab >= 0.5 for lab in r.labels]}) + "\n")
    labels = [lab for r in train for lab in r.labels]
    return {"available_train_rows": len(records), "train_rows": len(train), "dev_rows": len(dev),
            "modified_rows": sum(min(r.labels) < 0.5 for r in train), "step_labels": len(labels),
            "bad_share": round(sum(lab < 0.5 for lab in labels) / max(len(labels), 1), 4)}


def run(cmd: list[str], env: dict, log: list) -> dict:
    """Run one stage in its own process; its wall time, CPU time and peak RSS (os.wait4, this child
    only), and the machine's 1-minute load average before and after (a shared machine slows a stage)."""
    print("\n$ " + shlex.join(cmd), flush=True)
    log.append(shlex.join(cmd))
    load_before = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"stage failed with exit code {rc}: {shlex.join(cmd)}")
    return {"process_wall_s": round(wall, 1), "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2), "load_before": load_before, "load_after": round(os.getloadavg()[0], 2)}


def stage(out_dir: Path, reuse: bool, cmd: list[str], env: dict, log: list) -> dict:
    """A training stage, or with `reuse` the figures of the finished one already in out_dir."""
    record = out_dir / "stage.json"
    if reuse and record.is_file():
        print(f"\nreusing the training run in {out_dir}", flush=True)
        log.append("(reused) " + shlex.join(cmd))
        return {**json.loads(record.read_text()), "reused": True}
    out_dir.mkdir(parents=True, exist_ok=True)
    record.unlink(missing_ok=True)
    res = run(cmd, env, log)
    record.write_text(json.dumps(res), encoding="utf-8")
    return res


def evaluate(scores_by_split: dict, items_by_split: dict, thresholds: dict[str, float]) -> dict:
    from prm_distill.metrics import report

    out = {}
    for split, scores in scores_by_split.items():
        recs = items_by_split[split]
        labels, errors = [r.labels for r in recs], [r.first_error for r in recs]
        out[split] = {name: report(scores, labels, errors, t) for name, t in thresholds.items()}
    return out


def orchestrate(args: argparse.Namespace) -> None:
    from prm_distill.atomic import write_json
    from prm_distill.backbones import resolve_backbone
    from prm_distill.checkpoint import read_sidecar
    from prm_distill.metrics import paired_auroc_difference
    from prm_distill.records import load_records
    from prm_distill.verify import apply_rule

    trl_py = Path(args.trl_python)
    if not trl_py.is_file():
        sys.exit(f"no TRL env at {trl_py}: run scripts/setup_trl.sh first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    me = str(Path(__file__).resolve())
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    commands: list[str] = []
    backbone = resolve_backbone(args.backbone)
    data = build_rows(args, out)
    print(f"rows: {json.dumps(data)}\nbackbone: {backbone}", flush=True)

    items_by_split, item_files = {}, {}
    for split in SPLITS:
        recs = load_records(DATA / "processbench" / f"{split}.json", "processbench")
        if args.limit is not None and args.limit < len(recs):  # a seeded sample: both classes stay in it
            recs = random.Random(args.seed).sample(recs, args.limit)
        items_by_split[split] = recs
        item_files[split] = out / "rows" / f"processbench_{split}.jsonl"
        item_files[split].write_text("".join(json.dumps({"question": r.question, "steps": r.steps}) + "\n" for r in recs), encoding="utf-8")

    common = ["--threads", str(args.threads)]
    trl_dir, ours_dir = out / "trl", out / "ours"
    stages = {}
    stages["trl_train"] = stage(trl_dir, args.reuse, [str(trl_py), me, "_trl-train", "--backbone", backbone, "--rows", str(out / "rows" / "trl_train.jsonl"),
                               "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
                               "--lr", str(args.trl_lr), "--gradient-checkpointing", args.trl_gradient_checkpointing, "--seed", str(args.seed),
                               "--out", str(trl_dir), *common], env, commands)
    ours_overrides = [f"model.backbone={backbone}", f"model.max_length={args.max_length}",
                      f"data.train=[{out / 'rows' / 'ours_train.jsonl'}]", f"data.dev=[{out / 'rows' / 'ours_dev.jsonl'}]", "data.format=jsonl",
                      "data.limit=null", "data.dev_limit=null", f"optim.output_dir={ours_dir}", f"optim.max_steps={args.steps}",
                      f"optim.batch_size={args.batch_size}", "optim.gradient_accumulation_steps=1", "optim.max_minutes=null",
                      "optim.stop_at_step=null", 'optim.mixed_precision="no"', "optim.eval_steps=0", "optim.save_steps=0",
                      "optim.snapshot_steps=0", "optim.resume=false", f"optim.logging_steps={max(1, args.steps // 8)}",
                      f"optim.seed={args.seed}", *args.ours_override]
    ours_cmd = [sys.executable, "-m", "prm_distill", "train", "--config", args.ours_config, *ours_overrides]
    stages["ours_train"] = stage(ours_dir, args.reuse, ours_cmd, env, commands)

    scores: dict[str, dict] = {"trl": {}, "ours": {}}
    for split in SPLITS:
        f = out / f"trl_scores_{split}.json"
        stages[f"trl_score_{split}"] = run([str(trl_py), me, "_trl-score", "--model", str(trl_dir / "model"), "--items", str(item_files[split]),
                                            "--out", str(f), "--dtype", args.score_dtype, *common], env, commands)
        scores["trl"][split] = json.loads(f.read_text())
        f = out / f"ours_scores_{split}.json"
        stages[f"ours_score_{split}"] = run([sys.executable, me, "_ours-score", "--model", str(ours_dir), "--items", str(item_files[split]),
                                             "--out", str(f), "--dtype", args.score_dtype, *common], env, commands)
        scores["ours"][split] = json.loads(f.read_text())

    trl_train_res = json.loads((trl_dir / "trl_train.json").read_text())
    sidecar = read_sidecar(ours_dir)
    keys = ("steps", "tokens_seen", "train_wall_s", "tokens_per_s", "rows", "supervised_steps", "n_train_records")
    ours_train_res = {k: sidecar.training.get(k) for k in keys}
    dev_t = sidecar.threshold
    served = {split: apply_rule(sidecar.verifier, [(r.question, r.steps) for r in items_by_split[split]], scores["ours"][split]["scores"])
              for split in SPLITS}
    quality = {
        "trl": evaluate({s: scores["trl"][s]["scores"] for s in SPLITS}, items_by_split, {"fixed": args.threshold}),
        "ours": evaluate({s: scores["ours"][s]["scores"] for s in SPLITS}, items_by_split,
                         {"fixed": args.threshold, **({"dev": dev_t} if dev_t is not None else {})}),
        "ours_with_verifier": evaluate(served, items_by_split, {"fixed": args.threshold, **({"dev": dev_t} if dev_t is not None else {})}),
    }

    def rate(who: str) -> dict:
        """Both rates over the same token count (the trajectories as PRMTrainer encodes them), so the
        ratio is not flattered by our encoder's step tags and window overlap (`own_tokens`)."""
        tok = sum(scores["trl"][s]["tokens"] for s in SPLITS)
        wall = sum(scores[who][s]["wall_s"] for s in SPLITS)
        n = sum(len(scores[who][s]["scores"]) for s in SPLITS)
        return {"tokens": tok, "own_tokens": sum(scores[who][s]["tokens"] for s in SPLITS), "wall_s": round(wall, 2),
                "tokens_per_s": round(tok / max(wall, 1e-9), 1), "items_per_s": round(n / max(wall, 1e-9), 2)}

    scoring = {"trl": rate("trl"), "ours": rate("ours")}
    auroc = {who: {s: quality[who][s]["fixed"]["auroc"] for s in SPLITS} for who in ("trl", "ours")}
    # ours - TRL with a paired bootstrap interval over problems (an item's question; items of one problem are
    # resampled together): is the difference more than this sample's noise?
    auroc_diff = {s: paired_auroc_difference(scores["ours"][s]["scores"], scores["trl"][s]["scores"], [r.labels for r in items_by_split[s]],
                                             groups=[r.question for r in items_by_split[s]])
                  for s in SPLITS}
    ratios = {
        "train_tokens_per_s": round(ours_train_res["tokens_per_s"] / max(trl_train_res["tokens_per_s"], 1e-9), 2),
        "train_wall": round(trl_train_res["train_wall_s"] / max(ours_train_res["train_wall_s"], 1e-9), 2),
        "score_tokens_per_s": round(scoring["ours"]["tokens_per_s"] / max(scoring["trl"]["tokens_per_s"], 1e-9), 2),
        "score_items_per_s": round(scoring["ours"]["items_per_s"] / max(scoring["trl"]["items_per_s"], 1e-9), 2),
    }
    results = {
        "settings": {k: v for k, v in vars(args).items() if k != "func"}, "backbone": backbone, "data": data,
        "train": {"trl": {**trl_train_res, **stages["trl_train"]}, "ours": {**ours_train_res, **stages["ours_train"], "dev_threshold": dev_t}},
        "scoring": scoring, "quality": quality, "auroc_difference": auroc_diff, "ratios": ratios, "stages": stages, "commands": commands,
        "targets": {"train_tokens_per_s": TARGET_TRAIN, "score_tokens_per_s": TARGET_SCORE, "auroc": "ours >= TRL on both splits",
                    "auroc_within_noise": "the 95% paired bootstrap interval of ours - TRL reaches 0 or above on both splits"},
        "targets_met": {"train": ratios["train_tokens_per_s"] >= TARGET_TRAIN, "score": ratios["score_tokens_per_s"] >= TARGET_SCORE,
                        "auroc": all(auroc["ours"][s] >= auroc["trl"][s] for s in SPLITS),
                        "auroc_within_noise": all(auroc_diff[s]["high"] >= 0 for s in SPLITS)},
    }
    write_json(out / "results.json", results)  # strict JSON: a NaN metric (one class empty) is null
    print_report(results, args)
    print(f"\nresults: {out / 'results.json'}")


def print_report(r: dict, args: argparse.Namespace) -> None:
    from prm_distill.metrics import fmt

    tr, q = r["train"], r["quality"]
    print(f"\n== training: {args.steps} steps, batch {args.batch_size}, max_length {args.max_length}, fp32, {r['data']['train_rows']} rows, "
          f"{args.threads} threads ==")
    print(f"{'':10}{'loop wall s':>12}{'process s':>11}{'tokens/s':>10}{'peak RSS GB':>13}{'labels used':>13}")
    trl_used = f"{tr['trl']['step_labels_kept_after_truncation']}/{tr['trl']['step_labels']}"
    print(f"{'TRL':10}{tr['trl']['train_wall_s']:>12}{tr['trl']['process_wall_s']:>11}{tr['trl']['tokens_per_s']:>10}{tr['trl']['peak_rss_gb']:>13}{trl_used:>13}")
    print(f"{'ours':10}{tr['ours']['train_wall_s']:>12}{tr['ours']['process_wall_s']:>11}{tr['ours']['tokens_per_s']:>10}{tr['ours']['peak_rss_gb']:>13}"
          f"{str(tr['ours']['supervised_steps']):>13}")
    dev_t = tr["ours"]["dev_threshold"]
    also = "" if dev_t is None else f", ours also at its dev threshold {dev_t:.3f}"
    print(f"\n== ProcessBench ({args.limit or 'all'} items per split); F1 at the fixed threshold {args.threshold}{also} ==")
    print(f"{'':26}" + "".join(f"{s + ' F1':>11}{s + ' AUROC':>13}" for s in SPLITS))
    rows = [("TRL @fixed", "trl", "fixed"), ("ours @fixed", "ours", "fixed"), ("ours @dev", "ours", "dev"),
            ("ours+verifier @fixed", "ours_with_verifier", "fixed"), ("ours+verifier @dev", "ours_with_verifier", "dev")]
    for name, who, t in rows:
        if t in q[who][SPLITS[0]]:
            print(f"{name:26}" + "".join(f"{fmt(q[who][s][t]['processbench_f1']):>11}{fmt(q[who][s][t]['auroc']):>13}" for s in SPLITS))
    print("ours - TRL step AUROC, 95% paired bootstrap interval over items: "
          + "; ".join(f"{s} {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" for s, d in r["auroc_difference"].items()))
    sc = r["scoring"]
    print("\n== scoring (same items, tokens as PRMTrainer encodes them): TRL-style one trajectory per pass vs our engine, batched ==")
    for who in ("trl", "ours"):
        print(f"{who:10}{sc[who]['tokens_per_s']:>10} tokens/s{sc[who]['items_per_s']:>10} items/s  "
              f"({sc[who]['wall_s']} s; {sc[who]['own_tokens']} tokens in its own encoding)")
    ra, met = r["ratios"], r["targets_met"]
    print(f"\nratios (ours / TRL): training tokens/s {ra['train_tokens_per_s']}x (target {TARGET_TRAIN}x: {'met' if met['train'] else 'NOT met'}), "
          f"training loop wall {ra['train_wall']}x faster, scoring tokens/s {ra['score_tokens_per_s']}x (target {TARGET_SCORE}x: "
          f"{'met' if met['score'] else 'NOT met'}), scoring items/s {ra['score_items_per_s']}x; AUROC equal or better: {'yes' if met['auroc'] else 'NO'} "
          f"(within this sample's noise: {'yes' if met['auroc_within_noise'] else 'NO'})")
    loads = ", ".join(f"{k} {v.get('load_before', '?')}/{v.get('load_after', '?')}" for k, v in r["stages"].items())
    print(f"\nmachine load (1-min average, {os.cpu_count()} CPUs) before/after each stage: {loads}")
    print("\ncommands:\n" + "\n".join(r["commands"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("_trl-train", help="(worker, .venv-trl)")
    for k, t in (("--backbone", str), ("--rows", str), ("--steps", int), ("--batch-size", int), ("--max-length", int),
                 ("--lr", float), ("--gradient-checkpointing", str), ("--seed", int), ("--out", str)):
        w.add_argument(k, type=t, required=True)
    for name in ("_trl-score", "_ours-score"):
        s = sub.add_parser(name, help="(worker)")
        for k in ("--model", "--items", "--out"):
            s.add_argument(k, required=True)
        s.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    for p in (w, sub.choices["_trl-score"], sub.choices["_ours-score"]):
        p.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=80, help="optimizer steps of both trainers")
    ap.add_argument("--batch-size", type=int, default=4, help="rows per step of both trainers")
    ap.add_argument("--max-length", type=int, default=512, help="TRL truncates here; ours windows longer rows")
    ap.add_argument("--rows", type=int, default=None, help="training rows (default steps x batch size: one epoch)")
    ap.add_argument("--dev-rows", type=int, default=100, help="rows of held-out questions for our dev-chosen threshold")
    ap.add_argument("--dev-fraction", type=float, default=0.05, help="share of PRMBench questions held out for dev rows")
    ap.add_argument("--limit", type=int, default=None, help="ProcessBench items per split, a seeded sample (default all: 400 GSM8K, 1000 MATH)")
    ap.add_argument("--threshold", type=float, default=0.5, help="decision threshold fixed in advance")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of every stage")
    ap.add_argument("--score-dtype", default="float32", choices=("float32", "bfloat16"),
                    help="dtype of both scoring sides (training is fp32); bf16 pays on CPUs with AVX512-BF16/AMX")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backbone", default="smollm2", help="given to both trainers after conversion to a transformers folder")
    ap.add_argument("--trl-lr", type=float, default=1e-5, help="TRL's learning rate (PRMConfig's default)")
    ap.add_argument("--trl-gradient-checkpointing", choices=("on", "off"), default="off",
                    help="PRMConfig turns it on by default (less memory, activations recomputed in the backward pass); off compares speed at its best")
    ap.add_argument("--ours-config", default=str(ROOT / "configs" / "prmbench.yaml"), help="our recipe; data, steps, batch, length are overridden")
    ap.add_argument("--ours-override", action="append", default=[], help="extra section.key=value for our trainer, e.g. lora.enabled=false")
    ap.add_argument("--reuse", action="store_true", help="keep a finished training run of either trainer found in --out, with its figures (same settings only)")
    ap.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"))
    ap.add_argument("--out", default=str(ROOT / "runs" / "vs_trl"))
    args = ap.parse_args()
    {"_trl-train": trl_train, "_trl-score": trl_score, "_ours-score": ours_score}.get(args.cmd, lambda a: orchestrate(a))(args)


if __name__ == "__main__":
    main()
