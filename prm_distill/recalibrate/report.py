"""The recalibration report: the newest earlier report, changes since it, JSON and Markdown output.

A report is a plain dict written as strict JSON (undefined metrics are null), so the next round,
a dashboard or a hand-written history file can be compared with the same code. Any `*.json` under
`--history` holding at least one of auroc, ece, mean_score counts as an earlier report; the newest
is the one with the latest `created_at` (file modification time when it has none).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from ..atomic import atomic_open, json_safe, write_json
from ..metrics import fmt
from .drift import num

log = logging.getLogger("prm_distill.recalibrate")
KIND = "prm_distill.recalibration"
METRICS = ("auroc", "ece", "mean_score", "processbench_f1", "agreement", "agreement_heldout")
FRESH_METRICS = ("mean_score", "agreement")
_MARKERS = ("auroc", "ece", "mean_score")


def _stamp(path: Path, data: Mapping[str, Any]) -> float:
    created = data.get("created_at")
    if isinstance(created, str):
        try:
            return datetime.fromisoformat(created).timestamp()
        except ValueError:
            pass
    return path.stat().st_mtime


def _inside(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def newest_report(history: str | os.PathLike | None, exclude: str | os.PathLike | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(path, report) of the newest earlier report under `history`; None when there is none.
    Files under `exclude` (the current output folder, which a rerun may have filled) are skipped,
    unless it is the history folder itself. A missing folder is empty (the first round); a path
    that is not a folder is an error."""
    if history is None:
        return None
    root = Path(history)
    if not root.exists():
        log.warning("history folder %s does not exist yet: no previous report", root)
        return None
    if not root.is_dir():
        raise ValueError(f"--history must be a folder of earlier reports, got a file: {root}")
    skip = Path(exclude) if exclude and Path(exclude).resolve() != root.resolve() else None  # --output == --history: its report is the previous one
    best: tuple[float, str, Path, dict[str, Any]] | None = None
    for path in root.rglob("*.json"):
        if _inside(path, skip):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            log.warning("history: %s skipped (%s)", path, e)
            continue
        if not isinstance(data, dict) or not any(k in data for k in _MARKERS):
            continue
        key = (_stamp(path, data), str(path))
        if best is None or key > best[:2]:
            best = (*key, path, data)
    return (best[2], best[3]) if best else None


def deltas(current: Mapping[str, Any], previous: Mapping[str, Any]) -> dict[str, float | None]:
    """current - previous per metric (None when either is undefined). `agreement` is compared only
    when both reports measured it on the same kind of data (fresh rollouts or held-out labels)."""
    out: dict[str, float | None] = {}
    for key in METRICS:
        cur, prev = num(current, key), num(previous, key)
        same_source = key != "agreement" or current.get("agreement_source") == previous.get("agreement_source", "heldout")
        out[key] = cur - prev if cur is not None and prev is not None and same_source else None
    for key in FRESH_METRICS:
        cur, prev = num(current, "fresh", key), num(previous, "fresh", key)
        out[f"fresh_{key}"] = cur - prev if cur is not None and prev is not None else None
    return out


