"""Reward quality on real reasoning: ProcessBench F1 and step AUROC of a checkpoint, with the model
alone, the verifier alone and the two composed (the checkpoint's rule), each with its threshold
chosen on the dev split of the training sources, never on ProcessBench (a test set).

    python benchmarks/quality.py --model runs/recipe-cpu --dev runs/data/gsm8k/dev.jsonl --dev runs/data/prmbench/dev.jsonl \
        --test ../shared/data/processbench/gsm8k.json --test ../shared/data/processbench/math.json [--snapshots runs/recipe-cpu/snapshots]

Prints one table (and writes --output JSON). With --snapshots, every exported snapshot is scored too:
the learning curve (F1 and AUROC against training tokens).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from prm_distill.atomic import write_json
from prm_distill.checkpoint import read_sidecar
from prm_distill.evaluate import DEV_LIMIT, dev_sample
from prm_distill.metrics import best_threshold, final_step_profile, fmt, position_profile, report
from prm_distill.records import load_records
from prm_distill.serve import PRMEngine
from prm_distill.verify import DEFAULT_CAP, apply_rule, rule

VARIANTS = ("student", "verifier", "composed")


def _variants(engine: PRMEngine, records, cap: float) -> dict[str, list[list[float]]]:
    items = [(r.question, r.steps) for r in records]
    alone = engine.score(items)  # engine built with verifier=False: the model's scores
    ones = [[1.0] * len(s) for s in alone]
    return {"student": alone, "verifier": apply_rule(rule(cap), items, ones), "composed": apply_rule(rule(cap), items, alone)}


def _test_sample(records: list, limit: int | None, seed: int = 0) -> list:
    """A seeded sample of `limit` test items, in file order (all of them when limit is None): on a
    shared CPU a large student may not score all 1,400 ProcessBench items in the time there is."""
    if limit is None or len(records) <= limit:
        return records
    keep = sorted(random.Random(seed).sample(range(len(records)), limit))
    return [records[i] for i in keep]


def _thresholds(engine: PRMEngine, dev: list, cap: float) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """Dev scores and the threshold of each variant (the one rule, `metrics.best_threshold`)."""
    scores = _variants(engine, dev, cap)
    return scores, {v: (0.5 if v == "verifier" else best_threshold(scores[v], [r.first_error for r in dev])) for v in VARIANTS}


def evaluate_checkpoint(model: str, dev_files: list[str], tests: list[str], dev_limit: int | None, cap: float, device: str = "cpu",
                        test_limit: int | None = None, other_devs: dict[str, list[str]] | None = None) -> dict:
    """`other_devs` (name -> dev files): thresholds also chosen there, and the test scores read with them too
    (the test items are scored once)."""
    engine = PRMEngine.from_checkpoint(model, device=device, verifier=False)
    t0 = time.time()
    dev = dev_sample(dev_files, "jsonl", dev_limit)  # the sample `prm-distill eval --dev` chooses on
    dev_scores, thresholds = _thresholds(engine, dev, cap)
    tr = read_sidecar(model).training
    training = {"steps": tr.get("steps", tr.get("step")), "tokens_seen": tr.get("tokens_seen"), "train_wall_s": tr.get("train_wall_s")}
    out: dict = {"model": model, "training": training,
                 "thresholds": thresholds, "dev": {}, "test": {}, "n_dev": len(dev)}
    for v in VARIANTS:
        out["dev"][v] = report(dev_scores[v], [r.labels for r in dev], [r.first_error for r in dev], thresholds[v])
    # the composed scores of good and bad steps by position (the drift one threshold must live with) and by final
    # step vs earlier ones (a student that doubts every answer step), on every dev split
    out["position_profile"], out["final_step"] = {}, {}

    def profiles(name: str, scores: dict[str, list[list[float]]], records: list) -> None:
        out["position_profile"][name] = position_profile(scores["composed"], [r.labels for r in records])
        out["final_step"][name] = final_step_profile(scores["composed"], [r.labels for r in records])

    profiles("dev", dev_scores, dev)
    others: dict[str, dict] = {}
    odevs: dict[str, tuple[list, dict[str, list[list[float]]]]] = {}
    for name, files in (other_devs or {}).items():
        odev = dev_sample(files, "jsonl", dev_limit)
        oscores, othr = _thresholds(engine, odev, cap)
        odevs[name] = (odev, oscores)
        profiles(name, oscores, odev)
        others[name] = {"dev_files": files, "n_dev": len(odev), "thresholds": othr, "test": {},
                        "dev": {v: report(oscores[v], [r.labels for r in odev], [r.first_error for r in odev], othr[v]) for v in VARIANTS}}
    # threshold transfer on the dev side: each other dev split read at every source's composed threshold
    # ("dev" = the main dev files), so a threshold source can be judged on dev data it did not choose on
    sources = {"dev": thresholds["composed"], **{n: o["thresholds"]["composed"] for n, o in others.items()}}
    for name, (odev, oscores) in odevs.items():
        others[name]["dev_at"] = {src: report(oscores["composed"], [r.labels for r in odev], [r.first_error for r in odev], t)
                                  for src, t in sources.items()}
    for path in tests:
        recs = _test_sample(load_records(path, "processbench"), test_limit)
        scores = _variants(engine, recs, cap)
        labels, first = [r.labels for r in recs], [r.first_error for r in recs]
        out["test"][Path(path).stem] = {v: report(scores[v], labels, first, thresholds[v]) for v in VARIANTS}
        for o in others.values():
            o["test"][Path(path).stem] = {v: report(scores[v], labels, first, o["thresholds"][v]) for v in VARIANTS}
    if others:
        out["other_devs"] = others
    out["eval_wall_s"] = round(time.time() - t0, 1)
    return out


def table(res: dict) -> str:
    lines = [f"{'split':10}{'scores':10}{'F1':>8}{'acc_err':>9}{'acc_ok':>8}{'AUROC':>8}{'thresh':>8}"]
    for split, by_v in [("dev", res["dev"])] + list(res["test"].items()):
        lines += _rows(split, by_v)
    for name, o in res.get("other_devs", {}).items():
        lines.append(f"thresholds chosen on {name} ({o['n_dev']} dev records):")
        for split, by_v in [("dev", o["dev"])] + list(o["test"].items()):
            lines += _rows(split, by_v)
    for name, o in res.get("other_devs", {}).items():
        lines.append(f"{name} dev read at each source's composed threshold:")
        lines += _rows(name, {f"@{src}": r for src, r in o["dev_at"].items()})
    lines.append("composed scores by step position, mean over good / bad steps (the last position pools the rest):")
    for name, rows in res.get("position_profile", {}).items():
        lines.append(f"{name:10}" + " ".join(f"{r['position']}:{fmt(r['mean_good'], 2)}/{fmt(r['mean_bad'], 2)}" for r in rows))
    lines.append("composed scores of final and earlier steps, mean over good / bad steps and AUROC within each:")
    for name, parts in res.get("final_step", {}).items():
        lines.append(f"{name:10}" + " ".join(f"{k}:{fmt(r['mean_good'], 2)}/{fmt(r['mean_bad'], 2)} AUROC {fmt(r['auroc'])}"
                                             for k, r in parts.items()))
    return "\n".join(lines)


def _rows(split: str, by_v: dict) -> list[str]:
    def f(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{x:.3f}"

    return [f"{split:10}{v:10}{f(r['processbench_f1']):>8}{f(r['acc_erroneous']):>9}{f(r['acc_correct']):>8}{f(r['auroc']):>8}{f(r['threshold']):>8}"
            for v, r in by_v.items()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--dev", action="append", required=True, help="dev split of the training sources (thresholds are chosen here)")
    p.add_argument("--test", action="append", required=True, help="ProcessBench file (never used to choose anything)")
    p.add_argument("--other-dev", action="append", default=[], metavar="NAME=FILE[,FILE]",
                   help="also choose thresholds on these dev files and read the same test scores with them (e.g. prm800k=runs/data/prm800k/dev.jsonl)")
    p.add_argument("--dev-limit", type=int, default=DEV_LIMIT, help="score at most this many dev records (whole questions, seeded)")
    p.add_argument("--test-limit", type=int, default=None, help="score a seeded sample of this many items of each test file (default: all)")
    p.add_argument("--cap", type=float, default=None, help="verifier cap (default: the checkpoint's rule, else 0.1)")
    p.add_argument("--snapshots", help="folder of training snapshots (step-N): the learning curve")
    p.add_argument("--curve-test", action="append", help="test files for the learning curve (default: the first --test)")
    p.add_argument("--output", help="JSON report")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (a GPU scores in bf16: benchmarks/gpu_recipe.sh)")
    a = p.parse_args(argv)
    side = read_sidecar(a.model)
    cap = a.cap if a.cap is not None else (side.verifier or {}).get("cap", DEFAULT_CAP)
    other_devs = {}
    for spec in a.other_dev:
        name, sep, files = spec.partition("=")
        if not sep or not name or not files:
            p.error(f"--other-dev takes NAME=FILE[,FILE], got {spec!r}")
        other_devs[name] = files.split(",")
    res = evaluate_checkpoint(a.model, a.dev, a.test, a.dev_limit, cap, a.device, a.test_limit, other_devs)
    print(f"model {a.model}: {res['training']}  (dev {res['n_dev']} records, cap {cap}, eval {res['eval_wall_s']} s)")
    print(table(res), flush=True)
    if a.snapshots:
        curve = []
        snaps = sorted(Path(a.snapshots).glob("step-*"), key=lambda x: int(x.name.split("-")[1]))
        for snap in snaps:
            r = evaluate_checkpoint(str(snap), a.dev, a.curve_test or a.test[:1], a.dev_limit, cap, a.device, a.test_limit, other_devs)
            curve.append(r)
            print(f"\n{snap.name}: {r['training']}\n{table(r)}", flush=True)
        curve.append(res)
        keys = ("processbench_f1", "auroc")
        res["curve"] = [{"step": r["training"]["steps"], "tokens_seen": r["training"]["tokens_seen"],
                         **{f"{split}/{v}/{k}": r["test"][split][v][k] for split in r["test"] for v in VARIANTS for k in keys},
                         **{f"{name}-dev@{src}/{k}": rep[k] for name, o in r.get("other_devs", {}).items()
                            for src, rep in o["dev_at"].items() for k in ("processbench_f1", "threshold")}} for r in curve]
        print("\nlearning curve (test F1 / AUROC, thresholds from dev):")
        for row in res["curve"]:
            print(json.dumps(row))
    if a.output:
        write_json(a.output, res)
        print(f"report: {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
