"""The run's Markdown report (`iter-K/report.md`) and the one-screen summary, both read from the
manifest alone: a skipped stage reports what it recorded when it ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..atomic import atomic_open
from ..metrics import fmt
from .stages import STAGES, Context

EVAL_KEYS = ("auroc", "ece", "processbench_f1", "step_accuracy", "mean_score", "threshold")


def _status(data: dict[str, Any], stage: str) -> str:
    inv = data["invocations"][-1]
    e = data["stages"].get(stage)
    if stage in inv["ran"]:
        return "ran"
    if stage in inv["skipped"]:
        return "skipped (unchanged)"
    if e and e.get("status") == "failed":
        return "FAILED"
    return "not run"


def _link(path: str | Path, base: Path) -> str:
    rel = os.path.relpath(path, base)
    return f"[{rel}]({rel})"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def _previous_eval(ctx: Context) -> list[tuple[int, dict[str, Any]]]:
    """Held-out metrics of every earlier iteration (their recalibration reports), for the history table."""
    import json

    rows = []
    for k in range(1, ctx.iteration):
        path = ctx.folder("recalibrate", k) / "report.json"
        if path.is_file():
            rows.append((k, json.loads(path.read_text(encoding="utf-8"))))
    return rows


def render(ctx: Context, data: dict[str, Any], elapsed_s: float) -> str:
    st = data["stages"]
    base = ctx.iter_dir
    s = {name: st.get(name, {}).get("summary", {}) for name in (stage.name for stage in STAGES)}
    lines = [f"# Pipeline `{ctx.cfg.name}`, iteration {ctx.iteration}", "",
             f"This invocation took {elapsed_s:.0f}s. Held-out set: `{ctx.heldout}` (the same for every iteration). "
             f"Manifest: {_link(base / 'manifest.json', base)}.", "", "## Stages", ""]
    rows = []
    for stage in STAGES:
        e = st.get(stage.name)
        if not stage.enabled(ctx):
            rows.append([stage.name, "disabled", "", ""])
            continue
        rows.append([stage.name, _status(data, stage.name), f"{e['elapsed_s']:.0f}" if e else "",
                     _link(ctx.folder(stage.name), base) if e else ""])
    lines += _table(["stage", "this run", "seconds (when it ran)", "folder"], rows)
    if e := st.get(_failed(data) or ""):
        lines += [f"**Failed:** `{e.get('error')}`. Rerun the same command to resume from this stage.", ""]
    if r := s["rollout"]:
        lines += ["## Rollouts", ""] + _table(["generator", "problems", "samples", "accuracy", f"pass@{r.get('k')}", "no answer", "mean steps"],
                                              [[r.get("generator"), r.get("problems"), r.get("samples"), fmt(r.get("accuracy")), fmt(r.get("pass_at_k")),
                                                r.get("no_answer_found"), fmt(r.get("mean_steps"))]])
    if r := s["label"]:
        dist = r.get("label_distribution") or {}
        lines += ["## Labels", ""] + _table(["records", "steps", "labelled steps", "label distribution", "mean label"],
                                            [[r.get("records"), r.get("steps"), r.get("labelled_steps"),
                                              ", ".join(f"{k}: {v}" for k, v in dist.items()), fmt(r.get("mean_label"))]])
    if r := s["train"]:
        lines += ["## Training", ""] + _table(["backbone", "steps", "train records", "tokens/s", "wall s"],
                                              [[f"`{r.get('backbone')}`", r.get("steps"), r.get("n_train_records"), r.get("tokens_per_s"),
                                                r.get("train_wall_s")]])
    if r := s["eval"]:
        lines += ["## Held-out evaluation", ""] + _table(list(EVAL_KEYS), [[fmt(r.get(k)) for k in EVAL_KEYS]])
        lines += [f"Threshold source: {r.get('threshold_source')}.", ""]
    if r := s["serve"]:
        lines += ["## Serve check", "", "```", r.get("log", ""), "```", ""]
    if r := s["rl"]:
        lines += ["## RL scoring (PRMRunner + DistilledPRMScorer)", "",
                  f"Runner built from `{r.get('trainer_config')}`; rollouts {', '.join(r.get('rollouts', []))}.",
                  "", "```", r.get("table", ""), "```", ""]
    if r := s["recalibrate"]:
        c = r.get("calibration") or {}
        rec = ctx.folder("recalibrate")
        lines += ["## Recalibration", ""] + _table(
            ["auroc", "ece", "processbench_f1", "mean score", "agreement", "drift flags", "audit flags"],
            [[fmt(r.get("auroc")), fmt(r.get("ece")), fmt(r.get("processbench_f1")), fmt(r.get("mean_score")), fmt(r.get("agreement_heldout")),
              ", ".join(r.get("drift") or []) or "none", ", ".join(r.get("audit_flags") or []) or "none"]])
        lines += [f"Compared with: {r.get('previous') or 'nothing (first iteration)'}. Calibration {c.get('method')}: ECE {fmt(c.get('ece_before'))} -> "
                  f"{fmt(c.get('ece_after'))} on the check split ({'adopted' if c.get('adopted') else 'not adopted'}). "
                  f"Full report: {_link(rec / 'report.md', base)}.", ""]
        lines += [f"![{name}]({os.path.relpath(rec / path, base)})" for name, path in (r.get("plots") or {}).items()] + [""]
    if history := _previous_eval(ctx):
        cur = s["recalibrate"]
        rows = [[str(k), fmt(h.get("auroc")), fmt(h.get("ece")), fmt(h.get("processbench_f1")), ", ".join(h.get("drift") or []) or "none"]
                for k, h in history]
        if cur:
            rows.append([str(ctx.iteration), fmt(cur.get("auroc")), fmt(cur.get("ece")), fmt(cur.get("processbench_f1")),
                         ", ".join(cur.get("drift") or []) or "none"])
        lines += ["## Iterations on the same held-out set", ""] + _table(["iteration", "auroc", "ece", "processbench_f1", "drift"], rows)
    return "\n".join(lines).rstrip() + "\n"


def _failed(data: dict[str, Any]) -> str | None:
    return data["invocations"][-1].get("failed")


def write_report(ctx: Context, data: dict[str, Any], elapsed_s: float) -> Path:
    path = ctx.iter_dir / "report.md"
    with atomic_open(path) as f:
        f.write(render(ctx, data, elapsed_s))
    return path


def summary_lines(ctx: Context, data: dict[str, Any]) -> list[str]:
    """The one-screen summary printed at the end."""
    st = data["stages"]
    inv = data["invocations"][-1]
    s = {name: st.get(name, {}).get("summary", {}) for name in (stage.name for stage in STAGES)}
    out = [f"== pipeline {ctx.cfg.name}, iteration {ctx.iteration}: ran {', '.join(inv['ran']) or 'nothing'}; "
           f"skipped {', '.join(inv['skipped']) or 'nothing'}"]
    timing = ", ".join(f"{n} {e['elapsed_s']:.0f}s" for n, e in st.items() if e.get("status") == "done")
    out.append(f"   stage times (when they ran): {timing}")
    if r := s["rollout"]:
        out.append(f"   rollouts: {r.get('samples')} samples of {r.get('problems')} problems from {r.get('generator')}, accuracy {fmt(r.get('accuracy'))}")
    if r := s["label"]:
        out.append(f"   labels: {r.get('labelled_steps')}/{r.get('steps')} steps labelled in {r.get('records')} records")
    if r := s["train"]:
        out.append(f"   train: {r.get('steps')} steps from {r.get('backbone')} on {r.get('n_train_records')} records, {r.get('tokens_per_s')} tokens/s")
    if r := s["eval"]:
        out.append("   held-out: " + ", ".join(f"{k} {fmt(r.get(k))}" for k in EVAL_KEYS))
    if r := s["serve"]:
        out.append(f"   serve: {r.get('requests')} requests over HTTP, server stopped")
    if r := s["rl"]:
        out.append(f"   rl: PRMRunner + DistilledPRMScorer scored {len(r.get('rollouts', []))} two-turn rollouts in every shaping mode")
    if r := s["recalibrate"]:
        out.append(f"   recalibration: drift {', '.join(r.get('drift') or []) or 'none'}; vs {r.get('previous') or 'no earlier report'}")
    out.append(f"   checkpoint: {ctx.model_dir}   manifest: {ctx.iter_dir / 'manifest.json'}")
    return out