def previous_entry(path: Path, previous: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The report's `previous` block: where the earlier report is, its values and the deltas."""
    values = {k: num(previous, k) for k in METRICS}
    values.update({f"fresh_{k}": num(previous, "fresh", k) for k in FRESH_METRICS})
    return {"path": str(path), "created_at": previous.get("created_at"), "values": values, "deltas": deltas(current, previous)}


def write_report(out_dir: str | os.PathLike, report: Mapping[str, Any]) -> tuple[Path, Path]:
    """report.json (strict JSON, atomic) and report.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    safe = json_safe(report)
    write_json(out / "report.json", safe)
    with atomic_open(out / "report.md") as f:
        f.write(render_markdown(safe))
    return out / "report.json", out / "report.md"


def _fmt(v: Any, signed: bool = False) -> str:
    return fmt(v, 4, signed)


def _changes(kind: Mapping[str, Any]) -> str:
    """An audit kind's mean change of each trajectory aggregation, as one line."""
    return ", ".join(f"{name} {_fmt(x.get('delta'), signed=True)}" for name, x in kind["aggregations"].items())


def render_markdown(r: Mapping[str, Any]) -> str:
    """A human-readable summary of a (json-safe) report."""
    prev = r.get("previous") or {}
    d = prev.get("deltas") or {}
    fresh = r.get("fresh") or {}
    lines = [f"# PRM recalibration report: {Path(str(r.get('model', '?'))).name}", ""]
    verdict = []  # the command's verdict lines, its conclusion in bold when it advises re-distillation
    for line in str(r.get("verdict") or "").splitlines():
        if line.startswith("-> "):
            line = f"**{line[3:]}**" if r.get("redistill_advised") else line[3:]
        verdict.append(f"- {line}")
    lines += [f"- created: {r.get('created_at')}", f"- model: `{r.get('model')}`",
              f"- held-out set: `{r.get('heldout')}` ({r.get('n_items')} trajectories, {r.get('n_supervised_steps')} supervised steps)",
              *verdict,
              f"- previous report: {('`' + prev['path'] + '`') if prev else 'none (first round: no drift rule can fire)'}",
              f"- scores: {r.get('scores_source')}", ""]
    lines += ["| metric | value | change since previous |", "|---|---|---|"]
    rows = [("AUROC", "auroc"), ("ECE", "ece"), ("mean score", "mean_score"), ("ProcessBench F1", "processbench_f1"),
            (f"agreement ({r.get('agreement_source')})", "agreement"), ("agreement with held-out labels", "agreement_heldout")]
    for name, key in rows:
        lines.append(f"| {name} | {_fmt(r.get(key))} | {_fmt(d.get(key), signed=True)} |")
    if fresh:
        lines.append(f"| fresh rollouts: mean score | {_fmt(fresh.get('mean_score'))} "
                     f"| {_fmt(d.get('fresh_mean_score'), signed=True)} |")
        lines.append(f"| fresh rollouts: agreement with the judge | {_fmt(fresh.get('agreement'))} "
                     f"| {_fmt(d.get('fresh_agreement'), signed=True)} |")
    lines += ["", "## Drift rules", ""]
    for name, det in (r.get("drift_details") or {}).items():
        state = "RAISED" if det.get("raised") else ("not raised" if "note" not in det else det["note"])
        lines.append(f"- `{name}`: {det.get('rule')} -> {state}")
    floor = (r.get("floor") or {}).get("details") or {}
    if floor:
        lines += ["", "## Floors (every round, no history needed)", ""]
        for name, det in floor.items():
            state = "RAISED" if det.get("raised") else ("met" if "note" not in det else det["note"])
            lines.append(f"- `{name}`: {det.get('rule')} -> {state}")
    c = r.get("calibration") or {}
    lines += ["", "## Calibration", "",
              (f"- current (served): {c.get('current')}; fitted: {c.get('method')} "
               f"{json.dumps(c.get('params')) if c.get('method') == 'temperature' else ''}").rstrip(),
              f"- ECE on the evaluation split: raw {_fmt(c.get('ece_raw'))}, served now {_fmt(c.get('ece_before'))}, "
              f"with the new calibration {_fmt(c.get('ece_after'))}",
              f"- {c.get('reason', '')}", f"- rule: {c.get('rule')}"]
    if fresh:
        dist = fresh.get("label_distribution") or {}
        lines += ["", "## Fresh rollouts", "",
                  f"- `{fresh.get('path')}`: {fresh.get('n_sampled')} of {fresh.get('n_rollouts')} rollouts sampled, "
                  f"{fresh.get('n_labelled')} labelled by {fresh.get('judges')}",
                  f"- judge labels: bad {_fmt(dist.get('bad'))}, neutral {_fmt(dist.get('neutral'))}, good {_fmt(dist.get('good'))} "
                  f"of {dist.get('n')} supervised steps"]
    a = r.get("audits") or {}
    if a:
        v, p = a.get("verbosity") or {}, a.get("position_bias") or {}
        lines += ["", "## Audits", "", f"- flags: {', '.join(a.get('flags') or []) or 'none'}",
                  f"- verbosity ({v.get('n_trajectories')} all-correct trajectories, {v.get('n_inserted')} steps inserted): "
                  f"rule {v.get('rule')}"]
        for kind, k in (v.get("kinds") or {}).items():
            lines.append(f"  - {kind}: original steps {_fmt(k.get('original_step_delta'), signed=True)}, "
                         f"inserted steps score {_fmt(k.get('inserted_step_mean'))}; aggregation changes: {_changes(k)}")
        sc = a.get("shortcuts") or {}
        if sc:
            lines.append(f"- shortcuts ({sc.get('n_trajectories')} all-correct trajectories of 3 or more steps): rule {sc.get('rule')}")
            for kind, k in (sc.get("kinds") or {}).items():
                lines.append(f"  - {kind}: {_fmt(k.get('steps_kept'))} of {_fmt(k.get('steps_before'))} steps kept; aggregation changes: {_changes(k)}")
        lines.append(f"- position bias: slope {_fmt(p.get('slope'), signed=True)} over {p.get('n_trajectories')} all-correct trajectories "
                     f"({p.get('rule')}) -> {'RAISED' if p.get('flag') else 'not raised'}")
        sp = a.get("self_preference")
        if sp:
            gens = "; ".join(f"{g}: score {_fmt(x['mean_score'])}, label {_fmt(x['mean_label'])} (n={x['n']})" for g, x in sp["generators"].items())
            lines.append(f"- self-preference on {sp['n_problems']} shared problems: {gens}")
    lines += ["", "## Plots", ""] + [f"![{name}]({file})" for name, file in (r.get("plots") or {}).items()]
    return "\n".join(lines) + "\n"
